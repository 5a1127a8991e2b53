package qwenvl

import (
	"fmt"
	"math/rand/v2"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/internal/probe"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// Prompt is one multimodal prompt as the model reads it: token ids with the chat template
// applied and one <|image_pad|> per image (the tokenizer's output), and the images in order.
type Prompt struct {
	IDs    []int32
	Images []*RGB
}

// Policy is a Model as a tprl/loop policy over prompts of type P. The perturbed scoring pass
// (loop.Input.Perturb) perturbs each row's images, 8-bit as loaded, with (Seed, the row's id),
// preprocesses them again and scores the completions already sampled: the text is the row's own.
//
// As hflm.Policy, it does not implement loop.Trainable; give loop.Parts the optimizer and
// gradients of Model.Training (Model.DeviceTraining for a model on a device). A Policy over a
// second, frozen Model is the reference scorer.
type Policy[P any] struct {
	Model     *Model
	Processor *Processor
	// Prompt returns a prompt's token ids and images.
	Prompt func(P) Prompt
	// Decode returns the text of a completion's tokens, which the rewards read (nil: no text).
	Decode func([]int32) string
	// Stop are the ids that end a completion (generation_config's eos_token_id).
	Stop []int32
}

// Backend is the model's backend (LoadOn): the per-token tensors of the loop's step live there.
func (p *Policy[P]) Backend() tensor.Backend { return p.Model.Backend() }

// sample preprocesses a prompt (its images perturbed by in for row id) into a Sample whose IDs
// are the expanded prompt followed by completion; it also returns the images it processed.
func (p *Policy[P]) sample(q P, completion []int32, in loop.Input, id uint64) (Sample, []*RGB, error) {
	pr := p.Prompt(q)
	images := pr.Images
	if in.Perturb != nil {
		images = make([]*RGB, len(pr.Images))
		for i, img := range pr.Images {
			src, err := tensor.FromUint8(img.Pix, img.Height, img.Width, 3)
			if err != nil {
				return Sample{}, nil, err
			}
			dst, err := tensor.New(tensor.CPU(), tensor.Uint8, img.Height, img.Width, 3)
			if err != nil {
				return Sample{}, nil, err
			}
			if err := in.Perturb.Apply(dst, src, in.Seed, id); err != nil {
				return Sample{}, nil, fmt.Errorf("qwenvl: perturb: %w", err)
			}
			pix, _ := dst.Uint8s()
			images[i] = &RGB{Width: img.Width, Height: img.Height, Pix: pix}
		}
	}
	var s Sample
	if len(images) > 0 {
		var err error
		if s.Images, err = p.Processor.Images(images); err != nil {
			return Sample{}, nil, err
		}
	}
	ids := make([]int64, len(pr.IDs))
	for i, id := range pr.IDs {
		ids[i] = int64(id)
	}
	rows, err := ExpandTokens([][]int64{ids}, s.Images.Grids, nil, p.Model.Config.Tokens)
	if err != nil {
		return Sample{}, nil, err
	}
	s.IDs = make([]int32, 0, len(rows[0])+len(completion))
	for _, id := range rows[0] {
		s.IDs = append(s.IDs, int32(id))
	}
	s.IDs = append(s.IDs, completion...)
	return s, images, nil
}

// Generate implements loop.Policy with Model.Generate.
func (p *Policy[P]) Generate(prompts []P, s loop.Sampling, rngs []*rand.Rand) ([]loop.Completion, error) {
	samples := make([]Sample, len(prompts))
	for i, q := range prompts {
		var err error
		if samples[i], _, err = p.sample(q, nil, loop.Input{}, 0); err != nil {
			return nil, err
		}
	}
	gen, err := p.Model.Generate(samples, hflm.Sampling{
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
	if b == nil || lo < 0 || hi <= lo || hi > b.Len() || len(b.Completions) != b.Len() || (in.Perturb != nil && len(b.IDs) != b.Len()) {
		return nil, fmt.Errorf("qwenvl: rows [%d, %d) are not a range of the batch", lo, hi)
	}
	for _, o := range []struct {
		name string
		t    *tensor.Tensor
	}{{"logp", logp}, {"ent", ent}} {
		if o.t != nil || o.name == "logp" {
			if err := tensor.CheckShape("qwenvl.Policy", o.name, o.t, hi-lo, b.T); err != nil {
				return nil, err
			}
		}
	}
	samples := make([]Sample, hi-lo)
	lens := make([]int, hi-lo)
	pixels := make([][][]byte, hi-lo)
	for i := range samples {
		c := b.Completions[lo+i].Tokens
		c = c[:min(len(c), b.T)]
		var id uint64
		if in.Perturb != nil {
			id = b.IDs[lo+i]
		}
		var (
			images []*RGB
			err    error
		)
		if samples[i], images, err = p.sample(b.Prompts[lo+i], c, in, id); err != nil {
			return nil, err
		}
		lens[i] = len(c)
		if probe.Score != nil {
			for _, img := range images {
				pixels[i] = append(pixels[i], img.Pix)
			}
		}
	}
	s, err := p.Model.Score(samples, lens, b.Temperature, train)
	if err != nil {
		return nil, err
	}
	if probe.Score != nil {
		pass := probe.Pass{Perturbed: in.Perturb != nil, Train: train, Seed: in.Seed, Pixels: pixels, Samples: samples,
			Completions: lens, Temperature: b.Temperature, LogProbs: s.LogProbs}
		if in.Perturb != nil {
			pass.IDs = b.IDs[lo:hi]
		}
		probe.Score(pass)
	}
	return s, hflm.WriteScores(logp, ent, s.LogProbs, s.Entropy, b.T)
}

// LogProbs implements loop.Scorer.
func (p *Policy[P]) LogProbs(b *loop.Batch[P], lo, hi int, in loop.Input, logp, ent *tensor.Tensor) error {
	_, err := p.score(b, lo, hi, in, false, logp, ent)
	return err
}

// Forward implements loop.Policy: a scoring pass of the rows' own images that keeps the
// activations.
func (p *Policy[P]) Forward(b *loop.Batch[P], lo, hi int, logp, ent *tensor.Tensor) (loop.Pass, error) {
	s, err := p.score(b, lo, hi, loop.Input{}, true, logp, ent)
	if err != nil {
		return nil, err
	}
	return hflm.NewPass(s.LogProbs, b.T, s.Backward), nil
}

// ReportFinal implements loop.FinalGradients: the language model reports its layers'
// gradients as its backward finishes them (hflm.Model.ReportFinal); the tower's backward runs
// after it, and the tower's gradients are reduced after the whole backward.
func (p *Policy[P]) ReportFinal(hook func(grads ...*tensor.Tensor)) bool {
	return p.Model.LM.ReportFinal(hook)
}

// Params are the language model's parameters (hflm.Model.Params: with LoRA its adapters
// alone) followed, when the tower trains, by the tower's: its adapters under LoRA (PEFT's
// names, base_model.model.visual.….lora_A.weight, as [r, in] and [out, r] matrices), else its
// weights, named as Hugging Face names them.
func (m *Model) Params() ([]loop.Param, error) {
	ps, err := m.LM.Params()
	if err != nil {
		return nil, err
	}
	t := m.Vision
	if !t.trains() {
		return ps, nil
	}
	if t.lora != nil {
		for _, ad := range t.lora.adapters {
			base := "base_model.model." + ad.module
			ps = append(ps, loop.Param{Name: base + ".lora_A.weight", Value: ad.a, Grad: ad.ga, Decay: true},
				loop.Param{Name: base + ".lora_B.weight", Value: ad.b, Grad: ad.gb, Decay: true})
		}
		return ps, nil
	}
	if err := t.ensureGrads(); err != nil {
		return nil, err
	}
	for _, p := range t.params {
		ps = append(ps, loop.Param{Name: p.name, Value: p.value, Grad: p.grad, Decay: p.value.Rank() >= 2})
	}
	return ps, nil
}

// Training returns what loop.Parts needs to train the model on the host (the tower too
// unless it is frozen): hflm's AdamW (torch's defaults with weightDecay), repacking the
// language model and the tower after each step, and the host gradients. Set Vision.Frozen
// (and add adapters) before calling it. A model on another backend trains with
// DeviceTraining.
func (m *Model) Training(weightDecay float64) (*hflm.AdamW, *loop.HostGradients, error) {
	if m.Backend() != tensor.CPU() {
		return nil, nil, tensor.Errorf(tensor.ErrBackend, "qwenvl.Model.Training", "m", "is on %s: its parameters are not host tensors (use DeviceTraining)", m.Backend().Name())
	}
	ps, err := m.Params()
	if err != nil {
		return nil, nil, err
	}
	return hflm.NewAdamW(ps, weightDecay, m.repack)
}

// DeviceTraining is Training for a model on a device (LoadOn): loop.DeviceAdamW over the same
// parameters (gradient norm, clipping and AdamW where they live) and loop.DeviceGradients.
func (m *Model) DeviceTraining(weightDecay float64) (*loop.DeviceAdamW, *loop.DeviceGradients, error) {
	ps, err := m.Params()
	if err != nil {
		return nil, nil, err
	}
	return hflm.NewDeviceAdamW(ps, weightDecay, m.repack)
}

// repack rebuilds the language model's and the tower's packed weights after a step.
func (m *Model) repack() error {
	if err := m.LM.Repack(); err != nil {
		return err
	}
	return m.Vision.Repack()
}

// Backend is where the model computes (LoadOn).
func (m *Model) Backend() tensor.Backend { return m.LM.Backend() }

// RowTokens implements loop.TokenCounter: the row's prompt tokens with each image's
// placeholder expanded by the grid its resize gives (no pixels are processed), and its
// completion (at most b.T tokens), which loop.Config.MicroBatchTokens budgets.
func (p *Policy[P]) RowTokens(b *loop.Batch[P], row int) int {
	pr := p.Prompt(b.Prompts[row])
	n := len(pr.IDs) - len(pr.Images)
	c := p.Processor.Config()
	for _, img := range pr.Images {
		h, w := img.Height, img.Width
		if c.DoResize {
			var err error
			if h, w, err = SmartResize(h, w, c.Factor(), c.MinPixels, c.MaxPixels); err != nil {
				return n + 1 // the pass will report the error
			}
		}
		n += Grid{T: 1, H: h / c.PatchSize, W: w / c.PatchSize}.Tokens(c.MergeSize)
	}
	return n + min(len(b.Completions[row].Tokens), b.T)
}
