package qwenvl

import (
	"errors"
	"fmt"

	"github.com/mtrl-go/mtrl/examples/internal/mixedbf16"
	"github.com/mtrl-go/mtrl/tensor"
)

// visionMixed is the tower's bf16 mixed precision, hflm's (examples/hflm/mixed.go, the same
// mixedbf16.Copies): bfloat16 copies of the float32 master weights, which the passes compute
// with.
type visionMixed = mixedbf16.Copies

// SetMixedPrecision selects the dtype the tower computes in: tensor.Float32 (the default) or
// tensor.BFloat16, the mixed precision of hflm.Model.SetMixedPrecision. In bf16 mode the
// patch embedding, the blocks' projections and the merger's two layers multiply bfloat16
// inputs by bfloat16 copies of the weights (VDPBF16PS on a CPU with AVX512_BF16, cuBLAS on
// bfloat16 operands on a device: exact products, float32 sums); every op's output is rounded
// to bfloat16, and a training Forward keeps its activations as bfloat16 tensors; the norms,
// the rotary embedding, the attention and the activations compute in float32 on those values.
// The masters, their gradients and the optimizer's state stay float32; Repack rounds the
// masters into the copies again. On a device (LoadOn) the copies, the roundings and the kept
// activations live there, converted by its kernels.
func (t *Vision) SetMixedPrecision(dt tensor.DType) error {
	switch dt {
	case tensor.Float32:
		if t.mp == nil {
			return nil
		}
		t.mp = nil
		return t.bindMasters()
	case tensor.BFloat16:
		if t.mp != nil {
			return nil
		}
		mp := mixedbf16.NewCopies(t.conv(), func(name string) *tensor.Tensor { return t.byName[name].value })
		var e errs
		err := t.bind(func(name string) *tensor.Tensor {
			v, err := mp.Vec(name)
			if err != nil {
				e.do(err)
				v, _ = f32(t.byName[name].value.Shape()...)
			}
			return v
		}, func(name string) (*tensor.PackedWeight, error) {
			w, err := mp.Mat(name)
			if err != nil {
				return nil, fmt.Errorf("qwenvl: %w", err)
			}
			t.byName[name].packed = nil // the float32 panels are not read in bf16 mode
			return w, nil
		})
		if err == nil {
			err = e.err
		}
		if err == nil {
			err = mp.Refresh()
		}
		if err != nil { // back to the float32 weights: the tower stays as it was
			return errors.Join(err, t.bindMasters())
		}
		t.mp = mp
		return nil
	}
	return tensor.Errorf(tensor.ErrParam, "qwenvl.Vision.SetMixedPrecision", "dt", "is %v, want float32 or bfloat16", dt)
}

// bindMasters points the layers at the float32 masters (packing them where bf16 mode dropped
// their panels).
func (t *Vision) bindMasters() error {
	return t.bind(func(name string) *tensor.Tensor { return t.byName[name].value }, func(name string) (*tensor.PackedWeight, error) {
		p := t.byName[name]
		var err error
		if p.packed == nil {
			p.packed, err = tensor.PackWeight(p.value)
		}
		return p.packed, err
	})
}

// MixedPrecision returns the dtype the tower computes in.
func (t *Vision) MixedPrecision() tensor.DType {
	if t.mp != nil {
		return tensor.BFloat16
	}
	return tensor.Float32
}

// bind points the tower's layers at the weights they compute with: vec gives a norm weight or
// bias, mat a linear layer's packed weight.
func (t *Vision) bind(vec func(name string) *tensor.Tensor, mat func(name string) (*tensor.PackedWeight, error)) error {
	lins := []*linear{&t.patch, &t.mlp0, &t.mlp2}
	norms := []*norm{&t.lnQ}
	for i := range t.blocks {
		b := &t.blocks[i]
		lins = append(lins, &b.qkv, &b.proj)
		if t.gated {
			lins = append(lins, &b.gate, &b.up, &b.down)
		} else {
			lins = append(lins, &b.fc1, &b.fc2)
		}
		norms = append(norms, &b.norm1, &b.norm2)
	}
	for _, l := range lins {
		w, err := mat(l.name + ".weight")
		if err != nil {
			return err
		}
		l.w = w
		if l.b != nil {
			l.b = vec(l.name + ".bias")
		}
	}
	for _, n := range norms {
		n.w = vec(n.name + ".weight")
		if n.b != nil {
			n.b = vec(n.name + ".bias")
		}
	}
	return nil
}

// conv returns the tower's float32 ↔ bfloat16 converter on its backend.
func (t *Vision) conv() *mixedbf16.Converter {
	if t.cv == nil {
		t.cv = mixedbf16.NewConverter(t.b)
	}
	return t.cv
}

// round rounds an op's output to bfloat16 values in bf16 mode, in place.
func (t *Vision) round(e *errs, x *tensor.Tensor) {
	if t.mp != nil {
		e.do(t.conv().RoundTo(x, x))
	}
}

// store returns what a forward keeps of an activation, and what a projection reads: in bf16
// mode a bfloat16 copy (its values are bfloat16 already: exact), else x.
func (t *Vision) store(e *errs, x *tensor.Tensor) *tensor.Tensor {
	if t.mp == nil {
		return x
	}
	out, err := t.conv().Store(x)
	e.do(err)
	return out
}

