package hflm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/examples/internal/mixedbf16"
	"github.com/mtrl-go/mtrl/tensor"
)

// Model is a Qwen2 or Llama causal language model in float32 on a tensor.Backend (the host's
// unless LoadOn chose another), its weights packed once for tensor.Linear.
type Model struct {
	Config *hfmodel.Config

	// b is where the weights, activations, caches and gradients live (LoadOn).
	b tensor.Backend

	// params are the weights in Hugging Face's state_dict order, named as it names them; grads
	// (nil until the first training pass or Params) are their gradients.
	params []param
	byName map[string]*param

	embed  *tensor.Tensor       // [V, D]
	head   *tensor.PackedWeight // lm_head.weight, or the embeddings when tied
	norm   *tensor.Tensor       // model.norm.weight
	layers []layer

	rope tensor.RoPEConfig
	attn tensor.AttentionConfig

	// LoRA (AddLoRA): the adapters, in layer and projection order; with them the base is
	// frozen. loraOff disables them (Base).
	lora      *LoRAConfig
	adapters  []*adapter
	loraOff   bool
	dropRNG   *rand.Rand
	dropSrc   *rand.PCG // dropRNG's state, which activation checkpointing replays and a checkpoint keeps (DropoutState)
	frozenEnv *frozenGrads
	scratch   [3]*tensor.Tensor         // scratchF32's buffers (flat, grown on demand)
	cv        *mixedbf16.Converter      // float32 ↔ bfloat16 on the backend (conv); nil until used
	bufs      map[string]*tensor.Tensor // reused's buffers (flat, grown on demand)

	mp       *mixed // bf16 mixed precision (mixed.go); nil: float32
	gradBF16 bool   // SetBF16Backward: in bf16 mode, the backward's products on bfloat16 gradients
	ckpt     bool   // activation checkpointing per decoder layer (checkpoint.go)

	final func(...*tensor.Tensor) // the loop's hook for gradients the backward is done with (overlap.go)
}

// frozenGrads are scratch outputs for the gradients of frozen weights that an op must write
// (tensor.RMSNormBackward's dw) but nobody reads.
type frozenGrads struct {
	norm *tensor.Tensor
}

type param struct {
	name        string
	value, grad *tensor.Tensor
	packed      *tensor.PackedWeight // matrices of linear layers (and an untied lm_head)
}

// linear is one projection: its packed weight and optional bias, with their parameter names.
type linear struct {
	w    *tensor.PackedWeight
	b    *tensor.Tensor // nil: no bias
	name string         // e.g. model.layers.0.self_attn.q_proj
	lora *adapter       // nil: none
}

type layer struct {
	inNorm, postNorm *tensor.Tensor
	q, k, v, o       linear
	gate, up, down   linear
	prefix           string // model.layers.i.
}

// Load converts a checkpoint's weights to float32 (bfloat16 and float16 widen exactly) and
// packs its linear layers, holding each matrix once, as its packed panels: inference and LoRA
// never need more; full training unpacks them (exactly) on first use. The model keeps no
// reference to ck, which may be closed. It computes on the host; LoadOn chooses the backend.
func Load(ck *hfmodel.Checkpoint) (*Model, error) {
	return LoadOn(ck, tensor.CPU())
}

