package hflm

import (
	"slices"

	"github.com/mtrl-go/mtrl/examples/internal/probe"
	"github.com/mtrl-go/mtrl/tensor"
)

// errs keeps the first error of a sequence of op calls, so a layer reads as its ops; the ops
// after a failed one still run on valid (preallocated) tensors and only return errors.
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

// upload puts a host tensor made for the model (ids, positions, initial weights) on its
// backend: t itself on the CPU.
func (m *Model) upload(t *tensor.Tensor, err error) (*tensor.Tensor, error) {
	if err != nil || m.onHost() {
		return t, err
	}
	return tensor.To(m.b, t)
}

// zero sets a float32 tensor to zero on its backend.
func zero(t *tensor.Tensor) error { return tensor.Axpby(t, t, 0, 0) }

// add is dst += src on their backend (a residual connection, a sum of gradients): the same
// float32 additions as a loop over the elements.
func add(dst, src *tensor.Tensor) error { return tensor.Axpby(dst, src, 1, 1) }

// alloc returns a zeroed float32 tensor on the model's backend. A failed allocation is kept in
// e, and a host tensor of the shape stands in so the ops after it only return errors.
func (m *Model) alloc(e *errs, shape ...int) *tensor.Tensor {
	if m.onHost() {
		t, _ := f32(shape...)
		return t
	}
	t, err := tensor.New(m.b, tensor.Float32, shape...)
	if err != nil {
		e.do(err)
		t, _ = f32(shape...)
	}
	return t
}

// ints returns int32 values as a tensor on the model's backend.
func (m *Model) ints(v []int32, shape ...int) (*tensor.Tensor, error) {
	return m.upload(tensor.FromInt32(v, shape...))
}

// packed is a batch of token sequences laid end to end, FlashAttention's varlen layout:
// sequence b is rows [cu[b], cu[b+1]) at positions 0, 1, ….
type packed struct {
	ids, pos, cu *tensor.Tensor // int32 [N], [N] ([sections, N] with M-RoPE), [B+1]
	n            int
	starts       []int // cu as ints
	// scatter and gather, when set, edit the input embeddings and their gradient (Input).
	scatter, gather func(*tensor.Tensor) error
}

func (m *Model) packSeqs(seqs [][]int32) (*packed, error) {
	const op = "hflm.Model"
	starts := make([]int, len(seqs)+1)
	for i, s := range seqs {
		if len(s) == 0 {
			return nil, tensor.Errorf(tensor.ErrShape, op, "tokens", "sequence %d is empty", i)
		}
		starts[i+1] = starts[i] + len(s)
	}
	n := starts[len(seqs)]
	if n == 0 {
		return nil, tensor.Errorf(tensor.ErrShape, op, "tokens", "no sequences")
	}
	ids, pos, cu := make([]int32, 0, n), make([]int32, 0, n), make([]int32, len(starts))
	for i, s := range seqs {
		if len(s) > m.Config.MaxPositionEmbeddings {
			return nil, tensor.Errorf(tensor.ErrShape, op, "tokens", "sequence %d has %d tokens, more than max_position_embeddings %d", i, len(s), m.Config.MaxPositionEmbeddings)
		}
		for j, id := range s {
			if id < 0 || int(id) >= m.Config.VocabSize {
				return nil, tensor.Errorf(tensor.ErrParam, op, "tokens", "sequence %d position %d: id %d is outside the vocabulary [0, %d)", i, j, id, m.Config.VocabSize)
			}
			ids = append(ids, id)
			pos = append(pos, int32(j))
		}
	}
	for i, s := range starts {
		cu[i] = int32(s)
	}
	posShape := []int{n}
	if k := len(m.rope.Sections); k > 0 { // M-RoPE on text: every axis at the same position
		pos, posShape = slices.Repeat(pos, k), []int{k, n}
	}
	p := &packed{n: n, starts: starts}
	var err error
	if p.ids, err = m.ints(ids, n); err != nil {
		return nil, err
	}
	if p.pos, err = m.ints(pos, posShape...); err != nil {
		return nil, err
	}
	if p.cu, err = m.ints(cu, len(cu)); err != nil {
		return nil, err
	}
	return p, nil
}

