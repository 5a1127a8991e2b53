package vlm

import (
	"github.com/mtrl-go/mtrl/tensor"
)

// OpsModel is the model on the backend of an op set (HostOps on the CPU, CUDAOps on a GPU):
// its parameters and their gradients live there, and Forward and Backward run the same layer
// sequence as Model's, op by op. With HostOps it gives Model's bits.
type OpsModel struct {
	Config Config

	ops    Ops
	params []*Param
	w, g   tweights
}

// tweights is weights[F] with the values held in tensors of the op set's backend.
type tweights struct {
	patchW, patchB, patchPos *tensor.Tensor
	tokEmb, tokPos           *tensor.Tensor
	blocks                   []tblock
	lnfG, lnfB               *tensor.Tensor
	headW, headB             *tensor.Tensor
}

type tblock struct {
	ln1G, ln1B, wqkv, bqkv, wo, bo, ln2G, ln2B, w1, b1, w2, b2 *tensor.Tensor
}

func (w *tweights) slots() []**tensor.Tensor {
	s := []**tensor.Tensor{&w.patchW, &w.patchB, &w.patchPos, &w.tokEmb, &w.tokPos}
	for l := range w.blocks {
		b := &w.blocks[l]
		s = append(s, &b.ln1G, &b.ln1B, &b.wqkv, &b.bqkv, &b.wo, &b.bo, &b.ln2G, &b.ln2B, &b.w1, &b.b1, &b.w2, &b.b2)
	}
	return append(s, &w.lnfG, &w.lnfB, &w.headW, &w.headB)
}

// NewOpsModel copies m's weights to the op set's backend, with zero gradients.
func NewOpsModel(m *Model, ops Ops) (*OpsModel, error) {
	c := m.Config
	om := &OpsModel{Config: c, ops: ops}
	om.w.blocks, om.g.blocks = make([]tblock, c.Layers), make([]tblock, c.Layers)
	ws, gs := om.w.slots(), om.g.slots()
	for i, p := range m.Params() {
		w, err := tensor.To(ops.Backend(), p.W)
		if err != nil {
			om.Release()
			return nil, err
		}
		g, err := tensor.New(ops.Backend(), tensor.Float32, p.W.Shape()...)
		if err != nil {
			_ = w.Release()
			om.Release()
			return nil, err
		}
		*ws[i], *gs[i] = w, g
		om.params = append(om.params, &Param{Name: p.Name, W: w, G: g})
	}
	return om, nil
}

// Params returns the parameters on the op set's backend, in Model.Params' order and names.
func (om *OpsModel) Params() []*Param { return om.params }

// Ops returns the op set.
func (om *OpsModel) Ops() Ops { return om.ops }

// zeroer is an op set that zeroes its tensors in place (CUDAOps), so ZeroGrad uploads nothing.
type zeroer interface {
	Zero(x *tensor.Tensor, n int) error
}

// ZeroGrad sets every gradient to zero.
func (om *OpsModel) ZeroGrad() error {
	if z, ok := om.ops.(zeroer); ok {
		for _, p := range om.params {
			if err := z.Zero(p.G, p.G.Len()); err != nil {
				return err
			}
		}
		return nil
	}
	for _, p := range om.params {
		z, err := tensor.New(tensor.CPU(), tensor.Float32, p.G.Shape()...)
		if err != nil {
			return err
		}
		if err := tensor.CopyInto(p.G, z); err != nil {
			return err
		}
	}
	return nil
}

// Release frees the parameters' memory.
func (om *OpsModel) Release() {
	for _, p := range om.params {
		_ = p.W.Release()
		_ = p.G.Release()
	}
	om.params = nil
}

// OpsActivations is the record of one OpsModel.Forward, on the op set's backend.
type OpsActivations struct {
	om         *OpsModel
	b, l, s    int
	pv, tokens *tensor.Tensor
	layers     []tlayer
	xhatF      *tensor.Tensor
	rstdF, hF  *tensor.Tensor
	owned      []*tensor.Tensor
}

