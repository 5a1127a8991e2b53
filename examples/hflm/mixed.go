package hflm

import (
	"fmt"

	"github.com/mtrl-go/mtrl/tensor"
)

// mixed is bf16 mixed precision: bfloat16 copies of the float32 master weights, which the
// passes compute with. The masters, their gradients and the optimizer's state stay float32.
type mixed struct {
	vecs map[string]*tensor.Tensor       // norms and biases: float32 holding bfloat16 values
	mats map[string]*tensor.PackedWeight // linear layers and the LM head: bfloat16 copies
}

// SetMixedPrecision selects the dtype the passes compute in: tensor.Float32 (the default) or
// tensor.BFloat16, the mixed precision of FSDP's MixedPrecision(param_dtype=bfloat16,
// reduce_dtype=float32, buffer_dtype=float32). In bf16 mode
//
//   - the weights the passes read are bfloat16 copies of the float32 masters (norm weights and
//     biases as float32 holding bfloat16 values, since their ops read float32), rebuilt from the
//     masters by Repack after each optimizer step;
//   - every activation (each op's output, the residual stream included) is rounded to
//     bfloat16, and a training pass keeps its activations as bfloat16 tensors (half the
//     memory); the ops themselves compute in float32;
//   - the gradients flowing back, the parameter gradients (the reductions over tokens and
//     micro-batches), the masters and AdamW's moments are float32.
//
// On a CPU with AVX512_BF16 the linear layers and the LM head multiply bfloat16 activations by
// bfloat16 weights with VDPBF16PS (internal/gemm). On a device (LoadOn) the same tensors live
// there: the roundings and the bfloat16 copies run on it (convert), the GEMMs are cuBLAS's on
// bfloat16 operands with float32 sums, and the masters, gradients and moments stay float32.
// Generate decodes with the bfloat16 weights and bfloat16 inputs to the linear layers (its
// other activations are not rounded). LoRA adapters are trained as float32 masters read
// directly (they are small).
func (m *Model) SetMixedPrecision(dt tensor.DType) error {
	switch dt {
	case tensor.Float32:
		if m.mp == nil {
			return nil
		}
		m.mp = nil
		return m.bind(func(name string) *tensor.Tensor { return m.byName[name].value }, m.packWeight)
	case tensor.BFloat16:
		if m.mp != nil {
			return nil
		}
		if err := m.thaw(); err != nil { // the float32 masters
			return err
		}
		mp := &mixed{vecs: map[string]*tensor.Tensor{}, mats: map[string]*tensor.PackedWeight{}}
		var e errs
		err := m.bind(func(name string) *tensor.Tensor {
			t := m.alloc(&e, m.byName[name].value.Shape()...)
			mp.vecs[name] = t
			return t
		}, func(name string) (*tensor.PackedWeight, error) {
			p := m.byName[name]
			bf, err := tensor.New(m.b, tensor.BFloat16, p.value.Shape()...)
			if err != nil {
				return nil, err
			}
			w, err := tensor.PackWeight(bf)
			if err != nil {
				return nil, fmt.Errorf("hflm: packing %s: %w", name, err)
			}
			mp.mats[name] = w
			p.packed = nil // the float32 layout is not read in bf16 mode
			return w, nil
		})
		if err == nil {
			err = e.err
		}
		if err != nil {
			return err
		}
		m.mp = mp
		return mp.refresh(m)
	}
	return tensor.Errorf(tensor.ErrParam, "hflm.Model.SetMixedPrecision", "dt", "is %v, want float32 or bfloat16", dt)
}

// SetBF16Backward selects, for bf16 mode, whether the backward rounds the gradient flowing into
// each linear layer and the LM head to bfloat16 before multiplying it by the weight and the kept
// activation, as torch's bfloat16 autograd does (tensor.LinearGrad.GradBF16,
// tensor.LMHeadGrad.GradBF16): the data and weight gradients' GEMMs then run on VDPBF16PS, at
// twice the float32 rate, and each such product moves from the float32 backward's by at most
// (2⁻⁸ + adds·2⁻²⁴)·Σ|dy|·|w| per element (tensor.LinearGrad). Off (the default), those
// gradients are float32 throughout. LoRA adapters' own products stay float32 (their weights are
// float32 masters). It has no effect in float32 mode.
func (m *Model) SetBF16Backward(on bool) { m.gradBF16 = on }

// bf16Grad reports whether the backward rounds gradients to bfloat16 (SetBF16Backward in bf16
// mode).
func (m *Model) bf16Grad() bool { return m.gradBF16 && m.mp != nil }

// MixedPrecision returns the dtype the passes compute in.
func (m *Model) MixedPrecision() tensor.DType {
	if m.mp != nil {
		return tensor.BFloat16
	}
	return tensor.Float32
}

