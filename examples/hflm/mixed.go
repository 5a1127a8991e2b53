package hflm

import (
	"fmt"

	"github.com/mtrl-go/mtrl/examples/internal/mixedbf16"
	"github.com/mtrl-go/mtrl/tensor"
)

// mixed is bf16 mixed precision: bfloat16 copies of the float32 master weights, which the
// passes compute with (the norms' and biases' in Vecs, the linear layers' and the LM head's in
// Mats). The masters, their gradients and the optimizer's state stay float32.
type mixed = mixedbf16.Copies

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
		mp := mixedbf16.NewCopies(m.conv(), func(name string) *tensor.Tensor { return m.byName[name].value })
		var e errs
		err := m.bind(func(name string) *tensor.Tensor {
			t, err := mp.Vec(name)
			if err != nil {
				e.do(err)
				t, _ = f32(m.byName[name].value.Shape()...)
			}
			return t
		}, func(name string) (*tensor.PackedWeight, error) {
			w, err := mp.Mat(name)
			if err != nil {
				return nil, fmt.Errorf("hflm: %w", err)
			}
			m.byName[name].packed = nil // the float32 layout is not read in bf16 mode
			return w, nil
		})
		if err == nil {
			err = e.err
		}
		if err != nil {
			return err
		}
		m.mp = mp
		return mp.Refresh()
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

// conv returns the model's float32 ↔ bfloat16 converter on its backend.
func (m *Model) conv() *mixedbf16.Converter {
	if m.cv == nil {
		m.cv = mixedbf16.NewConverter(m.b)
	}
	return m.cv
}

// round rounds an op's output to bfloat16 values in bf16 mode, in place.
func (m *Model) round(e *errs, t *tensor.Tensor) {
	if m.mp != nil {
		m.roundTo(e, t, t)
	}
}

// roundTo writes the float32 src rounded to bfloat16 values into the float32 dst (src itself
// may be dst): on a device through a bfloat16 scratch copy, both conversions on the device.
func (m *Model) roundTo(e *errs, dst, src *tensor.Tensor) { e.do(m.conv().RoundTo(dst, src)) }

// store returns what a training pass keeps of an activation: a new bfloat16 copy in bf16 mode
// (its values are bfloat16 already: exact), else t.
func (m *Model) store(e *errs, t *tensor.Tensor) *tensor.Tensor {
	if m.mp == nil {
		return t
	}
	out, err := m.conv().Store(t)
	e.do(err)
	return out
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
	out, err := m.conv().Widen(t)
	if err != nil {
		e.do(err)
		if !out.IsHost() || out.DType() != tensor.Float32 {
			out, _ = f32(t.Shape()...)
		}
	}
	return out
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
	out, err := mixedbf16.NewConverter(tensor.CPU()).Widen(t)
	if err != nil {
		return t
	}
	return out
}

// convert writes src into dst, of the other dtype (float32 and bfloat16) and as many elements,
// on the model's backend (mixedbf16.Converter.Convert).
func (m *Model) convert(dst, src *tensor.Tensor) error { return m.conv().Convert(dst, src) }

// scratchBF16 returns bfloat16 slot i of the model's reused device buffers with n elements
// (contents undefined).
func (m *Model) scratchBF16(e *errs, i, n int) *tensor.Tensor {
	v, err := m.conv().Scratch(i, n)
	if err != nil {
		e.do(err)
		v = tensor.Must(tensor.FromBF16(make([]tensor.BF16, n), n))
	}
	return v
}