type tlayer struct {
	xhat1, rstd1, h1, qkv, p, ao, xhat2, rstd2, h2, u, a *tensor.Tensor
}

// Release frees the record's memory.
func (a *OpsActivations) Release() {
	for _, t := range a.owned {
		_ = t.Release()
	}
	a.owned = nil
}

// alloc allocates n float32 values on the op set's backend, recording them in owned.
func (om *OpsModel) alloc(owned *[]*tensor.Tensor, n int) (*tensor.Tensor, error) {
	t, err := tensor.New(om.ops.Backend(), tensor.Float32, n)
	if err != nil {
		return nil, err
	}
	*owned = append(*owned, t)
	return t, nil
}

// Forward runs the model on images [B, H, W, C] uint8 (host) and tokens [B, L] int32 (host, or
// on the op set's backend, where the ids are trusted to be in [0, Vocab)). It returns logits
// [B, L, V] on the op set's backend (the caller releases them) and the activation record.
func (om *OpsModel) Forward(images, tokens *tensor.Tensor) (*tensor.Tensor, *OpsActivations, error) {
	const op = "vlm.OpsModel.Forward"
	c := om.Config
	b, l, err := checkTokens(op, c, tokens)
	if err != nil {
		return nil, nil, err
	}
	a := &OpsActivations{om: om, b: b, l: l, s: c.Patches() + l, layers: make([]tlayer, c.Layers)}
	logits, err := om.forward(op, a, images, tokens)
	if err != nil {
		a.Release()
		return nil, nil, err
	}
	return logits, a, nil
}