// bind points the layers at the weights they compute with: vec gives a norm weight or bias,
// mat a linear layer's packed weight.
func (m *Model) bind(vec func(name string) *tensor.Tensor, mat func(name string) (*tensor.PackedWeight, error)) error {
	headName := "lm_head.weight"
	if m.Config.TieWordEmbeddings {
		headName = "model.embed_tokens.weight"
	}
	var err error
	if m.head, err = mat(headName); err != nil {
		return err
	}
	m.norm = vec("model.norm.weight")
	for l := range m.layers {
		ly := &m.layers[l]
		ly.inNorm = vec(ly.prefix + "input_layernorm.weight")
		ly.postNorm = vec(ly.prefix + "post_attention_layernorm.weight")
		for _, lin := range ly.linears() {
			if lin.w, err = mat(lin.name + ".weight"); err != nil {
				return err
			}
			if lin.b != nil {
				lin.b = vec(lin.name + ".bias")
			}
		}
	}
	return nil
}

// refresh rounds the masters into the bfloat16 copies and repacks them: on the host slice by
// slice, on a device with its conversion kernels (convert).
func (mp *mixed) refresh(m *Model) error {
	if !m.onHost() {
		var e errs
		for name, t := range mp.vecs {
			m.roundTo(&e, t, m.byName[name].value)
		}
		for name, w := range mp.mats {
			e.do(m.convert(w.Weight(), m.byName[name].value))
			e.do(w.Repack())
		}
		return e.err
	}
	for name, t := range mp.vecs {
		v := host(t)
		copy(v, host(m.byName[name].value))
		roundBF16(v)
	}
	for name, w := range mp.mats {
		b, _ := w.Weight().BF16s()
		tensor.RoundToBF16(b, host(m.byName[name].value))
		if err := w.Repack(); err != nil {
			return err
		}
	}
	return nil
}

// roundBF16 rounds each value to the nearest bfloat16 (ties to even), in place.
func roundBF16(v []float32) { tensor.RoundFloat32s(v) }

// round rounds an op's output to bfloat16 values in bf16 mode, in place.
func (m *Model) round(e *errs, t *tensor.Tensor) {
	if m.mp != nil {
		m.roundTo(e, t, t)
	}
}

// roundTo writes the float32 src rounded to bfloat16 values into the float32 dst (src itself
// may be dst): on a device through a bfloat16 scratch copy, both conversions on the device.
func (m *Model) roundTo(e *errs, dst, src *tensor.Tensor) {
	if m.onHost() {
		v := host(dst)
		copy(v, host(src))
		roundBF16(v)
		return
	}
	tmp := m.scratchBF16(e, 0, src.Len())
	e.do(m.convert(tmp, src))
	e.do(m.convert(dst, tmp))
}

// store returns what a training pass keeps of an activation: a new bfloat16 copy in bf16 mode
// (its values are bfloat16 already: exact), else t.
func (m *Model) store(e *errs, t *tensor.Tensor) *tensor.Tensor {
	if m.mp == nil || t == nil || t.DType() == tensor.BFloat16 {
		return t
	}
	if !m.onHost() {
		out, err := tensor.New(m.b, tensor.BFloat16, t.Shape()...)
		if err != nil {
			e.do(err)
			return t
		}
		e.do(m.convert(out, t))
		return out
	}
	v := host(t)
	b := make([]tensor.BF16, len(v))
	tensor.RoundToBF16(b, v)
	return tensor.Must(tensor.FromBF16(b, t.Shape()...))
}

// storeLayer stores a layer's activations (the attention's log-sum-exp stays float32).
func (m *Model) storeLayer(e *errs, s layerActs) layerActs {
	for _, p := range []**tensor.Tensor{&s.xIn, &s.h1, &s.q, &s.k, &s.v, &s.attn, &s.xMid, &s.h2, &s.gate, &s.up, &s.act} {
		*p = m.store(e, *p)
	}
	return s
}

// free releases device tensors now rather than when the collector finalizes them, so that a
// pass's peak device memory is its live tensors' (no-op on the host, where the collector's
// heap accounting already sees them).
func (m *Model) free(ts ...*tensor.Tensor) {
	if m.onHost() {
		return
	}
	for _, t := range ts {
		if t != nil {
			_ = t.Release()
		}
	}
}

// freeStored frees the float32 originals of a layer's activations that storeLayer copied to
// bfloat16 (s as the layer computed them, kept as storeLayer returned them).
func (m *Model) freeStored(s, kept layerActs) {
	a, b := s.all(), kept.all()
	for i, t := range a {
		if t != b[i] {
			m.free(t)
		}
	}
}

