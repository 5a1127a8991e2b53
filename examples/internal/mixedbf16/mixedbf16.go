// Package mixedbf16 is the bf16 mixed precision shared by examples/hflm's language models and
// examples/qwenvl's vision tower: bfloat16 copies of float32 master weights, and the
// conversions between float32 and bfloat16 tensors on any backend (on the host slice by slice,
// on a device with its embedding kernels, so nothing stages through the host).
package mixedbf16

import (
	"fmt"

	"github.com/mtrl-go/mtrl/tensor"
)

// Converter converts float32 and bfloat16 tensors on one backend. It keeps a device's row id
// and scratch buffers, so it is not safe for concurrent use.
type Converter struct {
	b       tensor.Backend
	zeroID  *tensor.Tensor    // int32 [1] zero on the device: Convert's row id
	scratch [2]*tensor.Tensor // Scratch's device buffers (flat, grown on demand)
}

// NewConverter returns a Converter for tensors on b.
func NewConverter(b tensor.Backend) *Converter { return &Converter{b: b} }

// OnHost reports whether the converter's backend is the CPU.
func (c *Converter) OnHost() bool { return c.b == tensor.CPU() }

// Convert writes src into dst, of the other dtype (float32 and bfloat16) and as many elements:
// rounding to nearest even, or widening exactly. On a device it is the embedding kernels'
// conversion with src as a one-row table ([1, n], id 0): the gather of a float32 table into
// bfloat16 rows rounds (as the CPU's BF16FromFloat32), the scatter of bfloat16 rows into a
// zeroed float32 table widens (0 + x). The kernels are called directly (the id is known to be
// valid), which spares the entry points' download of the ids for checking.
func (c *Converter) Convert(dst, src *tensor.Tensor) error {
	n := src.Len()
	if n == 0 {
		return nil
	}
	if dst.Len() != n {
		return tensor.Errorf(tensor.ErrShape, "mixedbf16.Convert", "dst", "has %d elements, src %d", dst.Len(), n)
	}
	if c.OnHost() && dst.IsHost() && src.IsHost() {
		switch {
		case dst.DType() == tensor.BFloat16 && src.DType() == tensor.Float32:
			d, _ := dst.BF16s()
			s, _ := src.Float32s()
			tensor.RoundToBF16(d, s)
			return nil
		case dst.DType() == tensor.Float32 && src.DType() == tensor.BFloat16:
			d, _ := dst.Float32s()
			s, _ := src.BF16s()
			tensor.WidenBF16(d, s)
			return nil
		}
	}
	d, err := dst.Reshape(1, n)
	if err != nil {
		return err
	}
	s, err := src.Reshape(1, n)
	if err != nil {
		return err
	}
	if c.zeroID == nil {
		id, err := tensor.FromInt32([]int32{0}, 1)
		if err == nil && !c.OnHost() {
			id, err = tensor.To(c.b, id)
		}
		if err != nil {
			return err
		}
		c.zeroID = id
	}
	k, ok := tensor.KernelOf[tensor.EmbeddingKernel](c.b)
	switch {
	case dst.DType() == tensor.BFloat16 && src.DType() == tensor.Float32:
		if ok {
			return k.Embedding(d, s, c.zeroID)
		}
		return tensor.Embedding(d, s, c.zeroID)
	case dst.DType() == tensor.Float32 && src.DType() == tensor.BFloat16:
		g := tensor.EmbeddingGrad{IDs: c.zeroID, DY: s}
		if ok {
			return k.EmbeddingBackward(d, g)
		}
		return tensor.EmbeddingBackward(d, g)
	}
	return tensor.Errorf(tensor.ErrDType, "mixedbf16.Convert", "dst", "is %v and src %v, want float32 and bfloat16 either way", dst.DType(), src.DType())
}

// RoundTo writes the float32 src rounded to bfloat16 values into the float32 dst (src itself
// may be dst): on a device through a bfloat16 scratch copy (slot 0), both conversions there.
func (c *Converter) RoundTo(dst, src *tensor.Tensor) error {
	if dst.Len() != src.Len() {
		return tensor.Errorf(tensor.ErrShape, "mixedbf16.RoundTo", "dst", "has %d elements, src %d", dst.Len(), src.Len())
	}
	if c.OnHost() {
		d, err := dst.Float32s()
		if err != nil {
			return err
		}
		s, err := src.Float32s()
		if err != nil {
			return err
		}
		copy(d, s)
		tensor.RoundFloat32s(d)
		return nil
	}
	tmp, err := c.Scratch(0, src.Len())
	if err != nil {
		return err
	}
	if err := c.Convert(tmp, src); err != nil {
		return err
	}
	return c.Convert(dst, tmp)
}

