package qwenvl

import (
	"math/rand/v2"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/tensor"
)

// Model is Qwen2VLForConditionalGeneration or Qwen2_5_VLForConditionalGeneration in float32
// on a tensor.Backend (the host unless LoadOn chose another): the vision tower, and the Qwen2
// language model of examples/hflm with M-RoPE, whose input embeddings at the image (video)
// placeholder tokens are the tower's features.
type Model struct {
	Config *Config
	Vision *Vision
	LM     *hflm.Model
	lora   *hflm.LoRAConfig // AddLoRA's configuration; nil: no adapters
}

// Load builds the model from a checkpoint's weights (copied; ck may be dropped) on the host.
func Load(ck *Checkpoint) (*Model, error) { return LoadOn(ck, tensor.CPU()) }

// LoadOn is Load onto backend b (a *cuda.Backend, say), as hflm.LoadOn: every weight is
// uploaded once and packed with b's packed-weight type, and the tower's and the language
// model's activations, gradients and adapters live there too; the host keeps the pixels'
// preprocessing, the positions and the samplers. bf16 mixed precision (SetMixedPrecision) runs
// there too.
func LoadOn(ck *Checkpoint, b tensor.Backend) (*Model, error) {
	switch {
	case ck == nil || ck.Config == nil:
		return nil, tensor.Errorf(tensor.ErrParam, "qwenvl.LoadOn", "ck", "is nil or has no config")
	case b == nil:
		return nil, tensor.Errorf(tensor.ErrParam, "qwenvl.LoadOn", "b", "is nil")
	}
	byName := map[string]*hfmodel.Tensor{}
	for _, s := range expectedTensors(ck.Config) {
		t, err := hfmodel.NewTensor(s.name, s.shape, ck.Weights[s.name], hfmodel.Float32)
		if err != nil {
			return nil, err
		}
		byName[s.name] = t
	}
	return load(ck.Config, byName, b)
}

// LoadDir opens a checkpoint directory (either weight-name layout) and loads it, widening
// each weight from the mapped file straight into the model's float32 (a bfloat16 checkpoint
// is not first copied whole).
func LoadDir(dir string) (*Model, error) { return LoadDirOn(dir, tensor.CPU()) }

// LoadDirOn is LoadDir onto backend b (LoadOn).
func LoadDirOn(dir string, b tensor.Backend) (*Model, error) {
	if b == nil {
		return nil, tensor.Errorf(tensor.ErrParam, "qwenvl.LoadDirOn", "b", "is nil")
	}
	var m *Model
	err := mapCheckpoint(dir, func(cfg *Config, byName map[string]*hfmodel.Tensor) error {
		var err error
		m, err = load(cfg, byName, b)
		return err
	})
	return m, err
}

// load builds the model on backend b from weights by legacy name: the language model through
// hflm.LoadOn of the text weights, the tower from the visual.* ones.
func load(c *Config, byName map[string]*hfmodel.Tensor, b tensor.Backend) (*Model, error) {
	var text []*hfmodel.Tensor
	for _, s := range hfmodel.ExpectedTensors(c.Text) {
		text = append(text, byName[s.Name])
	}
	tck, err := hfmodel.NewCheckpoint(c.Text, nil, text)
	if err != nil {
		return nil, err
	}
	lm, err := hflm.LoadOn(tck, b)
	if err != nil {
		return nil, err
	}
	if err := lm.SetRoPESections(c.MRoPESection); err != nil {
		return nil, err
	}
	vis := map[string][]float32{}
	for _, s := range visionSpecs(c.Variant, c.Vision) {
		vis[s.name] = byName[s.name].Float32s()
	}
	v, err := newVision(c.Variant, c.Vision, vis, b)
	if err != nil {
		return nil, err
	}
	return &Model{Config: c, Vision: v, LM: lm}, nil
}

// Sample is one sequence of a batch: its token ids with every <|image_pad|> and <|video_pad|>
// already expanded by its grid (ExpandTokens), and the pixel_values of its images and of its
// videos in order (Processor.Images, Processor.Video; either may be empty).
type Sample struct {
	IDs    []int32
	Images Patches
	Videos Patches
	// SecondPerGrid is Qwen2.5-VL's seconds per temporal patch of each video (nil: 1 each).
	SecondPerGrid []float64
}

// encoded is one sample's vision features and the placeholder rows they fill.
type encoded struct {
	feats []*tensor.Tensor // image features, video features (nil when none)
	acts  []*VisionActs    // their activations (training)
	rows  [][]int          // the sample's token rows each one fills
}

