package qwenvl

import (
	"fmt"
	"math"

	"github.com/mtrl-go/mtrl/examples/internal/mixedbf16"
	"github.com/mtrl-go/mtrl/examples/internal/probe"
	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/tensor"
)

// errs keeps the first error of a sequence of op calls, so a block reads as its ops.
type errs struct{ err error }

func (e *errs) do(err error) {
	if e.err == nil {
		e.err = err
	}
}

// f32 allocates a zeroed host float32 tensor and returns its elements too.
func f32(shape ...int) (*tensor.Tensor, []float32) {
	n := 1
	for _, d := range shape {
		n *= d
	}
	v := make([]float32, n)
	return tensor.Must(tensor.FromFloat32(v, shape...)), v
}

// host returns the elements of a host float32 tensor made by this package.
func host(t *tensor.Tensor) []float32 {
	v, _ := t.Float32s()
	return v
}

func addTo(dst, src []float32) {
	for i, v := range src {
		dst[i] += v
	}
}

// add is dst += src on their backend: the same float32 additions as addTo.
func add(dst, src *tensor.Tensor) error { return tensor.Axpby(dst, src, 1, 1) }

// zero sets a float32 tensor to zero on its backend.
func zero(x *tensor.Tensor) error { return tensor.Axpby(x, x, 0, 0) }

// onHost reports whether the tower computes on the CPU backend.
func (t *Vision) onHost() bool { return t.b == tensor.CPU() }

// alloc returns a zeroed float32 tensor on the tower's backend. A failed allocation is kept in
// e, and a host tensor of the shape stands in so the ops after it only return errors.
func (t *Vision) alloc(e *errs, shape ...int) *tensor.Tensor {
	if t.onHost() {
		x, _ := f32(shape...)
		return x
	}
	x, err := tensor.New(t.b, tensor.Float32, shape...)
	if err != nil {
		e.do(err)
		x, _ = f32(shape...)
	}
	return x
}

// upload puts a host tensor (pixels, ids, weights) on the tower's backend: x itself on the CPU.
func (t *Vision) upload(x *tensor.Tensor, err error) (*tensor.Tensor, error) {
	if err != nil || t.onHost() {
		return x, err
	}
	return tensor.To(t.b, x)
}

// ints returns int32 values as a tensor on the tower's backend.
func (t *Vision) ints(e *errs, v []int32, shape ...int) *tensor.Tensor {
	x, err := t.upload(tensor.FromInt32(v, shape...))
	e.do(err)
	return x
}

// view returns x reshaped (a view), keeping a failure in e.
func view(e *errs, x *tensor.Tensor, shape ...int) *tensor.Tensor {
	y, err := x.Reshape(shape...)
	if err != nil {
		e.do(err)
		return x
	}
	return y
}

// rows returns the view of x's rows [lo, hi), keeping a failure in e.
func rows(e *errs, x *tensor.Tensor, lo, hi int) *tensor.Tensor {
	y, err := x.Rows(lo, hi)
	if err != nil {
		e.do(err)
		return x
	}
	return y
}

// param is one weight, named as Hugging Face's state_dict names it (the older layout, visual.*
// and model.*), with its gradient (nil until the first backward) and packed form (matrices).
type param struct {
	name        string
	value, grad *tensor.Tensor
	packed      *tensor.PackedWeight
}

// linear is a projection y = x·Wᵀ (+ b).
type linear struct {
	w    *tensor.PackedWeight
	b    *tensor.Tensor
	name string
	lora *towerAdapter // nil: none (lora.go)
}

// norm is a LayerNorm (b set, Qwen2-VL) or an RMSNorm (Qwen2.5-VL), eps 1e-6.
type norm struct {
	w, b *tensor.Tensor
	name string
}

const visionEps = 1e-6

// visionBlock is one transformer block of the tower: pre-norm attention and MLP with residuals.
type visionBlock struct {
	norm1, norm2 norm
	qkv, proj    linear
	// Qwen2-VL: fc1, fc2 (act between); Qwen2.5-VL: gate, up, down (act(gate)·up).
	fc1, fc2, gate, up, down linear
}

