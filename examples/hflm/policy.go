package hflm

import (
	"fmt"
	"math/rand/v2"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// Policy is a Model as a tprl/loop policy over prompts of type P. It scores completions with
// the fused LM head (Score), so no [tokens, V] logits are built even at vocabulary 151936.
//
// Policy deliberately does not implement loop.Trainable: the loop's default AdamW would change
// the weights without repacking them. Give loop.Parts the optimizer and gradients of Training.
// A Policy over a second, frozen Model is the reference scorer.
type Policy[P any] struct {
	Model *Model
	// Prompt returns a prompt's token ids as the model reads them (chat template applied).
	Prompt func(P) []int32
	// Decode returns the text of a completion's tokens, which the rewards read (nil: no text).
	Decode func([]int32) string
	// Stop are the ids that end a completion (generation_config's eos_token_id).
	Stop []int32
	// Padded scores rows right-padded to a common length (the longest prompt of the
	// micro-batch plus the batch's T columns), as a trainer without padding-free batches does:
	// the same log-probs and gradients at the cost of the padding's compute (padding.go).
	// False: the rows are packed end to end (padding_free).
	Padded bool
}

// Backend is the model's backend (LoadOn): the per-token tensors of the loop's step live there.
func (p *Policy[P]) Backend() tensor.Backend { return p.Model.Backend() }

func (p *Policy[P]) prompts(ps []P) [][]int32 {
	out := make([][]int32, len(ps))
	for i, q := range ps {
		out[i] = p.Prompt(q)
	}
	return out
}

// Generate implements loop.Policy with Model.Generate.
func (p *Policy[P]) Generate(prompts []P, s loop.Sampling, rngs []*rand.Rand) ([]loop.Completion, error) {
	gen, err := p.Model.Generate(p.prompts(prompts), Sampling{
		MaxNewTokens: s.MaxTokens, Temperature: s.Temperature, TopP: s.TopP, TopK: s.TopK, Stop: p.Stop,
	}, rngs)
	if err != nil {
		return nil, err
	}
	out := make([]loop.Completion, len(gen))
	for i, g := range gen {
		out[i].Tokens = g
		if p.Decode != nil {
			out[i].Text = p.Decode(g)
		}
	}
	return out, nil
}

// score runs Model.Score on rows [lo, hi) of b and writes the log-probs (and entropies) into
// the [hi-lo, b.T] outputs, zero past each completion.
func (p *Policy[P]) score(b *loop.Batch[P], lo, hi int, in loop.Input, train bool, logp, ent *tensor.Tensor) (*Scores, error) {
	if in.Perturb != nil {
		return nil, fmt.Errorf("hflm: a language model has no image to perturb (turn the perturbed pass off)")
	}
	if b == nil || lo < 0 || hi <= lo || hi > b.Len() || len(b.Completions) != b.Len() {
		return nil, fmt.Errorf("hflm: rows [%d, %d) are not a range of the batch", lo, hi)
	}
	if err := tensor.CheckShape("hflm.Policy", "logp", logp, hi-lo, b.T); err != nil {
		return nil, err
	}
	if ent != nil {
		if err := tensor.CheckShape("hflm.Policy", "ent", ent, hi-lo, b.T); err != nil {
			return nil, err
		}
	}
	comps := make([][]int32, hi-lo)
	for i := range comps {
		c := b.Completions[lo+i].Tokens
		comps[i] = c[:min(len(c), b.T)]
	}
	prompts := p.prompts(b.Prompts[lo:hi])
	padT := 0
	if p.Padded {
		padT = b.T
	}
	s, err := p.Model.score(prompts, comps, b.Temperature, train, padT)
	if err != nil {
		return nil, err
	}
	return s, WriteScores(logp, ent, s.LogProbs, s.Entropy, b.T)
}

// WriteScores writes ragged per-token log-probs and entropies into the [rows, t] tensors of
// loop.Scorer (ent may be nil), zero past each row's length; tensors on a device get one
// upload each.
func WriteScores(logp, ent *tensor.Tensor, logProbs, entropy [][]float32, t int) error {
	for _, o := range []struct {
		t    *tensor.Tensor
		rows [][]float32
	}{{logp, logProbs}, {ent, entropy}} {
		if o.t == nil {
			continue
		}
		dst := o.t
		if !dst.IsHost() {
			h, err := tensor.New(tensor.CPU(), tensor.Float32, dst.Shape()...)
			if err != nil {
				return err
			}
			dst = h
		}
		v, err := dst.Float32s()
		if err != nil {
			return err
		}
		clear(v)
		for i, r := range o.rows {
			copy(v[i*t:], r)
		}
		if dst != o.t {
			if err := tensor.CopyInto(o.t, dst); err != nil {
				return err
			}
		}
	}
	return nil
}

// LogProbs implements loop.Scorer.
func (p *Policy[P]) LogProbs(b *loop.Batch[P], lo, hi int, in loop.Input, logp, ent *tensor.Tensor) error {
	_, err := p.score(b, lo, hi, in, false, logp, ent)
	return err
}

// Forward implements loop.Policy: a scoring pass that keeps the activations.
func (p *Policy[P]) Forward(b *loop.Batch[P], lo, hi int, logp, ent *tensor.Tensor) (loop.Pass, error) {
	s, err := p.score(b, lo, hi, loop.Input{}, true, logp, ent)
	if err != nil {
		return nil, err
	}
	return NewPass(s.LogProbs, b.T, s.Backward), nil
}

// NewPass returns the loop.Pass of a training scoring pass whose row i scored len(rows[i])
// tokens: its Backward cuts each row of the [rows, t] gradients at that length and calls
// backward with them.
func NewPass(rows [][]float32, t int, backward func(dLogProbs, dEntropy [][]float32) error) loop.Pass {
	lens := make([]int, len(rows))
	for i, r := range rows {
		lens[i] = len(r)
	}
	return &pass{lens: lens, t: t, backward: backward}
}

type pass struct {
	lens     []int
	t        int
	backward func(dLogProbs, dEntropy [][]float32) error
}

// Backward reads each completion's columns of the [rows, T] gradients.
func (p *pass) Backward(dLogProbs, dEntropy *tensor.Tensor) error {
	if p.backward == nil {
		return fmt.Errorf("hflm: backward of a released pass")
	}
	ragged := func(d *tensor.Tensor) ([][]float32, error) {
		if d == nil {
			return nil, nil
		}
		v, err := tensor.HostFloat32s(d) // [rows, T]: small, and the backward's per-row cut is the host's
		if err != nil {
			return nil, err
		}
		if len(v) != len(p.lens)*p.t {
			return nil, fmt.Errorf("hflm: gradient of %d values, want %d rows × %d", len(v), len(p.lens), p.t)
		}
		out := make([][]float32, len(p.lens))
		for i, n := range p.lens {
			out[i] = v[i*p.t : i*p.t+n]
		}
		return out, nil
	}
	dlp, err := ragged(dLogProbs)
	if err != nil {
		return err
	}
	dent, err := ragged(dEntropy)
	if err != nil {
		return err
	}
	return p.backward(dlp, dent)
}

func (p *pass) Release() { p.backward = nil }

// Params are the model's parameters and gradients on its backend, named as Hugging Face names
// them, for the optimizer (weight decay on matrices, not on norms and biases); with LoRA the
// adapters' alone, named as PEFT names them.
func (m *Model) Params() ([]loop.Param, error) {
	if err := m.ensureGrads(); err != nil {
		return nil, err
	}
	if m.lora != nil {
		var out []loop.Param
		for _, ad := range m.adapters {
			out = append(out, loop.Param{Name: ad.peft + ".lora_A.weight", Value: ad.a, Grad: ad.ga, Decay: true},
				loop.Param{Name: ad.peft + ".lora_B.weight", Value: ad.b, Grad: ad.gb, Decay: true})
		}
		return out, nil
	}
	out := make([]loop.Param, len(m.params))
	for i, p := range m.params {
		out[i] = loop.Param{Name: p.name, Value: p.value, Grad: p.grad, Decay: p.value.Rank() >= 2}
	}
	return out, nil
}

// AdamW is loop.HostAdamW over a model's parameters that repacks the weights after each step.
type AdamW struct {
	*loop.HostAdamW
	repack func() error
}

// Step implements loop.Optimizer.
func (o *AdamW) Step(lr, maxNorm float64) (float64, error) {
	norm, err := o.HostAdamW.Step(lr, maxNorm)
	if err != nil {
		return norm, err
	}
	return norm, o.repack()
}

// Training returns what loop.Parts needs to train the model on the host: AdamW (torch's
// defaults with weightDecay) and the host gradients. A model on another backend trains with
// DeviceTraining.
func (m *Model) Training(weightDecay float64) (*AdamW, *loop.HostGradients, error) {
	if !m.onHost() {
		return nil, nil, tensor.Errorf(tensor.ErrBackend, "hflm.Model.Training", "m", "is on %s: its parameters are not host tensors (use DeviceTraining)", m.b.Name())
	}
	ps, err := m.Params()
	if err != nil {
		return nil, nil, err
	}
	return NewAdamW(ps, weightDecay, m.Repack)
}

// NewAdamW returns AdamW (torch's defaults with weightDecay) over ps that calls repack after
// each step, and the host gradients of ps: Training for a model built on this one (Qwen2-VL's
// tower and language model).
func NewAdamW(ps []loop.Param, weightDecay float64, repack func() error) (*AdamW, *loop.HostGradients, error) {
	opt, err := loop.NewHostAdamW(ps, 0.9, 0.999, 1e-8, weightDecay)
	if err != nil {
		return nil, nil, err
	}
	g, err := loop.NewHostGradients(ps)
	if err != nil {
		return nil, nil, err
	}
	return &AdamW{HostAdamW: opt, repack: repack}, g, nil
}

// DeviceTraining returns what loop.Parts needs to train a model on a device: loop.DeviceAdamW
// (torch's defaults with weightDecay, repacking the weights after each step) and
// loop.DeviceGradients. On the CPU backend use Training.
func (m *Model) DeviceTraining(weightDecay float64) (*loop.DeviceAdamW, *loop.DeviceGradients, error) {
	ps, err := m.Params()
	if err != nil {
		return nil, nil, err
	}
	return NewDeviceAdamW(ps, weightDecay, m.Repack)
}

// NewDeviceAdamW is DeviceTraining over ps (all on one backend) that calls repack after each
// step: for a model built on this one (Qwen2-VL's tower and language model), or for an
// Offload's host masters.
func NewDeviceAdamW(ps []loop.Param, weightDecay float64, repack func() error) (*loop.DeviceAdamW, *loop.DeviceGradients, error) {
	opt, err := loop.NewDeviceAdamW(ps, 0.9, 0.999, 1e-8, weightDecay)
	if err != nil {
		return nil, nil, err
	}
	opt.Stepped = repack
	return opt, &loop.DeviceGradients{Params: ps}, nil
}