// freeLayer frees what a layer's forward allocated for its backward (s and the LoRA
// activations of la), but for keep, the tensor the pass keeps as the layer's input.
func (m *Model) freeLayer(s layerActs, la *acts, keep *tensor.Tensor) {
	for _, t := range s.all() {
		if t != keep {
			m.free(t)
		}
	}
	for _, act := range la.lora {
		if act.x != keep {
			m.free(act.x, act.t)
		}
	}
}

// all lists the activations (nil ones included) in a fixed order.
func (s layerActs) all() []*tensor.Tensor {
	return []*tensor.Tensor{s.xIn, s.h1, s.q, s.k, s.v, s.attn, s.lse, s.xMid, s.h2, s.gate, s.up, s.act}
}

// widen returns t as float32: t itself, or a new float32 copy of a bfloat16 tensor (exact).
func (m *Model) widen(e *errs, t *tensor.Tensor) *tensor.Tensor {
	if t == nil || t.DType() == tensor.Float32 {
		return t
	}
	if !m.onHost() {
		out, err := tensor.New(m.b, tensor.Float32, t.Shape()...)
		if err != nil {
			e.do(err)
			out, _ = f32(t.Shape()...)
			return out
		}
		e.do(m.convert(out, t))
		return out
	}
	return widen(t)
}

// widenTmp is widen into the model's buffer named (a backward's operand, dead after the op
// that reads it: four slots, w0…w3, serve every op) on a device; a new tensor on the host.
func (m *Model) widenTmp(e *errs, name string, t *tensor.Tensor) *tensor.Tensor {
	if t == nil || t.DType() == tensor.Float32 || m.onHost() {
		return m.widen(e, t)
	}
	out := m.reused(e, name, t.Shape()...)
	e.do(m.convert(out, t))
	return out
}

// widen returns a host tensor as float32: t itself, or a new float32 copy of a bfloat16 one.
func widen(t *tensor.Tensor) *tensor.Tensor {
	if t == nil || t.DType() == tensor.Float32 {
		return t
	}
	b, _ := t.BF16s()
	v := make([]float32, len(b))
	for i, h := range b {
		v[i] = h.Float32()
	}
	return tensor.Must(tensor.FromFloat32(v, t.Shape()...))
}

// convert writes src into dst, of the other dtype (float32 and bfloat16) and as many elements,
// on the model's device: rounding to nearest even, or widening exactly. It is the embedding
// kernels' conversion with src as a one-row table ([1, n], id 0): the gather of a float32 table
// into bfloat16 rows rounds (as the CPU's BF16FromFloat32), the scatter of bfloat16 rows into
// a zeroed float32 table widens (0 + x). The kernels are called directly (the id is known to be
// valid), which spares the entry points' download of the ids for checking.
func (m *Model) convert(dst, src *tensor.Tensor) error {
	n := src.Len()
	if n == 0 {
		return nil
	}
	d, err := dst.Reshape(1, n)
	if err != nil {
		return err
	}
	s, err := src.Reshape(1, n)
	if err != nil {
		return err
	}
	if m.zeroID == nil {
		if m.zeroID, err = m.ints([]int32{0}, 1); err != nil {
			return err
		}
	}
	k, ok := tensor.KernelOf[tensor.EmbeddingKernel](m.b)
	switch {
	case dst.DType() == tensor.BFloat16 && src.DType() == tensor.Float32:
		if ok {
			return k.Embedding(d, s, m.zeroID)
		}
		return tensor.Embedding(d, s, m.zeroID)
	case dst.DType() == tensor.Float32 && src.DType() == tensor.BFloat16:
		g := tensor.EmbeddingGrad{IDs: m.zeroID, DY: s}
		if ok {
			return k.EmbeddingBackward(d, g)
		}
		return tensor.EmbeddingBackward(d, g)
	}
	return tensor.Errorf(tensor.ErrDType, "hflm.convert", "dst", "is %v and src %v, want float32 and bfloat16 either way", dst.DType(), src.DType())
}

// scratchBF16 returns bfloat16 slot i of the model's reused device buffers with n elements
// (contents undefined).
func (m *Model) scratchBF16(e *errs, i, n int) *tensor.Tensor {
	if b := m.scratch16[i]; b == nil || b.Len() < n {
		if b != nil {
			_ = b.Release()
		}
		t, err := tensor.New(m.b, tensor.BFloat16, n)
		if err != nil {
			e.do(err)
			t = tensor.Must(tensor.FromBF16(make([]tensor.BF16, n), n))
		}
		m.scratch16[i] = t
	}
	v, err := m.scratch16[i].Rows(0, n)
	if err != nil {
		e.do(err)
		v = tensor.Must(tensor.FromBF16(make([]tensor.BF16, n), n))
	}
	return v
}