// layerActs are what a layer's backward reads: the inputs of its ops.
type layerActs struct {
	xIn, h1, q, k, v, attn, lse, xMid, h2, gate, up, act *tensor.Tensor
}

// acts are the activations a training forward keeps.
type acts struct {
	in     *packed
	keep   bool
	lora   map[*adapter]loraAct
	layers []layerActs
	xLast  *tensor.Tensor // the final norm's input
	hidden *tensor.Tensor // [N, D]: the final norm's output, which the LM head reads
	// ckpt (activation checkpointing) holds, per layer, the LoRA dropout's random state at the
	// layer's start; the layers keep only xIn and are recomputed in the backward.
	ckpt []dropState
	bufs map[string]*tensor.Tensor // an inference pass's one layer of buffers (buf)
	m    *Model
	e    errs // a failed allocation of buf
}

// buf returns the buffer named of a layer's forward: a new one when the pass keeps its
// activations, else the pass's one buffer of that name, reused by every layer (each op
// overwrites its output).
func (a *acts) buf(name string, shape ...int) *tensor.Tensor {
	if a.keep {
		return a.m.alloc(&a.e, shape...)
	}
	if a.bufs == nil {
		a.bufs = map[string]*tensor.Tensor{}
	}
	t := a.bufs[name]
	if t == nil {
		t = a.m.alloc(&a.e, shape...)
		a.bufs[name] = t
	}
	return t
}

// stored is m.store for an activation of the pass: a training pass's own bfloat16 copy; on a
// device, an inference pass's one bfloat16 buffer of the name, which every layer overwrites.
func (a *acts) stored(name string, t *tensor.Tensor) *tensor.Tensor {
	m := a.m
	if m.onHost() || m.mp == nil || t.DType() == tensor.BFloat16 {
		return m.store(&a.e, t)
	}
	if a.keep { // the float32 original is dead: free it now, not when collected
		out := m.store(&a.e, t)
		m.free(t)
		return out
	}
	if a.bufs == nil {
		a.bufs = map[string]*tensor.Tensor{}
	}
	key := name + ".bf16"
	b := a.bufs[key]
	if b == nil {
		var err error
		if b, err = tensor.New(m.b, tensor.BFloat16, t.Shape()...); err != nil {
			a.e.do(err)
			return t
		}
		a.bufs[key] = b
	}
	a.e.do(m.convert(b, t))
	return b
}

// newActs returns the activations of a pass over in (keep: a training pass).
func (m *Model) newActs(in *packed, keep bool) *acts {
	return &acts{in: in, keep: keep, lora: map[*adapter]loraAct{}, m: m}
}

// forward runs the model over packed sequences and returns the final hidden states [N, D]
// (after model.norm); with keep, also the activations backward needs (only each layer's input
// with activation checkpointing, checkpoint.go). onKV, when not nil, receives every layer's
// keys (after RoPE) and values.
func (m *Model) forward(in *packed, keep bool, onKV func(l int, k, v *tensor.Tensor) error) (*acts, error) {
	c := m.Config
	n, d := in.n, c.HiddenSize
	a := m.newActs(in, keep)
	x := m.alloc(&a.e, n, d)
	if a.e.err != nil {
		return nil, a.e.err
	}
	if err := m.embedInto(x, in.ids); err != nil {
		return nil, err
	}
	if in.scatter != nil {
		stage(&a.e, x, "lm.token_embed", -1)
		if err := in.scatter(x); err != nil {
			return nil, err
		}
	}
	m.round(&a.e, x)
	stage(&a.e, x, "lm.embed", -1)
	if keep {
		a.layers = make([]layerActs, len(m.layers))
	}
	for l := range m.layers {
		if keep && m.ckpt {
			// The layer's activations are dropped: its LoRA acts go to a scratch set.
			a.layers[l] = layerActs{xIn: m.store(&a.e, x)}
			a.ckpt = append(a.ckpt, m.dropSave())
			la := m.newActs(in, true)
			y, s, err := m.layerForward(l, x, in, la, nil)
			if err != nil {
				return nil, err
			}
			m.freeLayer(s, la, a.layers[l].xIn) // on a device now, not when collected
			x = y
			continue
		}
		y, s, err := m.layerForward(l, x, in, a, onKV)
		if err != nil {
			return nil, err
		}
		stage(&a.e, y, "lm.layer.%d", l)
		if keep {
			a.layers[l] = m.storeLayer(&a.e, s)
			m.freeStored(s, a.layers[l])
		}
		x = y
	}
	a.xLast = x
	if keep {
		a.xLast = m.store(&a.e, x)
	}
	a.hidden = m.alloc(&a.e, n, d)
	a.e.do(tensor.RMSNorm(a.hidden, x, m.norm, c.RMSNormEps))
	m.round(&a.e, a.hidden)
	stage(&a.e, a.hidden, "lm.norm", -1)
	return a, a.e.err
}