// LoadOn is Load onto backend b (a *cuda.Backend, say): every weight is uploaded once and
// packed with b's packed-weight type, and the activations, key/value caches, gradients and
// optimizer state of the model's passes live there too. What comes back to the host is what
// the host reads: the scored log-probs, one row of logits per sampled token, the weights
// that SaveLoRA, Checkpoint and the trainer's checkpoints write. bf16 mixed precision
// (SetMixedPrecision) runs on either.
func LoadOn(ck *hfmodel.Checkpoint, b tensor.Backend) (*Model, error) {
	const op = "hflm.Load"
	if ck == nil || ck.Config == nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, "ck", "is nil or has no config")
	}
	if b == nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, "b", "is nil")
	}
	c := ck.Config
	if c.HiddenAct != "silu" {
		return nil, tensor.Errorf(tensor.ErrParam, op, "hidden_act", "%q is not supported (silu)", c.HiddenAct)
	}
	freq, err := RoPEFrequencies(c)
	if err != nil {
		return nil, err
	}
	m := &Model{
		Config: c,
		b:      b,
		byName: map[string]*param{},
		rope:   tensor.RoPEConfig{Theta: c.RopeTheta, Frequencies: freq},
		attn:   tensor.DefaultAttentionConfig(c.HeadDim, true),
	}
	// HF scales the scores by head_dim**-0.5 in float64, rounded to float32 when it multiplies.
	m.attn.Scale = float32(math.Pow(float64(c.HeadDim), -0.5))
	specs := hfmodel.ExpectedTensors(c)
	m.params = make([]param, len(specs))
	for i, s := range specs {
		t := ck.Tensor(s.Name)
		if t == nil {
			return nil, tensor.Errorf(tensor.ErrParam, op, s.Name, "is missing from the checkpoint")
		}
		v, err := m.upload(tensor.FromFloat32(t.Float32s(), s.Shape...))
		if err != nil {
			return nil, err
		}
		m.params[i] = param{name: s.Name, value: v}
		m.byName[s.Name] = &m.params[i]
		// Each matrix is packed as it is read and held only packed (its values dropped) until
		// the model trains in full (thaw): the checkpoint's float32 copies never add up.
		if strings.HasSuffix(s.Name, "_proj.weight") || s.Name == m.headName() {
			if _, err := m.packWeight(s.Name); err != nil {
				return nil, err
			}
			if err := m.params[i].freeze(); err != nil {
				return nil, err
			}
		}
	}
	m.embed = m.byName["model.embed_tokens.weight"].value
	m.norm = m.byName["model.norm.weight"].value
	if m.head, err = m.packWeight(m.headName()); err != nil {
		return nil, err
	}
	m.layers = make([]layer, c.NumHiddenLayers)
	for l := range m.layers {
		ly := &m.layers[l]
		ly.prefix = fmt.Sprintf("model.layers.%d.", l)
		ly.inNorm = m.byName[ly.prefix+"input_layernorm.weight"].value
		ly.postNorm = m.byName[ly.prefix+"post_attention_layernorm.weight"].value
		for _, p := range []struct {
			dst  *linear
			name string
		}{
			{&ly.q, "self_attn.q_proj"}, {&ly.k, "self_attn.k_proj"}, {&ly.v, "self_attn.v_proj"},
			{&ly.o, "self_attn.o_proj"}, {&ly.gate, "mlp.gate_proj"}, {&ly.up, "mlp.up_proj"},
			{&ly.down, "mlp.down_proj"},
		} {
			name := ly.prefix + p.name
			w, err := m.packWeight(name + ".weight")
			if err != nil {
				return nil, err
			}
			*p.dst = linear{w: w, name: name}
			if b := m.byName[name+".bias"]; b != nil {
				p.dst.b = b.value
			}
		}
	}
	return m, nil
}

// LoadDir opens a checkpoint directory, loads it and closes it.
func LoadDir(dir string) (*Model, error) {
	return LoadDirOn(dir, tensor.CPU())
}

