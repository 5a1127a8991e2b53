package qwenvl

import (
	"github.com/mtrl-go/mtrl/tensor"
)

// ensureGrads allocates the tower's zero gradients on first use.
func (t *Vision) ensureGrads() error {
	if t.lora != nil { // the base is frozen: the adapters have theirs
		return nil
	}
	var e errs
	for _, p := range t.params {
		if p.grad == nil {
			p.grad = t.alloc(&e, p.value.Shape()...)
		}
	}
	return e.err
}

// ZeroGrads sets the tower's gradients to zero.
func (t *Vision) ZeroGrads() error {
	var e errs
	if t.lora != nil {
		for _, ad := range t.lora.adapters {
			e.do(zero(ad.ga))
			e.do(zero(ad.gb))
		}
	}
	for _, p := range t.params {
		if p.grad != nil {
			e.do(zero(p.grad))
		}
	}
	return e.err
}

// Backward adds the gradients of every tower weight given dOut, the gradient of Forward's
// output [rows/merge_size², OutDim] on the tower's backend, to the tower's gradients. a must
// come from Forward with keep.
func (t *Vision) Backward(a *VisionActs, dOut *tensor.Tensor) error {
	const op = "qwenvl.Vision.Backward"
	if a == nil {
		return tensor.Errorf(tensor.ErrParam, op, "a", "is nil (Forward without keep)")
	}
	v, l := t.cfg, a.l
	n, d := l.n, v.Dim
	unit := v.MergeSize * v.MergeSize
	nm := n / unit
	if err := tensor.CheckShape(op, "dOut", dOut, nm, v.OutDim); err != nil {
		return err
	}
	if err := t.ensureGrads(); err != nil {
		return err
	}
	t.bwd = a
	defer func() { t.bwd = nil }()
	var e errs
	dy := dOut
	if l.win != nil { // into the window order of the merger's rows
		dy = t.permute(&e, dOut, l.win, v.OutDim)
	}
	dgelu := t.alloc(&e, nm, unit*d)
	e.do(t.linearBackward(dgelu, a.gelu, dy, t.mlp2))
	dpre := t.alloc(&e, nm, unit*d)
	e.do(tensor.ActivateBackward(dpre, tensor.ActivationGrad{X: t.widen(&e, a.pre), DY: dgelu, Activation: tensor.GELU}))
	dln := t.alloc(&e, nm, unit*d)
	e.do(t.linearBackward(dln, a.lnOut, dpre, t.mlp0))
	dx := t.alloc(&e, n, d)
	e.do(t.normBackward(dx, t.widen(&e, a.xLast), view(&e, dln, n, d), t.lnQ))
	tmp := t.alloc(&e, n, d)
	for i := len(t.blocks) - 1; i >= 0; i-- {
		blk, s := &t.blocks[i], &a.blocks[i]
		// MLP: y = xMid + mlp(norm2(xMid)).
		dh2 := t.alloc(&e, n, d)
		if t.gated {
			dprod := t.alloc(&e, n, v.MLPDim)
			e.do(t.linearBackward(dprod, s.prod, dx, blk.down))
			da := t.alloc(&e, n, v.MLPDim)
			db := t.alloc(&e, n, v.MLPDim)
			if s.act == nil { // the forward's SwiGLU
				e.do(tensor.SwiGLUBackward(da, db, tensor.SwiGLUGrad{Gate: t.widen(&e, s.a), Up: t.widen(&e, s.b), DY: dprod}))
			} else {
				dact := t.alloc(&e, n, v.MLPDim)
				e.do(tensor.Mul(dact, dprod, t.widen(&e, s.b)))
				e.do(tensor.Mul(db, dprod, t.widen(&e, s.act)))
				e.do(tensor.ActivateBackward(da, tensor.ActivationGrad{X: t.widen(&e, s.a), DY: dact, Activation: v.Act}))
			}
			e.do(t.linearBackward(dh2, s.h2, da, blk.gate))
			e.do(t.linearBackward(tmp, s.h2, db, blk.up))
			e.do(add(dh2, tmp))
		} else {
			dact := t.alloc(&e, n, v.MLPDim)
			e.do(t.linearBackward(dact, s.act, dx, blk.fc2))
			da := t.alloc(&e, n, v.MLPDim)
			e.do(tensor.ActivateBackward(da, tensor.ActivationGrad{X: t.widen(&e, s.a), DY: dact, Activation: v.Act}))
			e.do(t.linearBackward(dh2, s.h2, da, blk.fc1))
		}
		e.do(t.normBackward(tmp, t.widen(&e, s.xMid), dh2, blk.norm2))
		e.do(add(dx, tmp))
		// Attention: xMid = xIn + proj(attn(rope(q), rope(k), v)), q, k, v = qkv(norm1(xIn)).
		dattn := t.alloc(&e, n, v.Heads, v.HeadDim())
		e.do(t.linearBackward(dattn, s.attn, dx, blk.proj))
		dqkvp := t.alloc(&e, 3*n, v.Heads, v.HeadDim()) // dq, dk, dv: n rows each
		dq, dk, dv := rows(&e, dqkvp, 0, n), rows(&e, dqkvp, n, 2*n), rows(&e, dqkvp, 2*n, 3*n)
		cu := l.cuFull
		if l.cuWindow != nil && !t.fullBlock(i) {
			cu = l.cuWindow
		}
		e.do(tensor.AttentionBackward(dq, dk, dv, tensor.AttentionGrad{
			AttentionInputs: tensor.AttentionInputs{Q: t.widen(&e, s.q), K: t.widen(&e, s.k), V: t.widen(&e, s.v), CuSeqlensQ: cu, CuSeqlensK: cu},
			Out:             t.widen(&e, s.attn), LSE: s.lse, DOut: dattn,
		}, t.attn))
		e.do(tensor.RoPEBackward(dq, tensor.RoPEGrad{DY: dq, Positions: l.pos, Config: t.rope}))
		e.do(tensor.RoPEBackward(dk, tensor.RoPEGrad{DY: dk, Positions: l.pos, Config: t.rope}))
		dqkv := t.alloc(&e, n, 3*d)
		e.do(tensor.Embedding(view(&e, dqkv, 3*n, d), view(&e, dqkvp, 3*n, d), l.merge))
		dh1 := t.alloc(&e, n, d)
		e.do(t.linearBackward(dh1, s.h1, dqkv, blk.qkv))
		e.do(t.normBackward(tmp, t.widen(&e, s.xIn), dh1, blk.norm1))
		e.do(add(dx, tmp))
		if e.err != nil {
			return e.err
		}
	}
	if l.winInv != nil { // back to the patches' order
		dx = t.permute(&e, dx, l.winInv, unit*d)
	}
	if e.err != nil {
		return e.err
	}
	if g := t.byName[t.patch.name+".weight"].grad; g != nil {
		if err := tensor.LinearBackward(tensor.LinearGradOut{DWeight: g},
			tensor.LinearGrad{X: a.pixels, Weight: t.patch.w, DY: dx, Accumulate: true, GradBF16: t.bf16Grad()}); err != nil {
			return err
		}
	}
	return t.adaptBackward(nil, dx, t.patch, a)
}