// stage shows the device tests' probe.Stage x at a stage of the forward (probe.Show), unless
// the forward already failed.
func stage(e *errs, x *tensor.Tensor, format string, i int) {
	if e.err == nil {
		probe.Show(format, i, x)
	}
}

// layerForward runs decoder layer l on x [N, D] and returns its output and the inputs of its
// ops (float32; rounded to bfloat16 values in bf16 mode). a.keep selects the forward that
// keeps what the backward reads (attention's log-sum-exp, LoRA's activations and dropout).
func (m *Model) layerForward(l int, x *tensor.Tensor, in *packed, a *acts, onKV func(l int, k, v *tensor.Tensor) error) (*tensor.Tensor, layerActs, error) {
	c := m.Config
	n, d := in.n, c.HiddenSize
	hq, hkv, hd := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
	ly := &m.layers[l]
	e := &a.e
	var s layerActs
	s.xIn = x
	s.h1 = a.buf("h1", n, d)
	e.do(tensor.RMSNorm(s.h1, x, ly.inNorm, c.RMSNormEps))
	m.round(e, s.h1)
	s.h1 = a.stored("h1", s.h1) // bf16 mode: the projections read (and the backward keeps) bfloat16
	s.q = a.buf("q", n, hq, hd)
	s.k = a.buf("k", n, hkv, hd)
	s.v = a.buf("v", n, hkv, hd)
	e.do(m.linearFwd(s.q, s.h1, ly.q, a))
	e.do(m.linearFwd(s.k, s.h1, ly.k, a))
	e.do(m.linearFwd(s.v, s.h1, ly.v, a))
	m.round(e, s.q)
	m.round(e, s.k)
	m.round(e, s.v)
	e.do(tensor.RoPE(s.q, s.q, in.pos, m.rope))
	e.do(tensor.RoPE(s.k, s.k, in.pos, m.rope))
	m.round(e, s.q)
	m.round(e, s.k)
	if onKV != nil && e.err == nil {
		e.do(onKV(l, s.k, s.v))
	}
	s.attn = a.buf("attn", n, hq, hd)
	ai := tensor.AttentionInputs{Q: s.q, K: s.k, V: s.v, CuSeqlensQ: in.cu, CuSeqlensK: in.cu}
	if a.keep {
		s.lse = m.alloc(e, n, hq)
		e.do(tensor.AttentionLSE(s.attn, s.lse, ai, m.attn))
	} else {
		e.do(tensor.Attention(s.attn, ai, m.attn))
	}
	m.round(e, s.attn)
	stage(e, s.attn, "lm.layer.%d.attn", l)
	s.attn = a.stored("attn", s.attn)
	o := a.buf("o", n, d)
	e.do(m.linearFwd(o, s.attn, ly.o, a))
	m.round(e, o)
	e.do(add(o, x))
	m.round(e, o)
	s.xMid = o
	s.h2 = a.buf("h2", n, d)
	e.do(tensor.RMSNorm(s.h2, s.xMid, ly.postNorm, c.RMSNormEps))
	m.round(e, s.h2)
	s.h2 = a.stored("h2", s.h2)
	s.gate = a.buf("gate", n, c.IntermediateSize)
	s.up = a.buf("up", n, c.IntermediateSize)
	e.do(m.linearFwd(s.gate, s.h2, ly.gate, a))
	e.do(m.linearFwd(s.up, s.h2, ly.up, a))
	m.round(e, s.gate)
	m.round(e, s.up)
	s.act = a.buf("act", n, c.IntermediateSize)
	e.do(tensor.SwiGLU(s.act, s.gate, s.up))
	m.round(e, s.act)
	s.act = a.stored("act", s.act)
	// An inference pass writes the layer's output over its input, dead since the attention's
	// residual was added.
	y := x
	if a.keep {
		y = m.alloc(e, n, d)
	}
	e.do(m.linearFwd(y, s.act, ly.down, a))
	m.round(e, y)
	e.do(add(y, s.xMid))
	m.round(e, y)
	return y, s, e.err
}

