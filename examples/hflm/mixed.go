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
// bfloat16 weights with VDPBF16PS (internal/gemm). Generate decodes with the bfloat16 weights
// and bfloat16 inputs to the linear layers (its other activations are not rounded). LoRA
// adapters are trained as float32 masters read directly (they are small).
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
		if !m.onHost() {
			// The rounding of every activation and the bfloat16 copies run on the host's slices.
			return tensor.Errorf(tensor.ErrBackend, "hflm.Model.SetMixedPrecision", "dt", "bf16 mixed precision runs on the CPU backend only, not on %s (compute in float32 there)", m.b.Name())
		}
		if err := m.thaw(); err != nil { // the float32 masters
			return err
		}
		mp := &mixed{vecs: map[string]*tensor.Tensor{}, mats: map[string]*tensor.PackedWeight{}}
		err := m.bind(func(name string) *tensor.Tensor {
			t, _ := f32(m.byName[name].value.Shape()...)
			mp.vecs[name] = t
			return t
		}, func(name string) (*tensor.PackedWeight, error) {
			p := m.byName[name]
			bf := tensor.Must(tensor.FromBF16(make([]tensor.BF16, p.value.Len()), p.value.Shape()...))
			w, err := tensor.PackWeight(bf)
			if err != nil {
				return nil, fmt.Errorf("hflm: packing %s: %w", name, err)
			}
			mp.mats[name] = w
			p.packed = nil // the float32 layout is not read in bf16 mode
			return w, nil
		})
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

// refresh rounds the masters into the bfloat16 copies and repacks them.
func (mp *mixed) refresh(m *Model) error {
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

// round rounds an op's output to bfloat16 values in bf16 mode (host tensors only: bf16 mode
// runs on the CPU backend).
func (m *Model) round(t *tensor.Tensor) {
	if m.mp != nil {
		roundBF16(host(t))
	}
}

// store returns what a training pass keeps of an activation: a bfloat16 copy in bf16 mode (its
// values are bfloat16 already: exact), else t.
func (m *Model) store(t *tensor.Tensor) *tensor.Tensor {
	if m.mp == nil || t == nil || t.DType() == tensor.BFloat16 {
		return t
	}
	v := host(t)
	b := make([]tensor.BF16, len(v))
	tensor.RoundToBF16(b, v)
	return tensor.Must(tensor.FromBF16(b, t.Shape()...))
}

// storeLayer stores a layer's activations (the attention's log-sum-exp stays float32).
func (m *Model) storeLayer(s layerActs) layerActs {
	for _, p := range []**tensor.Tensor{&s.xIn, &s.h1, &s.q, &s.k, &s.v, &s.attn, &s.xMid, &s.h2, &s.gate, &s.up, &s.act} {
		*p = m.store(*p)
	}
	return s
}