func (om *OpsModel) forward(op string, a *OpsActivations, images, tokens *tensor.Tensor) (*tensor.Tensor, error) {
	c, o, w := om.Config, om.ops, &om.w
	b, l, s := a.b, a.l, a.s
	d, np, m, v, pl := c.Dim, c.Patches(), c.MLPDim, c.Vocab, c.patchLen()
	n, nt := b*s, b*l
	if tokens.IsHost() {
		ids, _ := tokens.Int32s()
		for i, id := range ids {
			if id < 0 || int(id) >= c.Vocab {
				return nil, tensor.Errorf(tensor.ErrParam, op, "tokens", "id %d at [%d, %d] is outside [0, %d)", id, i/l, i%l, c.Vocab)
			}
		}
	}
	tok, err := tensor.To(o.Backend(), tokens)
	if err != nil {
		return nil, err
	}
	if tok != tokens {
		a.owned = append(a.owned, tok)
	}
	a.tokens = tok
	px, err := (&Model{Config: c}).checkImages(op, images, b)
	if err != nil {
		return nil, err
	}
	pvh, err := tensor.FromFloat32(patchVectors[float32](c, px, b), b*np*pl)
	if err != nil {
		return nil, err
	}
	if a.pv, err = tensor.To(o.Backend(), pvh); err != nil {
		return nil, err
	}
	a.owned = append(a.owned, a.pv)

	var tmps []*tensor.Tensor
	defer func() {
		for _, t := range tmps {
			_ = t.Release()
		}
	}()
	get := func(n int) *tensor.Tensor {
		t, e := om.alloc(&tmps, n)
		if e != nil && err == nil {
			err = e
		}
		return t
	}
	keep := func(n int) *tensor.Tensor {
		t, e := om.alloc(&a.owned, n)
		if e != nil && err == nil {
			err = e
		}
		return t
	}
	x, e, tmp := get(n*d), get(b*np*d), get(n*d)
	if err != nil {
		return nil, err
	}
	steps := []func() error{
		func() error { return o.Gemm(e, false, false, b*np, d, pl, a.pv, w.patchW, 0) },
		func() error { return o.PatchEmbed(x, b, s, e, w.patchB, w.patchPos) },
		func() error { return o.TokenEmbed(x, b, l, s, a.tokens, w.tokEmb, w.tokPos) },
	}
	if err := run(steps); err != nil {
		return nil, err
	}
	for li := range c.Layers {
		bw, la := &w.blocks[li], &a.layers[li]
		la.xhat1, la.rstd1, la.h1, la.qkv = keep(n*d), keep(n), keep(n*d), keep(n*3*d)
		la.p, la.ao, la.xhat2, la.rstd2, la.h2 = keep(b*c.Heads*s*s), keep(n*d), keep(n*d), keep(n), keep(n*d)
		la.u, la.a = keep(n*m), keep(n*m)
		if err != nil {
			return nil, err
		}
		x0, x1 := x, tmp
		steps := []func() error{
			func() error { return o.LayerNorm(la.h1, la.xhat1, la.rstd1, n, d, x0, bw.ln1G, bw.ln1B) },
			func() error { return o.Gemm(la.qkv, false, false, n, 3*d, d, la.h1, bw.wqkv, 0) },
			func() error { return o.AddBias(la.qkv, n, 3*d, bw.bqkv) },
			func() error { return o.Attention(la.ao, la.p, b, s, la.qkv) },
			func() error { return tensor.CopyInto(x1, x0) },
			func() error { return o.Gemm(x1, false, false, n, d, d, la.ao, bw.wo, 1) },
			func() error { return o.AddBias(x1, n, d, bw.bo) },
			func() error { return o.LayerNorm(la.h2, la.xhat2, la.rstd2, n, d, x1, bw.ln2G, bw.ln2B) },
			func() error { return o.Gemm(la.u, false, false, n, m, d, la.h2, bw.w1, 0) },
			func() error { return o.AddBias(la.u, n, m, bw.b1) },
			func() error { return o.GELU(la.a, n*m, la.u) },
			func() error { return o.Gemm(x1, false, false, n, d, m, la.a, bw.w2, 1) },
			func() error { return o.AddBias(x1, n, d, bw.b2) },
		}
		if err := run(steps); err != nil {
			return nil, err
		}
		x, tmp = x1, x0
	}
	xt := get(nt * d)
	a.xhatF, a.rstdF, a.hF = keep(nt*d), keep(nt), keep(nt*d)
	if err != nil {
		return nil, err
	}
	logits, err := tensor.New(o.Backend(), tensor.Float32, b, l, v)
	if err != nil {
		return nil, err
	}
	steps = []func() error{
		func() error { return o.TextRows(xt, b, l, s, x) },
		func() error { return o.LayerNorm(a.hF, a.xhatF, a.rstdF, nt, d, xt, w.lnfG, w.lnfB) },
		func() error { return o.Gemm(logits, false, false, nt, v, d, a.hF, w.headW, 0) },
		func() error { return o.AddBias(logits, nt, v, w.headB) },
	}
	if err := run(steps); err != nil {
		_ = logits.Release()
		return nil, err
	}
	return logits, nil
}

