package qwenvl

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/tensor"
)

// editConfig returns testdata/models/qwen2.5-vl.json with edit applied to its JSON object.
func editConfig(t *testing.T, edit func(c map[string]any)) []byte {
	data, err := os.ReadFile(filepath.Join("testdata", "models", "qwen2.5-vl.json"))
	require.NoError(t, err)
	var c map[string]any
	require.NoError(t, json.Unmarshal(data, &c))
	edit(c)
	out, err := json.Marshal(c)
	require.NoError(t, err)
	return out
}

func TestParseConfigErrors(t *testing.T) {
	_, err := ParseConfig([]byte("{"))
	require.ErrorContains(t, err, "not a JSON object")
	vision := func(c map[string]any) map[string]any { return c["vision_config"].(map[string]any) }
	text := func(c map[string]any) map[string]any { return c["text_config"].(map[string]any) }
	for _, tc := range []struct {
		name, want string
		edit       func(c map[string]any)
	}{
		{"model type", "model_type", func(c map[string]any) { c["model_type"] = "qwen2" }},
		{"architecture", "architectures", func(c map[string]any) { c["architectures"] = []string{"Qwen2VLForConditionalGeneration"} }},
		{"unknown key", "frobnicate", func(c map[string]any) { c["frobnicate"] = 1 }},
		{"unknown text key", "text_config.frobnicate", func(c map[string]any) { text(c)["frobnicate"] = 1 }},
		{"unknown vision key", "vision_config.frobnicate", func(c map[string]any) { vision(c)["frobnicate"] = 1 }},
		{"mrope sum", "mrope_section", func(c map[string]any) {
			text(c)["rope_scaling"] = map[string]any{"type": "mrope", "mrope_section": []int{2, 2, 2}}
		}},
		{"rope type", "rope type", func(c map[string]any) {
			text(c)["rope_scaling"] = map[string]any{"type": "yarn", "mrope_section": []int{2, 2, 4}}
		}},
		{"no mrope", "mrope_section", func(c map[string]any) { delete(text(c), "rope_scaling") }},
		{"interleaved mrope", "mrope_interleaved", func(c map[string]any) {
			text(c)["rope_scaling"] = map[string]any{"rope_type": "default", "mrope_section": []int{2, 2, 4}, "mrope_interleaved": true}
		}},
		{"window", "window_size", func(c map[string]any) { vision(c)["window_size"] = 30 }},
		{"full attention block", "fullatt_block_indexes", func(c map[string]any) { vision(c)["fullatt_block_indexes"] = []int{3} }},
		{"heads", "head size", func(c map[string]any) { vision(c)["num_heads"] = 3 }},
		{"activation", "hidden_act", func(c map[string]any) { vision(c)["hidden_act"] = "relu6" }},
		{"token outside the vocabulary", "outside the vocabulary", func(c map[string]any) { c["image_token_id"] = 500 }},
		{"merger size", "hidden_size", func(c map[string]any) { vision(c)["out_hidden_size"] = 48 }},
		{"missing end token", "vision_end_token_id", func(c map[string]any) { delete(c, "vision_end_token_id") }},
		{"negative depth", "depth", func(c map[string]any) { vision(c)["depth"] = -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(editConfig(t, tc.edit))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestOpenCheckpointErrors: a missing, extra or misshapen weight, or one stored under both
// layouts, is an error naming it.
func TestOpenCheckpointErrors(t *testing.T) {
	cfg, err := LoadConfigFile(filepath.Join("testdata", "models", "qwen2-vl.json"))
	require.NoError(t, err)
	ck := RandomCheckpoint(cfg, 1)
	save := func(edit func(ts []*hfmodel.Tensor) []*hfmodel.Tensor) string {
		dir := t.TempDir()
		require.NoError(t, ck.Save(dir, hfmodel.Float32, LayoutLegacy))
		ts, err := hfmodel.ReadSafetensors(filepath.Join(dir, hfmodel.SingleWeightsFile))
		require.NoError(t, err)
		require.NoError(t, hfmodel.WriteSafetensors(filepath.Join(dir, hfmodel.SingleWeightsFile), edit(ts)))
		return dir
	}
	find := func(ts []*hfmodel.Tensor, name string) int {
		for i, t := range ts {
			if t.Name == name {
				return i
			}
		}
		t.Fatalf("no %s", name)
		return -1
	}
	dir := save(func(ts []*hfmodel.Tensor) []*hfmodel.Tensor {
		i := find(ts, "visual.blocks.1.attn.qkv.bias")
		return append(ts[:i], ts[i+1:]...)
	})
	_, err = OpenCheckpoint(dir)
	require.ErrorContains(t, err, "visual.blocks.1.attn.qkv.bias")
	dir = save(func(ts []*hfmodel.Tensor) []*hfmodel.Tensor {
		extra, err := hfmodel.NewTensor("visual.blocks.9.norm1.weight", []int{32}, make([]float32, 32), hfmodel.Float32)
		require.NoError(t, err)
		return append(ts, extra)
	})
	_, err = OpenCheckpoint(dir)
	require.ErrorContains(t, err, "visual.blocks.9.norm1.weight")
	dir = save(func(ts []*hfmodel.Tensor) []*hfmodel.Tensor {
		i := find(ts, "visual.merger.mlp.0.bias")
		bad, err := hfmodel.NewTensor(ts[i].Name, []int{3}, make([]float32, 3), hfmodel.Float32)
		require.NoError(t, err)
		ts[i] = bad
		return ts
	})
	_, err = OpenCheckpoint(dir)
	require.ErrorContains(t, err, "visual.merger.mlp.0.bias")
	dir = save(func(ts []*hfmodel.Tensor) []*hfmodel.Tensor {
		i := find(ts, "visual.merger.mlp.0.bias")
		dup := *ts[i]
		dup.Name = "model.visual.merger.mlp.0.bias"
		return append(ts, &dup)
	})
	_, err = OpenCheckpoint(dir)
	require.ErrorContains(t, err, "both weight-name layouts")
}

// TestModelInputErrors: inputs Hugging Face rejects, or that do not fit the tower, are errors.
func TestModelInputErrors(t *testing.T) {
	m := loadCase(t, filepath.Join("testdata", "models", "qwen2.5-vl.json"), 2, "float32", "legacy")
	cols := m.Config.Vision.PatchDim()
	p := testPatches([][3]int{{1, 4, 6}}, cols)
	tok := m.Config.Tokens
	ids := []int32{1, int32(tok.VisionStartID)}
	for range 6 {
		ids = append(ids, int32(tok.ImageID))
	}
	ids = append(ids, int32(m.Config.VisionEndID), 5)
	_, err := m.Logits(Sample{IDs: ids, Images: p})
	require.NoError(t, err)

	_, err = m.Logits(Sample{IDs: ids[:len(ids)-3], Images: p})
	require.ErrorContains(t, err, "do not match")
	_, err = m.Logits(Sample{IDs: ids})
	require.ErrorContains(t, err, "no pixels")
	bad := p
	bad.Grids = []Grid{{1, 4, 5}}
	_, err = m.Logits(Sample{IDs: ids, Images: bad})
	require.ErrorContains(t, err, "multiples of spatial_merge_size")
	bad.Grids = []Grid{{1, 4, 4}}
	_, err = m.Logits(Sample{IDs: ids, Images: bad})
	require.ErrorContains(t, err, "rows")
	bad = p
	bad.Cols = 7
	_, err = m.Logits(Sample{IDs: ids, Images: bad})
	require.ErrorContains(t, err, "values")
	_, _, err = m.Vision.Forward(p.Values[:cols*3+1], p.Grids, false)
	require.ErrorContains(t, err, "rows of")
	_, err = m.Logits(Sample{IDs: append([]int32{1000}, ids...), Images: p})
	require.ErrorContains(t, err, "vocabulary")
	_, err = m.Score([]Sample{{IDs: ids, Images: p}}, []int{len(ids)}, 1, false)
	require.ErrorContains(t, err, "completionLens")
	_, err = m.Score([]Sample{{IDs: ids, Images: p}}, []int{1, 2}, 1, false)
	require.ErrorContains(t, err, "completionLens")
	require.ErrorContains(t, m.Vision.Backward(nil, nil), "keep")
}

// TestParsePublishedConfigs reads Qwen2-VL-2B-Instruct's config.json (top-level text keys,
// rope_scaling type mrope) and Qwen2.5-VL-7B's as transformers 4.53 writes it (text_config,
// null token ids in it, layer_types, in_chans and in_channels).
func TestParsePublishedConfigs(t *testing.T) {
	c, err := LoadConfigFile(filepath.Join("testdata", "models", "qwen2-vl-2b-instruct-config.json"))
	require.NoError(t, err)
	require.Equal(t, Qwen2VL, c.Variant)
	require.Equal(t, 128, c.Text.HeadDim)
	require.Equal(t, []int{16, 24, 24}, c.MRoPESection)
	require.True(t, c.Text.TieWordEmbeddings)
	require.Equal(t, VisionConfig{Depth: 32, Dim: 1280, Heads: 16, MLPDim: 5120, OutDim: 1536, InChannels: 3, PatchSize: 14,
		TemporalPatchSize: 2, MergeSize: 2, Act: tensor.QuickGELU}, c.Vision)
	require.Equal(t, VisionTokens{VisionStartID: 151652, ImageID: 151655, VideoID: 151656, MergeSize: 2}, c.Tokens)

	c, err = LoadConfigFile(filepath.Join("testdata", "models", "qwen2.5-vl-7b-config-nested.json"))
	require.NoError(t, err)
	require.Equal(t, Qwen25VL, c.Variant)
	require.Equal(t, 152064, c.Text.VocabSize)
	require.Equal(t, "float32", c.Text.TorchDType) // text_config's own
	require.False(t, c.Text.TieWordEmbeddings)
	require.Equal(t, VisionConfig{Depth: 32, Dim: 1280, Heads: 16, MLPDim: 3420, OutDim: 3584, InChannels: 3, PatchSize: 14,
		TemporalPatchSize: 2, MergeSize: 2, Act: tensor.SiLU, WindowSize: 112, FullAttBlocks: []int{7, 15, 23, 31}, TokensPerSecond: 2}, c.Vision)
	require.Equal(t, 2, c.Tokens.TokensPerSecond)
	require.Equal(t, int64(151653), c.VisionEndID)

	// transformers 5 names it rope_parameters, with rope_theta inside
	c, err = ParseConfig(editConfig(t, func(c map[string]any) {
		tc := c["text_config"].(map[string]any)
		delete(tc, "rope_scaling")
		delete(tc, "rope_theta")
		tc["rope_parameters"] = map[string]any{"rope_type": "default", "mrope_section": []int{2, 2, 4}, "rope_theta": 5e5}
	}))
	require.NoError(t, err)
	require.Equal(t, 5e5, c.Text.RopeTheta)
	require.Equal(t, []int{2, 2, 4}, c.MRoPESection)
}

// TestLoadOnErrors: a nil checkpoint or backend is an error, not a panic; a model loaded on
// the CPU backend reports it and trains with Training.
func TestLoadOnErrors(t *testing.T) {
	_, err := LoadOn(nil, tensor.CPU())
	require.ErrorContains(t, err, "ck")
	cfg, err := LoadConfigFile(filepath.Join("testdata", "models", "qwen2-vl.json"))
	require.NoError(t, err)
	_, err = LoadOn(RandomCheckpoint(cfg, 1), nil)
	require.ErrorIs(t, err, tensor.ErrParam)
	_, err = LoadDirOn(t.TempDir(), nil)
	require.ErrorIs(t, err, tensor.ErrParam)
	m, err := LoadOn(RandomCheckpoint(cfg, 1), tensor.CPU())
	require.NoError(t, err)
	require.Equal(t, tensor.CPU(), m.Backend())
	_, _, err = m.Training(0)
	require.NoError(t, err)
}