// linearFwd writes y = x·Wᵀ (+ bias) (+ the adapter's scale·B·A·x) for y and x of any shapes
// with the right last dimensions' product (the heads of q, k and v are views). a is the
// forward's activations (nil in decoding).
func (m *Model) linearFwd(y, x *tensor.Tensor, l linear, a *acts) error {
	// In bf16 mode the input is bfloat16: the GEMM runs on bfloat16 pairs (mixed.go). A
	// float32 input (decoding's) is rounded into a scratch copy on a device.
	var e errs
	xs := x
	if m.mp != nil && x.DType() == tensor.Float32 {
		if m.onHost() {
			xs = m.store(&e, x)
		} else {
			xs = m.scratchBF16(&e, 1, x.Len())
			e.do(m.convert(xs, x))
		}
	}
	e.do(linearInto(y, xs, l))
	if e.err != nil {
		return e.err
	}
	if ad := m.adapterOf(l); ad != nil {
		wx := m.widen(&e, x)
		if e.err != nil {
			return e.err
		}
		return m.loraForward(y, wx, ad, a)
	}
	return nil
}

func linearInto(y, x *tensor.Tensor, l linear) error {
	nOut, nIn := l.w.Dims()
	y2, err := y.Reshape(-1, nOut)
	if err != nil {
		return err
	}
	x2, err := x.Reshape(-1, nIn)
	if err != nil {
		return err
	}
	if l.b == nil {
		return tensor.Linear(y2, x2, l.w)
	}
	return tensor.LinearBias(y2, x2, l.w, l.b)
}

// backward adds the parameter gradients of the loss given dHidden [N, D], the gradient of the
// final hidden states, into the model's gradients. The LM head's own gradient is the caller's.
func (m *Model) backward(a *acts, dHidden *tensor.Tensor) error {
	if err := m.ensureGrads(); err != nil {
		return err
	}
	c := m.Config
	n, d := a.in.n, c.HiddenSize
	var e errs
	// dx is the gradient of the residual stream, carried down the layers.
	dx := m.alloc(&e, n, d)
	e.do(m.normBackward(dx, "model.norm.weight", tensor.NormGrad{X: m.widenTmp(&e, "w0", a.xLast), Weight: m.norm, DY: dHidden, Eps: c.RMSNormEps}))
	if e.err == nil {
		m.reportFinal("model.norm.weight")
	}
	if a.ckpt != nil {
		defer m.dropRestore(m.dropSave()) // the state after the forward, as without recomputing
	}
	for l := len(m.layers) - 1; l >= 0 && e.err == nil; l-- {
		s, la := a.layers[l], a
		if a.ckpt != nil {
			var err error
			if s, la, err = m.recompute(a, l); err != nil {
				return err
			}
		}
		e.do(m.layerBackward(l, s, la, dx))
		if e.err == nil {
			m.reportLayer(l)
		}
		if a.ckpt != nil { // the recomputed activations are dead
			m.freeLayer(s, la, a.layers[l].xIn)
		}
	}
	if a.in.gather != nil && e.err == nil {
		e.do(a.in.gather(dx))
	}
	if m.lora == nil {
		if traceGrad != nil {
			traceGrad("model.embed_tokens.weight", a.in.ids, dx)
		}
		e.do(tensor.EmbeddingBackward(m.gradOf("model.embed_tokens.weight"), tensor.EmbeddingGrad{IDs: a.in.ids, DY: dx, Accumulate: true}))
		if e.err == nil {
			m.reportFinal("model.embed_tokens.weight")
		}
	}
	return e.err
}

