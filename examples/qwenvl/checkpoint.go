package qwenvl

import (
	"encoding/json"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/tensor"
)

// Checkpoint is a Qwen2-VL or Qwen2.5-VL checkpoint's config and float32 weights, named in
// the older layout (model.layers.*, visual.*, lm_head.weight) whichever layout it was read from.
type Checkpoint struct {
	Config  *Config
	Weights map[string][]float32
}

// Layout names the two weight-name layouts of transformers' Qwen2-VL checkpoints.
type Layout int

const (
	// LayoutLegacy is model.embed_tokens…, model.layers.N…, visual.…, lm_head (the published
	// checkpoints, transformers < 4.52).
	LayoutLegacy Layout = iota
	// LayoutNested is model.language_model.…, model.visual.…, lm_head (transformers ≥ 4.52).
	LayoutNested
)

// canonicalName maps a weight name of either layout to the legacy one.
func canonicalName(name string) string {
	switch {
	case strings.HasPrefix(name, "model.language_model."):
		return "model." + strings.TrimPrefix(name, "model.language_model.")
	case strings.HasPrefix(name, "model.visual."):
		return strings.TrimPrefix(name, "model.")
	}
	return name
}

// layoutName maps a legacy weight name to layout l.
func layoutName(name string, l Layout) string {
	if l == LayoutNested {
		switch {
		case strings.HasPrefix(name, "model."):
			return "model.language_model." + strings.TrimPrefix(name, "model.")
		case strings.HasPrefix(name, "visual."):
			return "model." + name
		}
	}
	return name
}

// expectedTensors lists every weight of the model c describes in state_dict order: the
// language model's (hfmodel.ExpectedTensors of the text config), then the tower's.
func expectedTensors(c *Config) []specShape {
	var s []specShape
	for _, t := range hfmodel.ExpectedTensors(c.Text) {
		s = append(s, specShape{t.Name, t.Shape})
	}
	return append(s, visionSpecs(c.Variant, c.Vision)...)
}

// OpenCheckpoint reads config.json and the weights of dir, in either layout, widened to
// float32. Every weight the config implies must be there with its shape, and nothing else.
func OpenCheckpoint(dir string) (*Checkpoint, error) {
	var ck *Checkpoint
	err := mapCheckpoint(dir, func(cfg *Config, byName map[string]*hfmodel.Tensor) error {
		ck = &Checkpoint{Config: cfg, Weights: map[string][]float32{}}
		for name, t := range byName {
			ck.Weights[name] = t.Float32s()
		}
		return nil
	})
	return ck, err
}