// LoadDirOn is LoadDir onto backend b (LoadOn).
func LoadDirOn(dir string, b tensor.Backend) (*Model, error) {
	ck, err := hfmodel.Open(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	return LoadOn(ck, b)
}

// Backend is where the model computes (LoadOn).
func (m *Model) Backend() tensor.Backend { return m.b }

// onHost reports whether the model computes on the CPU backend.
func (m *Model) onHost() bool { return m.b == tensor.CPU() }

func (m *Model) packWeight(name string) (*tensor.PackedWeight, error) {
	p := m.byName[name]
	if p.packed == nil {
		w, err := tensor.PackWeight(p.value)
		if err != nil {
			return nil, fmt.Errorf("hflm: packing %s: %w", name, err)
		}
		p.packed = w
	}
	return p.packed, nil
}

// Repack rebuilds the packed layouts of the trained weights after they changed (an optimizer
// step): with LoRA the adapters' alone (the frozen base never changes), else every matrix.
func (m *Model) Repack() error {
	for _, ad := range m.adapters {
		if err := ad.pa.Repack(); err != nil {
			return err
		}
		if err := ad.pb.Repack(); err != nil {
			return err
		}
	}
	if m.lora != nil {
		return nil
	}
	if m.mp != nil {
		return m.mp.Refresh()
	}
	for i := range m.params {
		// a matrix held only packed has not changed (nothing could write into it)
		if p := m.params[i].packed; p != nil && m.params[i].value != nil {
			if err := p.Repack(); err != nil {
				return err
			}
		}
	}
	return nil
}

// NumParams is the number of weights (tied embeddings counted once).
func (m *Model) NumParams() int {
	n := 0
	for _, p := range m.params {
		k := 1
		for _, d := range p.shape() {
			k *= d
		}
		n += k
	}
	return n
}

// Weight returns the float32 weight named as Hugging Face names it, or nil (also for a matrix
// of a LoRA model's frozen base, which is held only packed: Checkpoint exports it), on the
// model's backend. Writing into it changes the model (call Repack after changing a matrix).
// Without LoRA it gives the matrices their float32 values back first (as training in full
// does).
func (m *Model) Weight(name string) *tensor.Tensor {
	p := m.byName[name]
	if p == nil {
		return nil
	}
	if p.value == nil && m.lora == nil {
		if err := m.thaw(); err != nil {
			return nil
		}
	}
	return p.value
}

// Grad returns the gradient of the weight named, or nil before the first training pass.
func (m *Model) Grad(name string) *tensor.Tensor {
	if p := m.byName[name]; p != nil {
		return p.grad
	}
	return nil
}

// ensureGrads allocates the zero gradients on first use (only the adapters' when the base is
// frozen: they are allocated with them).
func (m *Model) ensureGrads() error {
	if m.lora != nil {
		return nil
	}
	if err := m.thaw(); err != nil {
		return err
	}
	for i := range m.params {
		p := &m.params[i]
		if p.grad == nil {
			g, err := tensor.NewLike(p.value, tensor.Float32)
			if err != nil {
				return err
			}
			p.grad = g
		}
	}
	return nil
}

// ZeroGrads sets every gradient to zero.
func (m *Model) ZeroGrads() error {
	var e errs
	for _, ad := range m.adapters {
		e.do(zero(ad.ga))
		e.do(zero(ad.gb))
	}
	for _, p := range m.params {
		if p.grad != nil {
			e.do(zero(p.grad))
		}
	}
	return e.err
}

// Checkpoint returns the weights the model computes with as a checkpoint in Hugging Face's
// layout (float32, downloaded from the model's backend; Save converts), adapters merged into copies of their base weights (the
// model keeps them), with generation config gen (may be nil): the export of a trained model.
func (m *Model) Checkpoint(gen *hfmodel.GenerationConfig) (*hfmodel.Checkpoint, error) {
	merged := map[string]*adapter{}
	if !m.loraOff {
		for _, ad := range m.adapters {
			merged[ad.module+".weight"] = ad
		}
	}
	ts := make([]*hfmodel.Tensor, len(m.params))
	for i, p := range m.params {
		val, err := p.values()
		if err != nil {
			return nil, err
		}
		v, err := tensor.HostFloat32s(val)
		if err != nil {
			return nil, err
		}
		if ad := merged[p.name]; ad != nil {
			delta, err := m.delta(ad)
			if err != nil {
				return nil, err
			}
			for j, w := range v {
				delta[j] += w
			}
			v = delta
		}
		if ts[i], err = hfmodel.NewTensor(p.name, p.shape(), v, hfmodel.Float32); err != nil {
			return nil, err
		}
	}
	return hfmodel.NewCheckpoint(m.Config, gen, ts)
}