// traceGrad, when set (by tests), receives the rows each weight gradient of the backward sums
// over: a projection's input and output gradient (name without ".weight"), a norm's input and
// output gradient, or the embeddings' ids and output gradient (by their weight's name).
var traceGrad func(name string, x, dy *tensor.Tensor)

// normBackward is RMSNormBackward with the weight gradient accumulated into name's.
func (m *Model) normBackward(dx *tensor.Tensor, name string, in tensor.NormGrad) error {
	if traceGrad != nil {
		traceGrad(name, in.X, in.DY)
	}
	in.Accumulate = true
	return tensor.RMSNormBackward(dx, m.gradOf(name), in)
}

// gradOf returns the gradient of the weight named (a scratch one for the norms of a frozen base).
func (m *Model) gradOf(name string) *tensor.Tensor {
	if m.lora != nil {
		return m.frozen().norm
	}
	return m.byName[name].grad
}

// reused returns the model's buffer named, of the shape (contents undefined): a layer
// backward's gradient buffers, which every layer overwrites (a Model is not safe for concurrent
// use).
func (m *Model) reused(e *errs, name string, shape ...int) *tensor.Tensor {
	if m.bufs == nil {
		m.bufs = map[string]*tensor.Tensor{}
	}
	t := m.grown(e, m.bufs[name], shape...)
	m.bufs[name] = t
	return m.view(e, t, shape...)
}

// grown returns buf, or a new flat buffer on the model's backend when buf is nil or smaller
// than the shape.
func (m *Model) grown(e *errs, buf *tensor.Tensor, shape ...int) *tensor.Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	if buf == nil || buf.Len() < n {
		if buf != nil && !buf.IsHost() {
			_ = buf.Release()
		}
		buf = m.alloc(e, n)
	}
	return buf
}

// view is the first elements of the flat buffer buf as a tensor of the shape.
func (m *Model) view(e *errs, buf *tensor.Tensor, shape ...int) *tensor.Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	v, err := buf.Rows(0, n)
	if err == nil {
		v, err = v.Reshape(shape...)
	}
	if err != nil {
		e.do(err)
		v, _ = f32(shape...)
	}
	return v
}

