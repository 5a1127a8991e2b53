package hflm

import (
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

// packed is a batch of token sequences laid end to end, FlashAttention's varlen layout:
// sequence b is rows [cu[b], cu[b+1]) at positions 0, 1, ….
type packed struct {
	ids, pos, cu *tensor.Tensor // int32 [N], [N], [B+1]
	n            int
	starts       []int // cu as ints
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
	return &packed{
		ids: tensor.Must(tensor.FromInt32(ids, n)), pos: tensor.Must(tensor.FromInt32(pos, n)),
		cu: tensor.Must(tensor.FromInt32(cu, len(cu))), n: n, starts: starts,
	}, nil
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
}

// forward runs the model over packed sequences and returns the final hidden states [N, D]
// (after model.norm); with keep, also the activations backward needs. onKV, when not nil,
// receives every layer's keys (after RoPE) and values.
func (m *Model) forward(in *packed, keep bool, onKV func(l int, k, v *tensor.Tensor) error) (*acts, error) {
	c := m.Config
	n, d := in.n, c.HiddenSize
	hq, hkv, hd := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
	var e errs
	x, _ := f32(n, d)
	e.do(m.embedInto(x, in.ids))
	a := &acts{in: in, keep: keep, lora: map[*adapter]loraAct{}}
	if keep {
		a.layers = make([]layerActs, len(m.layers))
	}
	// An inference pass reuses one layer's buffers (every op overwrites its output), and the
	// layer's output overwrites its input, dead once the attention's residual is added.
	alloc := func() layerActs {
		var s layerActs
		s.h1, _ = f32(n, d)
		s.q, _ = f32(n, hq, hd)
		s.k, _ = f32(n, hkv, hd)
		s.v, _ = f32(n, hkv, hd)
		s.attn, _ = f32(n, hq, hd)
		if keep {
			s.lse, _ = f32(n, hq)
		}
		s.xMid, _ = f32(n, d)
		s.h2, _ = f32(n, d)
		s.gate, _ = f32(n, c.IntermediateSize)
		s.up, _ = f32(n, c.IntermediateSize)
		s.act, _ = f32(n, c.IntermediateSize)
		return s
	}
	var reused layerActs
	if !keep {
		reused = alloc()
	}
	for l := range m.layers {
		ly := &m.layers[l]
		s := reused
		if keep {
			s = alloc()
		}
		s.xIn = x
		e.do(tensor.RMSNorm(s.h1, x, ly.inNorm, c.RMSNormEps))
		e.do(m.linearFwd(s.q, s.h1, ly.q, a))
		e.do(m.linearFwd(s.k, s.h1, ly.k, a))
		e.do(m.linearFwd(s.v, s.h1, ly.v, a))
		e.do(tensor.RoPE(s.q, s.q, in.pos, m.rope))
		e.do(tensor.RoPE(s.k, s.k, in.pos, m.rope))
		if onKV != nil && e.err == nil {
			e.do(onKV(l, s.k, s.v))
		}
		ai := tensor.AttentionInputs{Q: s.q, K: s.k, V: s.v, CuSeqlensQ: in.cu, CuSeqlensK: in.cu}
		if keep {
			e.do(tensor.AttentionLSE(s.attn, s.lse, ai, m.attn))
		} else {
			e.do(tensor.Attention(s.attn, ai, m.attn))
		}
		e.do(m.linearFwd(s.xMid, s.attn, ly.o, a))
		addTo(host(s.xMid), host(x))
		e.do(tensor.RMSNorm(s.h2, s.xMid, ly.postNorm, c.RMSNormEps))
		e.do(m.linearFwd(s.gate, s.h2, ly.gate, a))
		e.do(m.linearFwd(s.up, s.h2, ly.up, a))
		e.do(tensor.SwiGLU(s.act, s.gate, s.up))
		y := x
		if keep {
			y, _ = f32(n, d)
		}
		yv := host(y)
		e.do(m.linearFwd(y, s.act, ly.down, a))
		addTo(yv, host(s.xMid))
		x = y
		if e.err != nil {
			return nil, e.err
		}
		if keep {
			a.layers[l] = s
		}
	}
	a.xLast = x
	a.hidden, _ = f32(n, d)
	e.do(tensor.RMSNorm(a.hidden, x, m.norm, c.RMSNormEps))
	return a, e.err
}

// linearFwd writes y = x·Wᵀ (+ bias) (+ the adapter's scale·B·A·x) for y and x of any shapes
// with the right last dimensions' product (the heads of q, k and v are views). a is the
// forward's activations (nil in decoding).
func (m *Model) linearFwd(y, x *tensor.Tensor, l linear, a *acts) error {
	if err := linearInto(y, x, l); err != nil {
		return err
	}
	if ad := m.adapterOf(l); ad != nil {
		return m.loraForward(y, x, ad, a)
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

// addTo adds src into dst elementwise (the residual connections).
func addTo(dst, src []float32) {
	for i, v := range src {
		dst[i] += v
	}
}

// backward adds the parameter gradients of the loss given dHidden [N, D], the gradient of the
// final hidden states, into the model's gradients. The LM head's own gradient is the caller's.
func (m *Model) backward(a *acts, dHidden *tensor.Tensor) error {
	if err := m.ensureGrads(); err != nil {
		return err
	}
	c := m.Config
	n, d := a.in.n, c.HiddenSize
	hq, hkv, hd := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
	g := func(name string) *tensor.Tensor { return m.byName[name].grad }
	if m.lora != nil { // the base is frozen: its norms' gradients go to scratch
		g = func(string) *tensor.Tensor { return m.frozen().norm }
	}
	var e errs
	// dx is the gradient of the residual stream, carried down the layers.
	dx, dxv := f32(n, d)
	e.do(tensor.RMSNormBackward(dx, g("model.norm.weight"), tensor.NormGrad{X: a.xLast, Weight: m.norm, DY: dHidden, Eps: c.RMSNormEps, Accumulate: true}))
	tmp, tmpv := f32(n, d)
	// One layer's gradient buffers, reused down the layers (every op overwrites them).
	dact, _ := f32(n, c.IntermediateSize)
	dgate, _ := f32(n, c.IntermediateSize)
	dup, _ := f32(n, c.IntermediateSize)
	dh2, dh2v := f32(n, d)
	dattn, _ := f32(n, hq, hd)
	dq, _ := f32(n, hq, hd)
	dk, _ := f32(n, hkv, hd)
	dv, _ := f32(n, hkv, hd)
	dh1, dh1v := f32(n, d)
	for l := len(m.layers) - 1; l >= 0; l-- {
		ly, s := &m.layers[l], &a.layers[l]
		// MLP: y = xMid + down(swiglu(gate(h2), up(h2))), h2 = norm(xMid).
		e.do(m.linearBackward(dact, s.act, dx, ly.down, a))
		e.do(tensor.SwiGLUBackward(dgate, dup, tensor.SwiGLUGrad{Gate: s.gate, Up: s.up, DY: dact}))
		e.do(m.linearBackward(dh2, s.h2, dgate, ly.gate, a))
		e.do(m.linearBackward(tmp, s.h2, dup, ly.up, a))
		addTo(dh2v, tmpv)
		e.do(tensor.RMSNormBackward(tmp, g(ly.prefix+"post_attention_layernorm.weight"), tensor.NormGrad{X: s.xMid, Weight: ly.postNorm, DY: dh2, Eps: c.RMSNormEps, Accumulate: true}))
		addTo(dxv, tmpv)
		// Attention: xMid = xIn + o(attn(rope(q(h1)), rope(k(h1)), v(h1))), h1 = norm(xIn).
		e.do(m.linearBackward(dattn, s.attn, dx, ly.o, a))
		e.do(tensor.AttentionBackward(dq, dk, dv, tensor.AttentionGrad{
			AttentionInputs: tensor.AttentionInputs{Q: s.q, K: s.k, V: s.v, CuSeqlensQ: a.in.cu, CuSeqlensK: a.in.cu},
			Out:             s.attn, LSE: s.lse, DOut: dattn,
		}, m.attn))
		e.do(tensor.RoPEBackward(dq, tensor.RoPEGrad{DY: dq, Positions: a.in.pos, Config: m.rope}))
		e.do(tensor.RoPEBackward(dk, tensor.RoPEGrad{DY: dk, Positions: a.in.pos, Config: m.rope}))
		e.do(m.linearBackward(dh1, s.h1, dq, ly.q, a))
		e.do(m.linearBackward(tmp, s.h1, dk, ly.k, a))
		addTo(dh1v, tmpv)
		e.do(m.linearBackward(tmp, s.h1, dv, ly.v, a))
		addTo(dh1v, tmpv)
		e.do(tensor.RMSNormBackward(tmp, g(ly.prefix+"input_layernorm.weight"), tensor.NormGrad{X: s.xIn, Weight: ly.inNorm, DY: dh1, Eps: c.RMSNormEps, Accumulate: true}))
		addTo(dxv, tmpv)
		if e.err != nil {
			return e.err
		}
	}
	if m.lora == nil {
		e.do(tensor.EmbeddingBackward(g("model.embed_tokens.weight"), tensor.EmbeddingGrad{IDs: a.in.ids, DY: dx, Accumulate: true}))
	}
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
	out := tensor.LinearGradOut{DX: dx2}
	if m.lora == nil {
		out.DWeight = m.byName[l.name+".weight"].grad
		if l.b != nil {
			out.DBias = m.byName[l.name+".bias"].grad
		}
	}
	if err := tensor.LinearBackward(out, tensor.LinearGrad{X: x2, Weight: l.w, DY: dy2, Accumulate: true}); err != nil {
		return err
	}
	if ad := m.adapterOf(l); ad != nil {
		return m.loraBackward(dx2, dy2, ad, a)
	}
	return nil
}

// Logits returns the next-token logits [len(tokens), V] of one sequence, in float32: row t
// predicts token t+1. It is the full forward (no cache).
func (m *Model) Logits(tokens []int32) (*tensor.Tensor, error) {
	in, err := m.packSeqs([][]int32{tokens})
	if err != nil {
		return nil, err
	}
	a, err := m.forward(in, false, nil)
	if err != nil {
		return nil, err
	}
	logits, _ := f32(in.n, m.Config.VocabSize)
	return logits, tensor.Linear(logits, a.hidden, m.head)
}