// Vision is the vision tower of Qwen2-VL or Qwen2.5-VL in float32: a Conv3d patch embedding
// computed as one GEMM over pixel_values rows, transformer blocks with 2D rotary embeddings
// and bidirectional attention within each frame (Qwen2.5-VL: within windows, except in the
// full-attention blocks), and the PatchMerger that turns each merge_size² patches into one
// language-model embedding.
type Vision struct {
	cfg    VisionConfig
	gated  bool // Qwen2.5-VL: RMSNorm and a gated MLP
	params []*param
	byName map[string]*param

	patch  linear
	blocks []visionBlock
	lnQ    norm
	mlp0   linear
	mlp2   linear
	rope   tensor.RoPEConfig
	attn   tensor.AttentionConfig
	mp     *visionMixed         // bf16 mixed precision (vision_mixed.go); nil: float32
	cv     *mixedbf16.Converter // float32 ↔ bfloat16 on the backend (conv); nil until used
	// Frozen vision towers run no backward (freeze_vision_tower), adapters included.
	Frozen bool
	// b is where the weights, activations and gradients live (LoadOn).
	b tensor.Backend
	// LoRA (lora.go): with it the base is frozen; loraOff disables the adapters (Model.Base).
	lora    *towerLoRA
	loraOff bool
	bwd     *VisionActs // the activations of the Backward under way (its adapters read them)
	// gradBF16 (SetBF16Backward): in bf16 mode the backward's products on bfloat16 gradients.
	gradBF16 bool
}

// visionSpecs lists the tower's weights, named as Hugging Face's state_dict (visual.*).
func visionSpecs(variant string, v VisionConfig) []specShape {
	var s []specShape
	add := func(name string, shape ...int) { s = append(s, specShape{name, shape}) }
	add("visual.patch_embed.proj.weight", v.Dim, v.InChannels, v.TemporalPatchSize, v.PatchSize, v.PatchSize)
	for i := range v.Depth {
		p := fmt.Sprintf("visual.blocks.%d.", i)
		add(p+"norm1.weight", v.Dim)
		if variant == Qwen2VL {
			add(p+"norm1.bias", v.Dim)
		}
		add(p+"norm2.weight", v.Dim)
		if variant == Qwen2VL {
			add(p+"norm2.bias", v.Dim)
		}
		add(p+"attn.qkv.weight", 3*v.Dim, v.Dim)
		add(p+"attn.qkv.bias", 3*v.Dim)
		add(p+"attn.proj.weight", v.Dim, v.Dim)
		add(p+"attn.proj.bias", v.Dim)
		if variant == Qwen2VL {
			add(p+"mlp.fc1.weight", v.MLPDim, v.Dim)
			add(p+"mlp.fc1.bias", v.MLPDim)
			add(p+"mlp.fc2.weight", v.Dim, v.MLPDim)
			add(p+"mlp.fc2.bias", v.Dim)
		} else {
			for _, n := range []string{"gate_proj", "up_proj"} {
				add(p+"mlp."+n+".weight", v.MLPDim, v.Dim)
				add(p+"mlp."+n+".bias", v.MLPDim)
			}
			add(p+"mlp.down_proj.weight", v.Dim, v.MLPDim)
			add(p+"mlp.down_proj.bias", v.Dim)
		}
	}
	m := v.Dim * v.MergeSize * v.MergeSize
	add("visual.merger.ln_q.weight", v.Dim)
	if variant == Qwen2VL {
		add("visual.merger.ln_q.bias", v.Dim)
	}
	add("visual.merger.mlp.0.weight", m, m)
	add("visual.merger.mlp.0.bias", m)
	add("visual.merger.mlp.2.weight", v.OutDim, m)
	add("visual.merger.mlp.2.bias", v.OutDim)
	return s
}

// specShape is a weight's name and shape.
type specShape struct {
	name  string
	shape []int
}