// layerBackward adds layer l's parameter gradients given s, what its forward kept (LoRA's in
// la), and dx, the gradient of its output, which it replaces by the gradient of its input.
func (m *Model) layerBackward(l int, s layerActs, la *acts, dx *tensor.Tensor) error {
	c := m.Config
	n, d := la.in.n, c.HiddenSize
	hq, hkv, hd := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
	ly := &m.layers[l]
	var e errs
	tmp := m.reused(&e, "tmp", n, d)
	// MLP: y = xMid + down(swiglu(gate(h2), up(h2))), h2 = norm(xMid).
	dact := m.reused(&e, "dact", n, c.IntermediateSize)
	e.do(m.linearBackward(dact, s.act, dx, ly.down, la))
	dgate := m.reused(&e, "dgate", n, c.IntermediateSize)
	dup := m.reused(&e, "dup", n, c.IntermediateSize)
	e.do(tensor.SwiGLUBackward(dgate, dup, tensor.SwiGLUGrad{Gate: m.widenTmp(&e, "w0", s.gate), Up: m.widenTmp(&e, "w1", s.up), DY: dact}))
	dh2 := m.reused(&e, "dh2", n, d)
	e.do(m.linearBackward(dh2, s.h2, dgate, ly.gate, la))
	e.do(m.linearBackward(tmp, s.h2, dup, ly.up, la))
	e.do(add(dh2, tmp))
	e.do(m.normBackward(tmp, ly.prefix+"post_attention_layernorm.weight", tensor.NormGrad{X: m.widenTmp(&e, "w0", s.xMid), Weight: ly.postNorm, DY: dh2, Eps: c.RMSNormEps}))
	e.do(add(dx, tmp))
	// Attention: xMid = xIn + o(attn(rope(q(h1)), rope(k(h1)), v(h1))), h1 = norm(xIn).
	dattn := m.reused(&e, "dattn", n, hq, hd)
	e.do(m.linearBackward(dattn, s.attn, dx, ly.o, la))
	dq := m.reused(&e, "dq", n, hq, hd)
	dk := m.reused(&e, "dk", n, hkv, hd)
	dv := m.reused(&e, "dv", n, hkv, hd)
	e.do(tensor.AttentionBackward(dq, dk, dv, tensor.AttentionGrad{
		AttentionInputs: tensor.AttentionInputs{Q: m.widenTmp(&e, "w0", s.q), K: m.widenTmp(&e, "w1", s.k), V: m.widenTmp(&e, "w2", s.v), CuSeqlensQ: la.in.cu, CuSeqlensK: la.in.cu},
		Out:             m.widenTmp(&e, "w3", s.attn), LSE: s.lse, DOut: dattn,
	}, m.attn))
	e.do(tensor.RoPEBackward(dq, tensor.RoPEGrad{DY: dq, Positions: la.in.pos, Config: m.rope}))
	e.do(tensor.RoPEBackward(dk, tensor.RoPEGrad{DY: dk, Positions: la.in.pos, Config: m.rope}))
	dh1 := m.reused(&e, "dh1", n, d)
	e.do(m.linearBackward(dh1, s.h1, dq, ly.q, la))
	e.do(m.linearBackward(tmp, s.h1, dk, ly.k, la))
	e.do(add(dh1, tmp))
	e.do(m.linearBackward(tmp, s.h1, dv, ly.v, la))
	e.do(add(dh1, tmp))
	e.do(m.normBackward(tmp, ly.prefix+"input_layernorm.weight", tensor.NormGrad{X: m.widenTmp(&e, "w0", s.xIn), Weight: ly.inNorm, DY: dh1, Eps: c.RMSNormEps}))
	e.do(add(dx, tmp))
	return e.err
}

// linearBackward writes dx and adds the weight (and bias) gradients of y = x·Wᵀ + b given dy
// (the adapter's instead when the base is frozen).
func (m *Model) linearBackward(dx, x, dy *tensor.Tensor, l linear, a *acts) error {
	nOut, nIn := l.w.Dims()
	dx2, err := dx.Reshape(-1, nIn)
	if err != nil {
		return err
	}
	x2, err := x.Reshape(-1, nIn)
	if err != nil {
		return err
	}
	dy2, err := dy.Reshape(-1, nOut)
	if err != nil {
		return err
	}
	if traceGrad != nil {
		traceGrad(l.name, x2, dy2)
	}
	out := tensor.LinearGradOut{DX: dx2}
	if m.lora == nil {
		out.DWeight = m.byName[l.name+".weight"].grad
		if l.b != nil {
			out.DBias = m.byName[l.name+".bias"].grad
		}
	}
	if err := tensor.LinearBackward(out, tensor.LinearGrad{X: x2, Weight: l.w, DY: dy2, Accumulate: true, GradBF16: m.bf16Grad()}); err != nil {
		return err
	}
	if ad := m.adapterOf(l); ad != nil {
		return m.loraBackward(dx2, dy2, ad, a)
	}
	return nil
}

// Logits returns the next-token logits [len(tokens), V] of one sequence, in float32 on the
// model's backend: row t predicts token t+1. It is the full forward (no cache).
func (m *Model) Logits(tokens []int32) (*tensor.Tensor, error) {
	return m.LogitsInput(Input{Seqs: [][]int32{tokens}})
}