// storeBlock stores a block's activations (the attention's log-sum-exp stays float32).
func (t *Vision) storeBlock(e *errs, s blockActs) blockActs {
	for _, p := range []**tensor.Tensor{&s.xIn, &s.h1, &s.q, &s.k, &s.v, &s.attn, &s.xMid, &s.h2, &s.a, &s.b, &s.act, &s.prod} {
		*p = t.store(e, *p)
	}
	return s
}

// widen returns x as float32 on its backend: x itself, or a float32 copy of a bfloat16 tensor
// (exact).
func (t *Vision) widen(e *errs, x *tensor.Tensor) *tensor.Tensor {
	out, err := t.conv().Widen(x)
	if err != nil {
		e.do(err)
		if out.DType() != tensor.Float32 { // a stand-in for the ops after it, which only fail
			out = t.alloc(e, x.Shape()...)
		}
	}
	return out
}

// SetBF16Backward selects, for bf16 mode, whether the tower's backward rounds the gradient
// flowing into each linear layer to bfloat16 before its products with the weight and the kept
// activation, as torch's bfloat16 autograd does (tensor.LinearGrad.GradBF16: those GEMMs on
// VDPBF16PS; per element within (2⁻⁸ + adds·2⁻²⁴)·Σ|dy|·|w| of the float32 gradient's
// product). Off by default; no effect in float32 mode.
func (t *Vision) SetBF16Backward(on bool) { t.gradBF16 = on }

func (t *Vision) bf16Grad() bool { return t.gradBF16 && t.mp != nil }

// SetBF16Backward sets the language model's (hflm.Model.SetBF16Backward) and the tower's
// (Vision.SetBF16Backward) bfloat16 backward together.
func (m *Model) SetBF16Backward(on bool) {
	m.LM.SetBF16Backward(on)
	m.Vision.SetBF16Backward(on)
}

// SetMixedPrecision sets the compute dtype of the language model (hflm.Model.SetMixedPrecision)
// and of the tower (Vision.SetMixedPrecision) together: tensor.Float32 or tensor.BFloat16, on
// any backend. A failure (an unknown dtype, a device out of memory) leaves both parts as they
// were.
func (m *Model) SetMixedPrecision(dt tensor.DType) error {
	was := m.Vision.MixedPrecision()
	if err := m.Vision.SetMixedPrecision(dt); err != nil {
		return err
	}
	if err := m.LM.SetMixedPrecision(dt); err != nil {
		return errors.Join(err, m.Vision.SetMixedPrecision(was))
	}
	return nil
}

// residual adds src, the residual stream, to dst, a projection's output, on their backend: in
// bf16 mode both the output and the sum are rounded (torch's bfloat16 linear, then its bfloat16
// add).
func (t *Vision) residual(dst, src *tensor.Tensor) error {
	if t.mp == nil {
		return add(dst, src)
	}
	// bf16(bf16(dst) + src)
	var e errs
	t.round(&e, dst)
	e.do(add(dst, src))
	t.round(&e, dst)
	return e.err
}

// fwdBufs are a forward's buffers on the tower's backend: a training forward allocates each
// (it keeps them), an inference forward reuses them by name from block to block.
type fwdBufs struct {
	t    *Vision
	keep bool
	f    map[string]*tensor.Tensor // flat float32 buffers
	b    map[string]*tensor.Tensor // flat bfloat16 buffers (bf16 mode)
}

// get returns a float32 tensor of the shape (contents undefined when reused).
func (fb *fwdBufs) get(e *errs, name string, shape ...int) *tensor.Tensor {
	if fb.keep {
		return fb.t.alloc(e, shape...)
	}
	if fb.f == nil {
		fb.f = map[string]*tensor.Tensor{}
	}
	return fb.grown(e, fb.f, name, tensor.Float32, shape...)
}

// grown returns the first elements of bufs[name] as a tensor of the shape, growing the flat
// buffer (of dtype dt) when it is smaller.
func (fb *fwdBufs) grown(e *errs, bufs map[string]*tensor.Tensor, name string, dt tensor.DType, shape ...int) *tensor.Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	buf := bufs[name]
	if buf == nil || buf.Len() < n {
		var err error
		if buf, err = tensor.New(fb.t.b, dt, n); err != nil {
			e.do(err)
			buf, _ = f32(n) // a stand-in: the ops after the failure only return errors
		}
		bufs[name] = buf
	}
	return view(e, rows(e, buf, 0, n), shape...)
}

// gemmIn returns x as a projection reads it: in bf16 mode x rounded to a bfloat16 tensor
// (a reused one in inference), else x.
func (fb *fwdBufs) gemmIn(e *errs, name string, x *tensor.Tensor) *tensor.Tensor {
	if fb.t.mp == nil {
		return x
	}
	if fb.keep {
		return fb.t.store(e, x)
	}
	if fb.b == nil {
		fb.b = map[string]*tensor.Tensor{}
	}
	b := fb.grown(e, fb.b, name, tensor.BFloat16, x.Shape()...)
	e.do(fb.t.conv().Convert(b, x))
	return b
}
