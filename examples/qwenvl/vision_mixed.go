package qwenvl

import (
	"errors"
	"fmt"

	"github.com/mtrl-go/mtrl/tensor"
)

// visionMixed is the tower's bf16 mixed precision (hflm's scheme, examples/hflm/mixed.go):
// bfloat16 copies of the float32 master weights, which the passes compute with.
type visionMixed struct {
	vecs map[string]*tensor.Tensor       // norm weights and biases: float32 holding bfloat16 values
	mats map[string]*tensor.PackedWeight // the linear layers: bfloat16 copies packed as pairs
}

// SetMixedPrecision selects the dtype the tower computes in: tensor.Float32 (the default) or
// tensor.BFloat16, the mixed precision of hflm.Model.SetMixedPrecision. In bf16 mode the
// patch embedding, the blocks' projections and the merger's two layers multiply bfloat16
// inputs by bfloat16 copies of the weights (VDPBF16PS on a CPU with AVX512_BF16: exact
// products, float32 sums); every op's output is rounded to bfloat16, and a training Forward
// keeps its activations as bfloat16 tensors; the norms, the rotary embedding, the attention
// and the activations compute in float32 on those values. The masters, their gradients and
// the optimizer's state stay float32; Repack rounds the masters into the copies again.
func (t *Vision) SetMixedPrecision(dt tensor.DType) error {
	switch dt {
	case tensor.Float32:
		if t.mp == nil {
			return nil
		}
		t.mp = nil
		return t.bind(func(name string) *tensor.Tensor { return t.byName[name].value }, func(name string) (*tensor.PackedWeight, error) {
			p := t.byName[name]
			var err error
			if p.packed == nil {
				p.packed, err = tensor.PackWeight(p.value)
			}
			return p.packed, err
		})
	case tensor.BFloat16:
		if t.mp != nil {
			return nil
		}
		if !t.onHost() {
			return tensor.Errorf(tensor.ErrBackend, "qwenvl.Vision.SetMixedPrecision", "dt", "bf16 mixed precision runs on the CPU backend only, not on %s (compute in float32 there)", t.b.Name())
		}
		mp := &visionMixed{vecs: map[string]*tensor.Tensor{}, mats: map[string]*tensor.PackedWeight{}}
		err := t.bind(func(name string) *tensor.Tensor {
			v, _ := f32(t.byName[name].value.Shape()...)
			mp.vecs[name] = v
			return v
		}, func(name string) (*tensor.PackedWeight, error) {
			p := t.byName[name]
			bf := tensor.Must(tensor.FromBF16(make([]tensor.BF16, p.value.Len()), p.value.Shape()...))
			w, err := tensor.PackWeight(bf)
			if err != nil {
				return nil, fmt.Errorf("qwenvl: packing %s: %w", name, err)
			}
			mp.mats[name] = w
			p.packed = nil // the float32 panels are not read in bf16 mode
			return w, nil
		})
		if err != nil {
			return err
		}
		t.mp = mp
		return mp.refresh(t)
	}
	return tensor.Errorf(tensor.ErrParam, "qwenvl.Vision.SetMixedPrecision", "dt", "is %v, want float32 or bfloat16", dt)
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

// refresh rounds the masters into the bfloat16 copies and repacks them.
func (mp *visionMixed) refresh(t *Vision) error {
	for name, v := range mp.vecs {
		dst := host(v)
		copy(dst, host(t.byName[name].value))
		roundBF16(dst)
	}
	for name, w := range mp.mats {
		b, _ := w.Weight().BF16s()
		tensor.RoundToBF16(b, host(t.byName[name].value))
		if err := w.Repack(); err != nil {
			return err
		}
	}
	return nil
}

// roundBF16 rounds each value to the nearest bfloat16 (ties to even), in place.
func roundBF16(v []float32) { tensor.RoundFloat32s(v) }

// round rounds an op's output to bfloat16 values in bf16 mode (which runs on the host).
func (t *Vision) round(x *tensor.Tensor) {
	if t.mp != nil {
		roundBF16(host(x))
	}
}

// store returns what a forward keeps of an activation, and what a projection reads: in bf16
// mode a bfloat16 copy (its values are bfloat16 already: exact), else t.
func (t *Vision) store(x *tensor.Tensor) *tensor.Tensor {
	if t.mp == nil || x == nil || x.DType() == tensor.BFloat16 {
		return x
	}
	v := host(x)
	b := make([]tensor.BF16, len(v))
	tensor.RoundToBF16(b, v)
	return tensor.Must(tensor.FromBF16(b, x.Shape()...))
}

// storeBlock stores a block's activations (the attention's log-sum-exp stays float32).
func (t *Vision) storeBlock(s blockActs) blockActs {
	for _, p := range []**tensor.Tensor{&s.xIn, &s.h1, &s.q, &s.k, &s.v, &s.attn, &s.xMid, &s.h2, &s.a, &s.b, &s.act, &s.prod} {
		*p = t.store(*p)
	}
	return s
}

// widen returns x as float32: x itself, or a float32 copy of a bfloat16 tensor (exact).
func widen(x *tensor.Tensor) *tensor.Tensor {
	if x == nil || x.DType() == tensor.Float32 {
		return x
	}
	b, _ := x.BF16s()
	v := make([]float32, len(b))
	tensor.WidenBF16(v, b)
	return tensor.Must(tensor.FromFloat32(v, x.Shape()...))
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
// and of the tower (Vision.SetMixedPrecision) together: tensor.Float32 or tensor.BFloat16.
// The tower goes first because it is the part that refuses a device backend: a refusal leaves
// both parts as they were.
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
	// bf16(bf16(dst) + src) in three vector passes (each bit for bit the scalar step)
	tensor.RoundFloat32s(host(dst))
	if err := add(dst, src); err != nil {
		return err
	}
	tensor.RoundFloat32s(host(dst))
	return nil
}

// fwdBufs are a forward's buffers on the tower's backend: a training forward allocates each
// (it keeps them), an inference forward reuses them by name from block to block.
type fwdBufs struct {
	t    *Vision
	keep bool
	f    map[string]*tensor.Tensor // flat float32 buffers
	b    map[string][]tensor.BF16
}

// get returns a float32 tensor of the shape (contents undefined when reused).
func (fb *fwdBufs) get(e *errs, name string, shape ...int) *tensor.Tensor {
	if fb.keep {
		return fb.t.alloc(e, shape...)
	}
	n := 1
	for _, d := range shape {
		n *= d
	}
	if fb.f == nil {
		fb.f = map[string]*tensor.Tensor{}
	}
	buf := fb.f[name]
	if buf == nil || buf.Len() < n {
		buf = fb.t.alloc(e, n)
		fb.f[name] = buf
	}
	return view(e, rows(e, buf, 0, n), shape...)
}

// gemmIn returns x as a projection reads it: in bf16 mode x rounded to a bfloat16 tensor
// (a reused one in inference), else x.
func (fb *fwdBufs) gemmIn(name string, x *tensor.Tensor) *tensor.Tensor {
	if fb.t.mp == nil {
		return x
	}
	if fb.keep {
		return fb.t.store(x)
	}
	v := host(x)
	if fb.b == nil {
		fb.b = map[string][]tensor.BF16{}
	}
	b := fb.b[name]
	if cap(b) < len(v) {
		b = make([]tensor.BF16, len(v))
		fb.b[name] = b
	}
	b = b[:len(v)]
	tensor.RoundToBF16(b, v)
	return tensor.Must(tensor.FromBF16(b, x.Shape()...))
}
