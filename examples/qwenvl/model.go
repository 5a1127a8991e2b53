package qwenvl

import (
	"math/rand/v2"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/tensor"
)

// Model is Qwen2VLForConditionalGeneration or Qwen2_5_VLForConditionalGeneration in float32
// on the host: the vision tower, and the Qwen2 language model of examples/hflm with M-RoPE,
// whose input embeddings at the image (video) placeholder tokens are the tower's features.
type Model struct {
	Config *Config
	Vision *Vision
	LM     *hflm.Model
	lora   *hflm.LoRAConfig // AddLoRA's configuration; nil: no adapters
}

// Load builds the model from a checkpoint's weights (copied; ck may be dropped).
func Load(ck *Checkpoint) (*Model, error) {
	byName := map[string]*hfmodel.Tensor{}
	for _, s := range expectedTensors(ck.Config) {
		t, err := hfmodel.NewTensor(s.name, s.shape, ck.Weights[s.name], hfmodel.Float32)
		if err != nil {
			return nil, err
		}
		byName[s.name] = t
	}
	return load(ck.Config, byName)
}

// LoadDir opens a checkpoint directory (either weight-name layout) and loads it, widening
// each weight from the mapped file straight into the model's float32 (a bfloat16 checkpoint
// is not first copied whole).
func LoadDir(dir string) (*Model, error) {
	var m *Model
	err := mapCheckpoint(dir, func(cfg *Config, byName map[string]*hfmodel.Tensor) error {
		var err error
		m, err = load(cfg, byName)
		return err
	})
	return m, err
}

// load builds the model from weights by legacy name: the language model through hflm.Load of
// the text weights, the tower from the visual.* ones.
func load(c *Config, byName map[string]*hfmodel.Tensor) (*Model, error) {
	var text []*hfmodel.Tensor
	for _, s := range hfmodel.ExpectedTensors(c.Text) {
		text = append(text, byName[s.Name])
	}
	tck, err := hfmodel.NewCheckpoint(c.Text, nil, text)
	if err != nil {
		return nil, err
	}
	lm, err := hflm.Load(tck)
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
	v, err := newVision(c.Variant, c.Vision, vis)
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
	d := m.Config.Text.HiddenSize
	b.in.Scatter = func(x *tensor.Tensor) error {
		xv := host(x)
		for i, enc := range b.enc {
			for k, f := range enc.feats {
				fv := host(f)
				for j, r := range enc.rows[k] {
					copy(xv[(starts[i]+r)*d:(starts[i]+r+1)*d], fv[j*d:(j+1)*d])
				}
			}
		}
		return nil
	}
	b.in.Gather = func(dx *tensor.Tensor) error {
		dxv := host(dx)
		for i, enc := range b.enc {
			b.dfeats[i] = nil
			for k := range enc.feats {
				g, gv := f32(len(enc.rows[k]), d)
				for j, r := range enc.rows[k] {
					row := dxv[(starts[i]+r)*d : (starts[i]+r+1)*d]
					copy(gv[j*d:(j+1)*d], row)
					clear(row)
				}
				b.dfeats[i] = append(b.dfeats[i], g)
			}
		}
		return nil
	}
	return b, nil
}

// Logits returns the next-token logits [len(IDs), V] of one sample (the full forward).
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