// encode runs the tower over a sample's images and videos and finds their placeholder tokens
// among the first promptLen.
func (m *Model) encode(s *Sample, promptLen int, keep bool) (*encoded, error) {
	const op = "qwenvl.Model"
	enc := &encoded{}
	tok := m.Config.Tokens
	for _, in := range []struct {
		p  *Patches
		id int64
	}{{&s.Images, tok.ImageID}, {&s.Videos, tok.VideoID}} {
		var rows []int
		for i, id := range s.IDs[:promptLen] {
			if int64(id) == in.id {
				rows = append(rows, i)
			}
		}
		if len(in.p.Grids) == 0 {
			if len(rows) > 0 {
				return nil, tensor.Errorf(tensor.ErrShape, op, "IDs", "%d placeholder tokens (id %d) but no pixels", len(rows), in.id)
			}
			continue
		}
		if in.p.Cols != m.Config.Vision.PatchDim() {
			return nil, tensor.Errorf(tensor.ErrShape, op, "pixels", "rows of %d values; the tower's patches have %d", in.p.Cols, m.Config.Vision.PatchDim())
		}
		f, a, err := m.Vision.Forward(in.p.Values, in.p.Grids, keep)
		if err != nil {
			return nil, err
		}
		if f.Dim(0) != len(rows) {
			return nil, tensor.Errorf(tensor.ErrShape, op, "IDs", "features and placeholder tokens do not match: %d tokens (id %d), %d features", len(rows), in.id, f.Dim(0))
		}
		enc.feats, enc.acts, enc.rows = append(enc.feats, f), append(enc.acts, a), append(enc.rows, rows)
	}
	return enc, nil
}

// batch is a packed batch's language-model input, its rope deltas and its encodings.
type batch struct {
	in     hflm.Input
	deltas []int32
	enc    []*encoded
	dfeats [][]*tensor.Tensor // per sample and feature set: the gradient Gather collected
}

// prepare encodes every sample and builds the language model's input: M-RoPE positions from
// RopeIndex, and hooks that scatter the features into (and gather their gradient out of) the
// embeddings. The last completionLens[i] tokens of sample i (nil: none) are a sampled
// completion: they are text whatever their ids, at the positions decoding gives them (the
// prompt's length plus its rope delta onwards), as Hugging Face computes them for a
// completion without vision tokens.
func (m *Model) prepare(samples []Sample, completionLens []int, keep bool) (*batch, error) {
	b := &batch{enc: make([]*encoded, len(samples)), dfeats: make([][]*tensor.Tensor, len(samples))}
	starts := make([]int, len(samples)+1)
	var pos [3][]int32
	for i := range samples {
		s := &samples[i]
		n := len(s.IDs)
		if completionLens != nil {
			if len(completionLens) != len(samples) || completionLens[i] < 0 || completionLens[i] >= n {
				return nil, tensor.Errorf(tensor.ErrShape, "qwenvl.Model", "completionLens", "%v do not leave every one of the %d samples a prompt", completionLens, len(samples))
			}
			n -= completionLens[i]
		}
		enc, err := m.encode(s, n, keep)
		if err != nil {
			return nil, err
		}
		b.enc[i] = enc
		ids := make([]int64, n)
		for j, id := range s.IDs[:n] {
			ids[j] = int64(id)
		}
		r, err := RopeIndex(RopeInputs{InputIDs: [][]int64{ids}, ImageGrids: s.Images.Grids, VideoGrids: s.Videos.Grids, SecondPerGrid: s.SecondPerGrid}, m.Config.Tokens)
		if err != nil {
			return nil, err
		}
		delta := int32(r.Deltas[0])
		for a := range 3 {
			for _, p := range r.Positions[a][0] {
				pos[a] = append(pos[a], int32(p))
			}
			for j := n; j < len(s.IDs); j++ {
				pos[a] = append(pos[a], int32(j)+delta)
			}
		}
		b.deltas = append(b.deltas, delta)
		b.in.Seqs = append(b.in.Seqs, s.IDs)
		starts[i+1] = starts[i] + len(s.IDs)
	}
	b.in.Positions = pos[:]
	b.in.Scatter, b.in.Gather = m.hooks(b, starts)
	return b, nil
}