func (t *Vision) fullBlock(i int) bool {
	for _, b := range t.cfg.FullAttBlocks {
		if b == i {
			return true
		}
	}
	return false
}

// linearBackward writes dx and adds the weight and bias gradients of y = x·Wᵀ + b.
func (t *Vision) linearBackward(dx, x, dy *tensor.Tensor, l linear) error {
	nOut, nIn := l.w.Weight().Dim(0), l.w.Weight().Dim(1)
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
	out := tensor.LinearGradOut{DX: dx2, DWeight: t.byName[l.name+".weight"].grad} // nil under LoRA: frozen
	if l.b != nil {
		out.DBias = t.byName[l.name+".bias"].grad
	}
	if err := tensor.LinearBackward(out, tensor.LinearGrad{X: x2, Weight: l.w, DY: dy2, Accumulate: true, GradBF16: t.bf16Grad()}); err != nil {
		return err
	}
	return t.adaptBackward(dx2, dy2, l, t.bwd)
}

// normBackward writes dx and adds the norm's weight (and bias) gradients.
func (t *Vision) normBackward(dx, x, dy *tensor.Tensor, n norm) error {
	in := tensor.NormGrad{X: x, Weight: n.w, DY: dy, Eps: visionEps, Accumulate: true}
	dw, db := t.byName[n.name+".weight"].grad, (*tensor.Tensor)(nil)
	if n.b != nil {
		db = t.byName[n.name+".bias"].grad
	}
	if dw == nil { // a frozen base (LoRA): the ops' weight gradients go to scratch
		var e errs
		dw, db = t.alloc(&e, n.w.Shape()...), t.alloc(&e, n.w.Shape()...)
		if e.err != nil {
			return e.err
		}
	}
	if n.b != nil {
		return tensor.LayerNormBackward(dx, dw, db, in)
	}
	return tensor.RMSNormBackward(dx, dw, in)
}

// Repack rebuilds the packed matrices after the weights changed (an optimizer step): in bf16
// mode the bfloat16 copies from the masters.
func (t *Vision) Repack() error {
	if t.lora != nil { // the frozen base never changes
		for _, ad := range t.lora.adapters {
			if err := ad.pa.Repack(); err != nil {
				return err
			}
			if err := ad.pb.Repack(); err != nil {
				return err
			}
		}
		return nil
	}
	for _, p := range t.params {
		if p.packed != nil {
			if err := p.packed.Repack(); err != nil {
				return err
			}
		}
	}
	if t.mp != nil {
		return t.mp.Refresh()
	}
	return nil
}