// newVision builds the tower on backend b from its weights (float32, by name, already checked
// for shape), uploading each once.
func newVision(variant string, v VisionConfig, weights map[string][]float32, b tensor.Backend) (*Vision, error) {
	t := &Vision{cfg: v, gated: variant == Qwen25VL, byName: map[string]*param{}, b: b}
	for _, s := range visionSpecs(variant, v) {
		shape := s.shape
		if len(shape) == 5 { // the Conv3d kernel is a [Dim, C·T·P·P] matrix over pixel_values rows
			shape = []int{v.Dim, v.PatchDim()}
		}
		val, err := t.upload(tensor.FromFloat32(weights[s.name], shape...))
		if err != nil {
			return nil, fmt.Errorf("qwenvl: %s: %w", s.name, err)
		}
		p := &param{name: s.name, value: val}
		t.params = append(t.params, p)
		t.byName[s.name] = p
	}
	var err error
	lin := func(name string, bias bool) linear {
		p := t.byName[name+".weight"]
		if err == nil {
			p.packed, err = tensor.PackWeight(p.value)
		}
		l := linear{w: p.packed, name: name}
		if bias {
			l.b = t.byName[name+".bias"].value
		}
		return l
	}
	nrm := func(name string) norm {
		n := norm{w: t.byName[name+".weight"].value, name: name}
		if b := t.byName[name+".bias"]; b != nil {
			n.b = b.value
		}
		return n
	}
	t.patch = lin("visual.patch_embed.proj", false)
	t.blocks = make([]visionBlock, v.Depth)
	for i := range t.blocks {
		p := fmt.Sprintf("visual.blocks.%d.", i)
		b := &t.blocks[i]
		b.norm1, b.norm2 = nrm(p+"norm1"), nrm(p+"norm2")
		b.qkv, b.proj = lin(p+"attn.qkv", true), lin(p+"attn.proj", true)
		if t.gated {
			b.gate, b.up, b.down = lin(p+"mlp.gate_proj", true), lin(p+"mlp.up_proj", true), lin(p+"mlp.down_proj", true)
		} else {
			b.fc1, b.fc2 = lin(p+"mlp.fc1", true), lin(p+"mlp.fc2", true)
		}
	}
	t.lnQ = nrm("visual.merger.ln_q")
	t.mlp0, t.mlp2 = lin("visual.merger.mlp.0", true), lin("visual.merger.mlp.2", true)
	if err != nil {
		return nil, err
	}
	// The 2D rotary embedding: head_dim/4 frequencies 1/10000^(4i/head_dim), the first half of
	// the rotated pairs at the patch's row, the second at its column.
	hd := v.HeadDim()
	inv := nnref.DefaultRoPEFrequencies[float32](hd/2, 10000)
	freq := make([]float64, 0, hd/2)
	for range 2 {
		for _, f := range inv {
			freq = append(freq, float64(f))
		}
	}
	t.rope = tensor.RoPEConfig{Sections: []int{hd / 4, hd / 4}, Frequencies: freq}
	t.attn = tensor.DefaultAttentionConfig(hd, false)
	t.attn.Scale = float32(math.Pow(float64(hd), -0.5))
	return t, nil
}

// Config returns the tower's configuration.
func (t *Vision) Config() VisionConfig { return t.cfg }

// layout is the token order of a forward: the 2D rotary positions, the attention segments,
// the rows that split the qkv projection and, for Qwen2.5-VL, the window permutation of the
// merge units; the index tensors on the tower's backend.
type layout struct {
	n        int            // patches
	pos      *tensor.Tensor // int32 [2, n]: row, column of each patch (in the permuted order)
	cuFull   *tensor.Tensor // one segment per frame
	cuWindow *tensor.Tensor // Qwen2.5-VL: one segment per window; nil for Qwen2-VL
	window   []int          // Qwen2.5-VL: merge unit at permuted position i; nil: identity
	// win and winInv gather merge units into the window order and back (nil: identity).
	win, winInv *tensor.Tensor
	// split gathers the [3n, Dim] rows of the qkv projection (q, k, v of token r at 3r, 3r+1,
	// 3r+2) into q's n rows, k's, then v's; merge gathers them back.
	split, merge *tensor.Tensor
}