// Store returns a new bfloat16 copy of the float32 t on its backend (t rounded), or t itself
// when it is bfloat16 already: what a training pass keeps of an activation in bf16 mode.
func (c *Converter) Store(t *tensor.Tensor) (*tensor.Tensor, error) {
	if t == nil || t.DType() == tensor.BFloat16 {
		return t, nil
	}
	out, err := tensor.NewLike(t, tensor.BFloat16)
	if err != nil {
		return t, err
	}
	return out, c.Convert(out, t)
}

// Widen returns t as float32: t itself, or a new float32 copy of a bfloat16 tensor (exact).
func (c *Converter) Widen(t *tensor.Tensor) (*tensor.Tensor, error) {
	if t == nil || t.DType() == tensor.Float32 {
		return t, nil
	}
	out, err := tensor.NewLike(t, tensor.Float32)
	if err != nil {
		return t, err
	}
	return out, c.Convert(out, t)
}

// Scratch returns bfloat16 slot i (0 or 1) of the converter's reused buffers with n elements
// on its backend (contents undefined; the next call for the slot may overwrite them).
func (c *Converter) Scratch(i, n int) (*tensor.Tensor, error) {
	if i < 0 || i >= len(c.scratch) {
		return nil, tensor.Errorf(tensor.ErrParam, "mixedbf16.Scratch", "i", "is %d, want 0 or 1", i)
	}
	if b := c.scratch[i]; b == nil || b.Len() < n {
		if b != nil && !b.IsHost() {
			_ = b.Release()
		}
		t, err := tensor.New(c.b, tensor.BFloat16, max(n, 1))
		if err != nil {
			c.scratch[i] = nil
			return nil, err
		}
		c.scratch[i] = t
	}
	return c.scratch[i].Rows(0, n)
}

// Copies are the bfloat16 copies of a model's float32 masters that bf16 mode computes with, on
// the masters' backend: Mats the linear layers' (bfloat16, packed), Vecs the norm weights' and
// biases' (float32 holding bfloat16 values, since their ops read float32).
type Copies struct {
	Vecs   map[string]*tensor.Tensor
	Mats   map[string]*tensor.PackedWeight
	master func(name string) *tensor.Tensor
	c      *Converter
}

// NewCopies returns empty copies of the masters master gives by name, converted by c.
func NewCopies(c *Converter, master func(name string) *tensor.Tensor) *Copies {
	return &Copies{Vecs: map[string]*tensor.Tensor{}, Mats: map[string]*tensor.PackedWeight{}, master: master, c: c}
}

// Vec adds the copy of a norm weight or bias (zero until Refresh).
func (p *Copies) Vec(name string) (*tensor.Tensor, error) {
	t, err := tensor.NewLike(p.master(name), tensor.Float32)
	if err != nil {
		return nil, err
	}
	p.Vecs[name] = t
	return t, nil
}

// Mat adds the packed bfloat16 copy of a matrix (zero until Refresh).
func (p *Copies) Mat(name string) (*tensor.PackedWeight, error) {
	bf, err := tensor.NewLike(p.master(name), tensor.BFloat16)
	if err != nil {
		return nil, err
	}
	w, err := tensor.PackWeight(bf)
	if err != nil {
		return nil, fmt.Errorf("packing %s: %w", name, err)
	}
	p.Mats[name] = w
	return w, nil
}

// Refresh rounds the masters into the copies and repacks the matrices: after the load and
// after each optimizer step.
func (p *Copies) Refresh() error {
	for name, t := range p.Vecs {
		if err := p.c.RoundTo(t, p.master(name)); err != nil {
			return err
		}
	}
	for name, w := range p.Mats {
		if err := p.c.Convert(w.Weight(), p.master(name)); err != nil {
			return err
		}
		if err := w.Repack(); err != nil {
			return err
		}
	}
	return nil
}