func run(steps []func() error) error {
	for _, f := range steps {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// Backward accumulates into the parameters' G the gradients of sum(dlogits ⊙ logits) for the
// pass recorded in act; dlogits [B, L, V] float32 is on the op set's backend.
func (om *OpsModel) Backward(act *OpsActivations, dlogits *tensor.Tensor) error {
	const op = "vlm.OpsModel.Backward"
	if act == nil || act.om != om || act.owned == nil {
		return tensor.Errorf(tensor.ErrParam, op, "act", "is nil, released or of another model")
	}
	if dlogits == nil {
		return tensor.Errorf(tensor.ErrShape, op, "dlogits", "is nil")
	}
	if err := tensor.CheckDType(op, "dlogits", dlogits, tensor.Float32); err != nil {
		return err
	}
	if err := tensor.CheckShape(op, "dlogits", dlogits, act.b, act.l, om.Config.Vocab); err != nil {
		return err
	}
	if dlogits.Backend() != om.ops.Backend() {
		return tensor.Errorf(tensor.ErrBackend, op, "dlogits", "is on %s, the model on %s", dlogits.Backend().Name(), om.ops.Backend().Name())
	}
	c, o, w, g, a := om.Config, om.ops, &om.w, &om.g, act
	d, np, m, v, pl := c.Dim, c.Patches(), c.MLPDim, c.Vocab, c.patchLen()
	b, l, s := a.b, a.l, a.s
	n, nt := b*s, b*l
	var tmps []*tensor.Tensor
	defer func() {
		for _, t := range tmps {
			_ = t.Release()
		}
	}()
	var err error
	get := func(n int) *tensor.Tensor {
		t, e := om.alloc(&tmps, n)
		if e != nil && err == nil {
			err = e
		}
		return t
	}
	dh, dxt, dx, dbig, dsmall := get(nt*d), get(nt*d), get(n*d), get(n*max(m, 3*d)), get(n*d)
	if err != nil {
		return err
	}
	steps := []func() error{
		func() error { return o.Gemm(g.headW, true, false, d, v, nt, a.hF, dlogits, 1) },
		func() error { return o.ColSum(g.headB, nt, v, dlogits) },
		func() error { return o.Gemm(dh, false, true, nt, d, v, dlogits, w.headW, 0) },
		func() error { return o.LayerNormBack(dxt, g.lnfG, g.lnfB, nt, d, dh, a.xhatF, a.rstdF, w.lnfG) },
		func() error { return o.TextRowsBack(dx, b, l, s, dxt) },
	}
	for li := c.Layers - 1; li >= 0; li-- {
		bw, gw, la := &w.blocks[li], &g.blocks[li], &a.layers[li]
		steps = append(steps,
			func() error { return o.ColSum(gw.b2, n, d, dx) },
			func() error { return o.Gemm(gw.w2, true, false, m, d, n, la.a, dx, 1) },
			func() error { return o.Gemm(dbig, false, true, n, m, d, dx, bw.w2, 0) },
			func() error { return o.GELUBack(dbig, n*m, la.u) },
			func() error { return o.ColSum(gw.b1, n, m, dbig) },
			func() error { return o.Gemm(gw.w1, true, false, d, m, n, la.h2, dbig, 1) },
			func() error { return o.Gemm(dsmall, false, true, n, d, m, dbig, bw.w1, 0) },
			func() error { return o.LayerNormBack(dx, gw.ln2G, gw.ln2B, n, d, dsmall, la.xhat2, la.rstd2, bw.ln2G) },
			func() error { return o.ColSum(gw.bo, n, d, dx) },
			func() error { return o.Gemm(gw.wo, true, false, d, d, n, la.ao, dx, 1) },
			func() error { return o.Gemm(dsmall, false, true, n, d, d, dx, bw.wo, 0) },
			func() error { return o.AttentionBack(dbig, b, s, la.qkv, la.p, dsmall) },
			func() error { return o.ColSum(gw.bqkv, n, 3*d, dbig) },
			func() error { return o.Gemm(gw.wqkv, true, false, d, 3*d, n, la.h1, dbig, 1) },
			func() error { return o.Gemm(dsmall, false, true, n, d, 3*d, dbig, bw.wqkv, 0) },
			func() error { return o.LayerNormBack(dx, gw.ln1G, gw.ln1B, n, d, dsmall, la.xhat1, la.rstd1, bw.ln1G) },
		)
	}
	steps = append(steps,
		func() error { return o.PatchEmbedBack(dsmall, g.patchPos, b, s, dx) },
		func() error { return o.Gemm(g.patchW, true, false, pl, d, b*np, a.pv, dsmall, 1) },
		func() error { return o.ColSum(g.patchB, b*np, d, dsmall) },
		func() error { return o.TokenEmbedBack(g.tokEmb, g.tokPos, b, l, s, dx, a.tokens) },
	)
	return run(steps)
}