// newLayout checks the grids against the number of pixel rows and computes the positions,
// segments and window order of Hugging Face's rot_pos_emb and get_window_index.
func (t *Vision) newLayout(grids []Grid, rows int) (*layout, error) {
	const op = "qwenvl.Vision"
	m := t.cfg.MergeSize
	n := 0
	for i, g := range grids {
		if g.T <= 0 || g.H <= 0 || g.W <= 0 || g.H%m != 0 || g.W%m != 0 {
			return nil, tensor.Errorf(tensor.ErrShape, op, "grids", "grid %d is %v: want positive sizes, H and W multiples of spatial_merge_size %d", i, g, m)
		}
		n += g.T * g.H * g.W
	}
	if len(grids) == 0 || n != rows {
		return nil, tensor.Errorf(tensor.ErrShape, op, "pixels", "has %d rows, the %d grids need %d", rows, len(grids), n)
	}
	hpos, wpos := make([]int32, 0, n), make([]int32, 0, n)
	cu := []int32{0}
	for _, g := range grids {
		for range g.T {
			for bh := range g.H / m {
				for bw := range g.W / m {
					for mh := range m {
						for mw := range m {
							hpos = append(hpos, int32(bh*m+mh))
							wpos = append(wpos, int32(bw*m+mw))
						}
					}
				}
			}
			cu = append(cu, cu[len(cu)-1]+int32(g.H*g.W))
		}
	}
	var e errs
	l := &layout{n: n, cuFull: t.ints(&e, cu, len(cu))}
	split, merge := make([]int32, 3*n), make([]int32, 3*n)
	for j := range 3 {
		for r := range n {
			split[j*n+r] = int32(3*r + j)
			merge[3*r+j] = int32(j*n + r)
		}
	}
	l.split, l.merge = t.ints(&e, split, 3*n), t.ints(&e, merge, 3*n)
	if t.gated {
		unit := m * m
		ws := t.cfg.WindowSize / m / t.cfg.PatchSize
		cuw := []int32{0}
		base := 0
		for _, g := range grids {
			lh, lw := g.H/m, g.W/m
			nh, nw := (lh+ws-lh%ws)/ws, (lw+ws-lw%ws)/ws
			for tt := range g.T {
				for wh := range nh {
					for ww := range nw {
						count := 0
						for i := range ws {
							for j := range ws {
								r, c := wh*ws+i, ww*ws+j
								if r < lh && c < lw {
									l.window = append(l.window, base+tt*lh*lw+r*lw+c)
									count++
								}
							}
						}
						if count > 0 { // torch.unique_consecutive drops the empty windows
							cuw = append(cuw, cuw[len(cuw)-1]+int32(count*unit))
						}
					}
				}
			}
			base += g.T * lh * lw
		}
		l.cuWindow = t.ints(&e, cuw, len(cuw))
		hp, wp := make([]int32, n), make([]int32, n)
		win, inv := make([]int32, len(l.window)), make([]int32, len(l.window))
		for i, u := range l.window {
			copy(hp[i*unit:(i+1)*unit], hpos[u*unit:(u+1)*unit])
			copy(wp[i*unit:(i+1)*unit], wpos[u*unit:(u+1)*unit])
			win[i], inv[u] = int32(u), int32(i)
		}
		hpos, wpos = hp, wp
		l.win, l.winInv = t.ints(&e, win, len(win)), t.ints(&e, inv, len(inv))
	}
	l.pos = t.ints(&e, append(hpos, wpos...), 2, n)
	return l, e.err
}

// permute returns x [units·size] with its units (blocks of size values) gathered by ids:
// unit i of the result is unit ids[i] of x.
func (t *Vision) permute(e *errs, x, ids *tensor.Tensor, size int) *tensor.Tensor {
	k := ids.Dim(0)
	y := t.alloc(e, x.Shape()...)
	e.do(tensor.Embedding(view(e, y, k, size), view(e, x, k, size), ids))
	return y
}

// blockActs are what a block's backward reads.
type blockActs struct {
	xIn, h1, q, k, v, attn, lse, xMid, h2, a, b, act, prod *tensor.Tensor
}

// VisionActs are the activations a training Forward keeps for Backward.
type VisionActs struct {
	l      *layout
	pixels *tensor.Tensor
	blocks []blockActs
	xLast  *tensor.Tensor // ln_q's input (permuted order)
	lnOut  *tensor.Tensor // [n/unit, unit·Dim]
	pre    *tensor.Tensor // mlp.0's output (GELU's input)
	gelu   *tensor.Tensor
	lora   map[*towerAdapter]loraAct
}