// mapCheckpoint reads config.json, maps the weights of dir and calls use with them by legacy
// name (checked: every weight the config implies with its shape, nothing else) before
// unmapping them.
func mapCheckpoint(dir string, use func(*Config, map[string]*hfmodel.Tensor) error) error {
	const op = "qwenvl.OpenCheckpoint"
	cfg, err := LoadConfig(dir)
	if err != nil {
		return err
	}
	ts, unmap, err := hfmodel.MapTensors(dir)
	if err != nil {
		return err
	}
	defer unmap()
	byName := map[string]*hfmodel.Tensor{}
	for _, name := range slices.Sorted(maps.Keys(ts)) {
		c := canonicalName(name)
		if byName[c] != nil {
			return tensor.Errorf(tensor.ErrParam, op, name, "stored under both weight-name layouts")
		}
		t := *ts[name]
		t.Name = c
		byName[c] = &t
	}
	want := map[string]bool{}
	for _, s := range expectedTensors(cfg) {
		want[s.name] = true
		t := byName[s.name]
		if t == nil {
			return tensor.Errorf(tensor.ErrShape, op, s.name, "missing from the weights (%s, %d layers, vision depth %d)", cfg.Variant, cfg.Text.NumHiddenLayers, cfg.Vision.Depth)
		}
		if !slices.Equal(t.Shape, s.shape) {
			return tensor.Errorf(tensor.ErrShape, op, s.name, "has shape %v, config.json implies %v", t.Shape, s.shape)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		if !want[name] {
			return tensor.Errorf(tensor.ErrShape, op, name, "unexpected tensor for %s (tie_word_embeddings %v)", cfg.Variant, cfg.Text.TieWordEmbeddings)
		}
	}
	return use(cfg, byName)
}

// RandomCheckpoint makes weights for the model c describes as hfmodel.RandomCheckpoint does
// (each tensor a function of the seed and its legacy name; matrices, embeddings and biases
// ~ N(0, initializer_range²), norm weights 1 + N(0, initializer_range²)).
func RandomCheckpoint(c *Config, seed uint64) *Checkpoint {
	return &Checkpoint{Config: c, Weights: randomWeights(expectedTensors(c), c.Text.InitializerRange, seed)}
}

// randomWeights draws the weights of specs as RandomCheckpoint describes.
func randomWeights(specs []specShape, std float64, seed uint64) map[string][]float32 {
	w := map[string][]float32{}
	for _, s := range specs {
		h := fnv.New64a()
		h.Write([]byte(s.name))
		rng := rand.New(rand.NewPCG(seed, h.Sum64()))
		n := 1
		for _, d := range s.shape {
			n *= d
		}
		vals := make([]float32, n)
		offset := float32(0)
		if isNormWeight(s.name) {
			offset = 1
		}
		for i := range vals {
			vals[i] = offset + float32(rng.NormFloat64()*std)
		}
		w[s.name] = vals
	}
	return w
}

func isNormWeight(name string) bool {
	for _, suf := range []string{"norm.weight", "norm1.weight", "norm2.weight", "ln_q.weight"} {
		if strings.HasSuffix(name, suf) {
			return true
		}
	}
	return false
}

// Save writes config.json (torch_dtype set to dtype), generation_config.json, a
// preprocessor_config.json with the tower's patch sizes and one model.safetensors in layout l.
func (ck *Checkpoint) Save(dir string, dtype hfmodel.DType, l Layout) error {
	const op = "qwenvl.Checkpoint.Save"
	if dtype != hfmodel.Float32 && dtype != hfmodel.BFloat16 && dtype != hfmodel.Float16 {
		return tensor.Errorf(tensor.ErrDType, op, "dtype", "%v is not float32, bfloat16 or float16", dtype)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return tensor.Errorf(tensor.ErrParam, op, "dir", "%v", err)
	}
	var ts []*hfmodel.Tensor
	for _, s := range expectedTensors(ck.Config) {
		t, err := hfmodel.NewTensor(layoutName(s.name, l), s.shape, ck.Weights[s.name], dtype)
		if err != nil {
			return err
		}
		ts = append(ts, t)
	}
	if err := hfmodel.WriteSafetensors(filepath.Join(dir, hfmodel.SingleWeightsFile), ts); err != nil {
		return tensor.Errorf(tensor.ErrParam, op, hfmodel.SingleWeightsFile, "%v", err)
	}
	cfg := *ck.Config
	text := *cfg.Text
	text.TorchDType = dtype.String()
	cfg.Text = &text
	data, err := cfg.MarshalJSON()
	if err != nil {
		return err
	}
	gen, err := hfmodel.NewGenerationConfig(cfg.Text).MarshalJSON()
	if err != nil {
		return err
	}
	v := ck.Config.Vision
	pre, err := json.MarshalIndent(map[string]any{
		"image_processor_type": "Qwen2VLImageProcessor", "patch_size": v.PatchSize,
		"temporal_patch_size": v.TemporalPatchSize, "merge_size": v.MergeSize,
		"min_pixels": DefaultProcessorConfig().MinPixels, "max_pixels": DefaultProcessorConfig().MaxPixels,
	}, "", "  ")
	if err != nil {
		return err
	}
	files := map[string][]byte{hfmodel.ConfigFile: data, hfmodel.GenerationConfigFile: gen, "preprocessor_config.json": append(pre, '\n')}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return tensor.Errorf(tensor.ErrParam, op, name, "%v", err)
		}
	}
	return nil
}

// Checkpoint returns the weights the model computes with (the language model's LoRA adapters
// merged, as hflm.Model.Checkpoint merges them) as a Checkpoint to Save: the export of a
// trained model.
func (m *Model) Checkpoint() (*Checkpoint, error) {
	lm, err := m.LM.Checkpoint(nil)
	if err != nil {
		return nil, err
	}
	ck := &Checkpoint{Config: m.Config, Weights: map[string][]float32{}}
	for _, t := range lm.Tensors {
		ck.Weights[t.Name] = t.Float32s()
	}
	for _, p := range m.Vision.params {
		v, err := tensor.HostFloat32s(p.value)
		if err != nil {
			return nil, err
		}
		ck.Weights[p.name] = slices.Clone(v)
	}
	for _, l := range m.Vision.linears() { // the tower's adapters merged into the copies
		if ad := m.Vision.adapterOf(*l); ad != nil {
			delta, err := m.Vision.delta(ad)
			if err != nil {
				return nil, err
			}
			addTo(ck.Weights[l.name+".weight"], delta)
		}
	}
	return ck, nil
}