// hooks returns the batch's embedding hooks on the model's backend. Scatter: the embeddings x
// [N, D] and the features, stacked, are gathered back into x with every placeholder row taking
// its feature's row (exact copies). Gather: each feature set's gradient is gathered from dx's
// placeholder rows, then those rows are gathered from a zero row (their tokens' embeddings
// were not used).
func (m *Model) hooks(b *batch, starts []int) (scatter, gather func(*tensor.Tensor) error) {
	scatter = func(x *tensor.Tensor) error {
		var e errs
		n, d := x.Dim(0), x.Dim(1)
		nf := 0
		for _, enc := range b.enc {
			for _, f := range enc.feats {
				nf += f.Dim(0)
			}
		}
		if nf == 0 {
			return nil
		}
		stack := m.Vision.alloc(&e, n+nf, d)
		e.do(tensor.CopyInto(rows(&e, stack, 0, n), x))
		src := make([]int32, n)
		for i := range src {
			src[i] = int32(i)
		}
		at := n
		for i, enc := range b.enc {
			for k, f := range enc.feats {
				e.do(tensor.CopyInto(rows(&e, stack, at, at+f.Dim(0)), f))
				for j, r := range enc.rows[k] {
					src[starts[i]+r] = int32(at + j)
				}
				at += f.Dim(0)
			}
		}
		e.do(tensor.Embedding(x, stack, m.Vision.ints(&e, src, n)))
		return e.err
	}
	gather = func(dx *tensor.Tensor) error {
		var e errs
		n, d := dx.Dim(0), dx.Dim(1)
		has := false
		for i, enc := range b.enc {
			b.dfeats[i] = nil
			has = has || len(enc.feats) > 0
		}
		if !has {
			return nil
		}
		src := make([]int32, n)
		for i := range src {
			src[i] = int32(i)
		}
		for i, enc := range b.enc {
			for k := range enc.feats {
				idx := make([]int32, len(enc.rows[k]))
				for j, r := range enc.rows[k] {
					idx[j] = int32(starts[i] + r)
					src[starts[i]+r] = int32(n)
				}
				g := m.Vision.alloc(&e, len(idx), d)
				e.do(tensor.Embedding(g, dx, m.Vision.ints(&e, idx, len(idx))))
				b.dfeats[i] = append(b.dfeats[i], g)
			}
		}
		padded := m.Vision.alloc(&e, n+1, d) // row n stays zero
		e.do(tensor.CopyInto(rows(&e, padded, 0, n), dx))
		e.do(tensor.Embedding(dx, padded, m.Vision.ints(&e, src, n)))
		return e.err
	}
	return scatter, gather
}

// Logits returns the next-token logits [len(IDs), V] of one sample (the full forward), on the
// model's backend.
func (m *Model) Logits(s Sample) (*tensor.Tensor, error) {
	b, err := m.prepare([]Sample{s}, nil, false)
	if err != nil {
		return nil, err
	}
	return m.LM.LogitsInput(b.in)
}

// Scores are per-token log-probabilities and entropies of completions (hflm.Scores) with what
// the backward through the vision tower needs.
type Scores struct {
	*hflm.Scores
	m *Model
	b *batch
}

// Score runs the model over each sample and scores its last completionLens[i] tokens, a
// sampled completion (text whatever its ids; see prepare). With train the activations are
// kept for Backward.
func (m *Model) Score(samples []Sample, completionLens []int, temperature float32, train bool) (*Scores, error) {
	b, err := m.prepare(samples, completionLens, train && m.Vision.trains())
	if err != nil {
		return nil, err
	}
	s, err := m.LM.ScoreInput(b.in, completionLens, temperature, train)
	if err != nil {
		return nil, err
	}
	return &Scores{Scores: s, m: m, b: b}, nil
}

// Backward adds the gradient of a loss given d loss / d LogProbs and d loss / d Entropy to the
// language model's gradients and, unless the tower is frozen, to the tower's.
func (s *Scores) Backward(dLogProbs, dEntropy [][]float32) error {
	if err := s.Scores.Backward(dLogProbs, dEntropy); err != nil {
		return err
	}
	if !s.m.Vision.trains() {
		return nil
	}
	for i, enc := range s.b.enc {
		for k, a := range enc.acts {
			if err := s.m.Vision.Backward(a, s.b.dfeats[i][k]); err != nil {
				return err
			}
		}
	}
	return nil
}

// Generate continues each sample (its IDs the prompt) by up to s.MaxNewTokens tokens with a
// key/value cache, decoding at M-RoPE positions shifted by each prompt's rope delta.
func (m *Model) Generate(samples []Sample, s hflm.Sampling, rngs []*rand.Rand) ([][]int32, error) {
	b, err := m.prepare(samples, nil, false)
	if err != nil {
		return nil, err
	}
	return m.LM.GenerateInput(b.in, b.deltas, s, rngs)
}

// Weight returns the float32 weight named as Hugging Face's legacy layout names it, or nil.
func (m *Model) Weight(name string) *tensor.Tensor {
	if p := m.Vision.byName[name]; p != nil {
		return p.value
	}
	return m.LM.Weight(name)
}

// Grad returns the gradient of the weight named, or nil before a backward reached it.
func (m *Model) Grad(name string) *tensor.Tensor {
	if p := m.Vision.byName[name]; p != nil {
		return p.grad
	}
	return m.LM.Grad(name)
}