// Forward runs the tower over pixel_values [rows, PatchDim] of the images or videos with these
// grids and returns their language-model embeddings [rows/merge_size², OutDim] on the tower's
// backend, in the order of the grids (each image's tokens consecutive). With keep it also
// returns the activations Backward needs.
func (t *Vision) Forward(pixels []float32, grids []Grid, keep bool) (*tensor.Tensor, *VisionActs, error) {
	v := t.cfg
	pd := v.PatchDim()
	if len(pixels)%pd != 0 {
		return nil, nil, tensor.Errorf(tensor.ErrShape, "qwenvl.Vision.Forward", "pixels", "%d values are not rows of %d", len(pixels), pd)
	}
	l, err := t.newLayout(grids, len(pixels)/pd)
	if err != nil {
		return nil, nil, err
	}
	n, d, hd := l.n, v.Dim, v.HeadDim()
	unit := v.MergeSize * v.MergeSize
	var e errs
	fb := &fwdBufs{t: t, keep: keep}
	px, err := t.upload(tensor.FromFloat32(pixels, n, pd))
	if err != nil {
		return nil, nil, err
	}
	px = t.store(&e, px) // bf16 mode: rounded
	stage(&e, px, "vision.pixels", -1)
	a := &VisionActs{l: l, pixels: px, lora: map[*towerAdapter]loraAct{}}
	var ka *VisionActs // the adapters keep their activations in a training pass
	if keep {
		ka = a
	}
	x := t.alloc(&e, n, d)
	e.do(tensor.Linear(x, px, t.patch.w))
	e.do(t.adapt(x, px, t.patch, ka))
	if l.win != nil {
		x = t.permute(&e, x, l.win, unit*d)
	}
	t.round(&e, x)
	stage(&e, x, "vision.patch_embed", -1)
	if keep {
		a.blocks = make([]blockActs, len(t.blocks))
	}
	for i := range t.blocks {
		blk := &t.blocks[i]
		cu := l.cuFull
		if l.cuWindow != nil && !t.fullBlock(i) {
			cu = l.cuWindow
		}
		var s blockActs
		s.xIn = x
		s.h1 = fb.get(&e, "h1", n, d)
		e.do(t.normFwd(s.h1, x, blk.norm1))
		s.h1 = fb.gemmIn(&e, "h1", s.h1) // bf16 mode: the projections read (and the backward keeps) bfloat16
		qkv := fb.get(&e, "qkv", n, 3*d)
		e.do(linearInto(qkv, s.h1, blk.qkv))
		e.do(t.adapt(qkv, s.h1, blk.qkv, ka))
		// q, k and v: the qkv rows gathered into three consecutive blocks of n rows.
		qkvp := fb.get(&e, "qkvp", 3*n, v.Heads, hd)
		e.do(tensor.Embedding(view(&e, qkvp, 3*n, d), view(&e, qkv, 3*n, d), l.split))
		s.q, s.k, s.v = rows(&e, qkvp, 0, n), rows(&e, qkvp, n, 2*n), rows(&e, qkvp, 2*n, 3*n)
		t.round(&e, qkvp)
		e.do(tensor.RoPE(s.q, s.q, l.pos, t.rope))
		e.do(tensor.RoPE(s.k, s.k, l.pos, t.rope))
		t.round(&e, s.q)
		t.round(&e, s.k)
		stage(&e, qkvp, "vision.block.%d.qkv", i)
		s.attn = fb.get(&e, "attn", n, v.Heads, hd)
		ai := tensor.AttentionInputs{Q: s.q, K: s.k, V: s.v, CuSeqlensQ: cu, CuSeqlensK: cu}
		if keep {
			s.lse = t.alloc(&e, n, v.Heads)
			e.do(tensor.AttentionLSE(s.attn, s.lse, ai, t.attn))
		} else {
			e.do(tensor.Attention(s.attn, ai, t.attn))
		}
		stage(&e, s.attn, "vision.block.%d.attn", i)
		s.attn = fb.gemmIn(&e, "attn", s.attn)
		o := fb.get(&e, "o", n, d)
		e.do(linearInto(o, s.attn, blk.proj))
		e.do(t.adapt(o, s.attn, blk.proj, ka))
		e.do(t.residual(o, x))
		s.xMid = o
		stage(&e, o, "vision.block.%d.mid", i)
		s.h2 = fb.get(&e, "h2", n, d)
		e.do(t.normFwd(s.h2, s.xMid, blk.norm2))
		s.h2 = fb.gemmIn(&e, "h2", s.h2)
		// An inference forward writes the block's output over its input, dead since the
		// attention's residual was added.
		y := x
		if keep {
			y = t.alloc(&e, n, d)
		}
		switch {
		case t.gated && v.Act == tensor.SiLU: // silu(gate)·up in one op, as hflm's SwiGLU
			s.a = fb.get(&e, "a", n, v.MLPDim)
			s.b = fb.get(&e, "b", n, v.MLPDim)
			e.do(linearInto(s.a, s.h2, blk.gate))
			e.do(t.adapt(s.a, s.h2, blk.gate, ka))
			e.do(linearInto(s.b, s.h2, blk.up))
			e.do(t.adapt(s.b, s.h2, blk.up, ka))
			t.round(&e, s.a)
			t.round(&e, s.b)
			s.prod = fb.get(&e, "prod", n, v.MLPDim)
			e.do(tensor.SwiGLU(s.prod, s.a, s.b))
			s.prod = fb.gemmIn(&e, "prod", s.prod)
			e.do(linearInto(y, s.prod, blk.down))
			e.do(t.adapt(y, s.prod, blk.down, ka))
		case t.gated:
			s.a = fb.get(&e, "a", n, v.MLPDim)
			s.b = fb.get(&e, "b", n, v.MLPDim)
			e.do(linearInto(s.a, s.h2, blk.gate))
			e.do(t.adapt(s.a, s.h2, blk.gate, ka))
			e.do(linearInto(s.b, s.h2, blk.up))
			e.do(t.adapt(s.b, s.h2, blk.up, ka))
			t.round(&e, s.a)
			t.round(&e, s.b)
			s.act = fb.get(&e, "act", n, v.MLPDim)
			e.do(tensor.Activate(s.act, s.a, v.Act))
			t.round(&e, s.act)
			s.prod = fb.get(&e, "prod", n, v.MLPDim)
			e.do(tensor.Mul(s.prod, s.act, s.b))
			s.prod = fb.gemmIn(&e, "prod", s.prod)
			e.do(linearInto(y, s.prod, blk.down))
			e.do(t.adapt(y, s.prod, blk.down, ka))
		default:
			s.a = fb.get(&e, "a", n, v.MLPDim)
			e.do(linearInto(s.a, s.h2, blk.fc1))
			e.do(t.adapt(s.a, s.h2, blk.fc1, ka))
			t.round(&e, s.a)
			s.act = fb.get(&e, "act", n, v.MLPDim)
			e.do(tensor.Activate(s.act, s.a, v.Act))
			s.act = fb.gemmIn(&e, "act", s.act)
			e.do(linearInto(y, s.act, blk.fc2))
			e.do(t.adapt(y, s.act, blk.fc2, ka))
		}
		e.do(t.residual(y, s.xMid))
		x = y
		stage(&e, x, "vision.block.%d", i)
		if e.err != nil {
			return nil, nil, e.err
		}
		if keep {
			a.blocks[i] = t.storeBlock(&e, s)
		}
	}
	if keep {
		a.xLast = t.store(&e, x)
	}
	ln := fb.get(&e, "h1", n, d)
	e.do(t.normFwd(ln, x, t.lnQ))
	nm := n / unit
	a.lnOut = fb.gemmIn(&e, "h1", view(&e, ln, nm, unit*d))
	a.pre = t.alloc(&e, nm, unit*d)
	e.do(linearInto(a.pre, a.lnOut, t.mlp0))
	e.do(t.adapt(a.pre, a.lnOut, t.mlp0, ka))
	t.round(&e, a.pre)
	a.gelu = fb.get(&e, "gelu", nm, unit*d)
	e.do(tensor.Activate(a.gelu, a.pre, tensor.GELU))
	a.gelu = fb.gemmIn(&e, "gelu", a.gelu)
	if keep {
		a.pre = t.store(&e, a.pre)
	}
	out := t.alloc(&e, nm, v.OutDim)
	e.do(linearInto(out, a.gelu, t.mlp2))
	e.do(t.adapt(out, a.gelu, t.mlp2, ka))
	t.round(&e, out)
	if l.winInv != nil {
		out = t.permute(&e, out, l.winInv, v.OutDim)
	}
	stage(&e, out, "vision.merger", -1)
	if e.err != nil {
		return nil, nil, e.err
	}
	if !keep {
		a = nil
	}
	return out, a, nil
}

// stage shows the device tests' probe.Stage x at a stage of the forward (probe.Show), unless
// the forward already failed.
func stage(e *errs, x *tensor.Tensor, format string, i int) {
	if e.err == nil {
		probe.Show(format, i, x)
	}
}

func (t *Vision) normFwd(y, x *tensor.Tensor, n norm) error {
	if n.b != nil {
		return tensor.LayerNorm(y, x, n.w, n.b, visionEps)
	}
	return tensor.RMSNorm(y, x, n.w, visionEps)
}

// linearInto writes y = x·Wᵀ (+ b) for y and x of any shapes whose rows are the weight's.
func linearInto(y, x *tensor.Tensor, l linear) error {
	y2, err := y.Reshape(-1, l.w.Weight().Dim(0))
	if err != nil {
		return err
	}
	x2, err := x.Reshape(-1, l.w.Weight().Dim(1))
	if err != nil {
		return err
	}
	if l.b == nil {
		return tensor.Linear(y2, x2, l.w)
	}
	return tensor.LinearBias(y2, x2, l.w, l.b)
}
