package vlm

import (
	"github.com/mtrl-go/mtrl/tensor"
)

// OpsModel is the model on the backend of an op set (HostOps on the CPU, CUDAOps on a GPU):
// its parameters and their gradients live there, and Forward and Backward run the SDK's ops on
// them (layout and attention: net.go).
type OpsModel struct {
	Config Config

	ops    Ops
	params []*Param
	w, g   tweights

	// final, when set (Model.ReportFinal), receives gradients the rest of backward leaves
	// unchanged: the head's and the final norm's, then each block's from the last, then the
	// embeddings'.
	final func(...*tensor.Tensor)
}

// tweights holds the trainable tensors (or their gradients) in specs order. Linear weights are
// [out, in]; wqkv's rows are the query, key and value projections (qkv: their views).
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

// qkv returns the query, key and value rows of a block's wqkv (or bqkv): views, so gradients
// written through them land in the parameter.
func qkv(t *tensor.Tensor, d int) (q, k, v *tensor.Tensor, err error) {
	if q, err = t.Rows(0, d); err != nil {
		return nil, nil, nil, err
	}
	if k, err = t.Rows(d, 2*d); err != nil {
		return nil, nil, nil, err
	}
	v, err = t.Rows(2*d, 3*d)
	return q, k, v, err
}

// newOpsModel wraps params (tensors on ops' backend, in specs order) without copying them.
func newOpsModel(c Config, ops Ops, params []*Param) *OpsModel {
	om := &OpsModel{Config: c, ops: ops, params: params}
	om.w.blocks, om.g.blocks = make([]tblock, c.Layers), make([]tblock, c.Layers)
	ws, gs := om.w.slots(), om.g.slots()
	for i, p := range params {
		*ws[i], *gs[i] = p.W, p.G
	}
	return om
}

// NewOpsModel copies m's weights to the op set's backend, with zero gradients.
func NewOpsModel(m *Model, ops Ops) (*OpsModel, error) {
	var params []*Param
	release := func() {
		for _, p := range params {
			_ = p.W.Release()
			_ = p.G.Release()
		}
	}
	for _, p := range m.Params() {
		w, err := tensor.To(ops.Backend(), p.W)
		if err != nil {
			release()
			return nil, err
		}
		g, err := tensor.New(ops.Backend(), tensor.Float32, p.W.Shape()...)
		if err != nil {
			_ = w.Release()
			release()
			return nil, err
		}
		params = append(params, &Param{Name: p.Name, W: w, G: g})
	}
	return newOpsModel(m.Config, ops, params), nil
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
	for _, p := range om.params {
		if v, err := p.G.Float32s(); err == nil {
			clear(v)
			continue
		}
		z, ok := om.ops.(zeroer)
		if !ok {
			return tensor.Errorf(tensor.ErrBackend, "vlm.OpsModel.ZeroGrad", "ops", "%s tensors need an op set that zeroes them", p.G.Backend().Name())
		}
		if err := z.Zero(p.G, p.G.Len()); err != nil {
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
	om      *OpsModel
	b, l, s int
	geo     *geometry
	pk      packs
	pv, tok *tensor.Tensor // patch vectors [B·NP, P²C], token ids [B·L]
	layers  []tlayer
	xF, hF  *tensor.Tensor // the final LayerNorm's input (the text rows) and output [B·L, D]
	sc      *tensor.Scratch
}

// tlayer is what one block keeps for the backward pass; rows are in net.go's order.
type tlayer struct {
	x0, h1  *tensor.Tensor // block input [N, D] and LayerNorm 1's output
	h1r     *tensor.Tensor // h1 in the keys' row order
	q, k, v *tensor.Tensor // [N, H, D/H]: q in h1's order, k and v in h1r's
	o, lse  *tensor.Tensor // attention output [N, H, D/H] (q's order) and log-sum-exp [N, H]
	x1, h2  *tensor.Tensor // after the attention residual, and LayerNorm 2's output
	u, a    *tensor.Tensor // MLP pre-activation and activation [N, M]
}

// Release frees the record's device memory (host records need nothing).
func (a *OpsActivations) Release() {
	if a != nil && a.sc != nil {
		_ = a.sc.Release()
		a.sc = nil
	}
}

// Forward runs the model on images [B, H, W, C] uint8 (host) and tokens [B, L] int32 (host, where
// the ids are checked against the vocabulary, or on the op set's backend, where they are trusted
// to be in [0, Vocab)). It returns logits [B, L, V] on the op set's backend (the caller releases
// them) and the activation record.
func (om *OpsModel) Forward(images, tokens *tensor.Tensor) (*tensor.Tensor, *OpsActivations, error) {
	const op = "vlm.OpsModel.Forward"
	c := om.Config
	b, l, err := checkTokens(op, c, tokens)
	if err != nil {
		return nil, nil, err
	}
	if tokens.IsHost() {
		ids, _ := tokens.Int32s()
		for i, id := range ids {
			if id < 0 || int(id) >= c.Vocab {
				return nil, nil, tensor.Errorf(tensor.ErrParam, op, "tokens", "id %d at [%d, %d] is outside [0, %d)", id, i/l, i%l, c.Vocab)
			}
		}
	}
	px, err := checkImages(op, c, images, b)
	if err != nil {
		return nil, nil, err
	}
	a := &OpsActivations{om: om, b: b, l: l, s: c.Patches() + l, layers: make([]tlayer, c.Layers), sc: tensor.NewScratch(om.ops.Backend())}
	logits, err := om.forward(a, patchVectors(c, px, b), tokens)
	if err != nil {
		a.Release()
		return nil, nil, err
	}
	return logits, a, nil
}

// Backward accumulates into the parameters' G the gradients of sum(dlogits ⊙ logits) for the
// pass recorded in act; dlogits [B, L, V] float32 is on the op set's backend.
func (om *OpsModel) Backward(act *OpsActivations, dlogits *tensor.Tensor) error {
	const op = "vlm.OpsModel.Backward"
	if act == nil || act.om != om || act.sc == nil {
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
	return om.backward(act, dlogits)
}
