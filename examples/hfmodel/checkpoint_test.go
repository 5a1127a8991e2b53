package hfmodel

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nlpodyssey/safetensors"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/tensor"
)

func readConfig(t *testing.T, name string) *Config {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	c, err := ParseConfig(data)
	require.NoError(t, err)
	return c
}

// smallVocab keeps unit-test checkpoints tiny.
func smallVocab(c *Config) *Config { c.VocabSize = 300; return c }

func TestParseConfigQwen25(t *testing.T) {
	c := readConfig(t, "qwen2.5-0.5b-instruct-config.json")
	require.Equal(t, ArchQwen2, c.Architecture)
	require.Equal(t, 896, c.HiddenSize)
	require.Equal(t, 64, c.HeadDim)
	require.Equal(t, 2, c.NumKeyValueHeads)
	require.Equal(t, 1e6, c.RopeTheta)
	require.True(t, c.TieWordEmbeddings)
	require.True(t, c.AttentionBias)
	require.Nil(t, c.RopeScaling)
	require.Equal(t, []int{151645}, c.EOSTokenIDs)
	require.Equal(t, "bfloat16", c.TorchDType)
	// 24 layers × 12 tensors + embeddings + final norm, no lm_head (tied)
	require.Len(t, ExpectedTensors(c), 24*12+2)
	n := 0
	for _, s := range ExpectedTensors(c) {
		n += numel(s.Shape)
	}
	require.Equal(t, 494032768, n) // Qwen2.5-0.5B's published parameter count
}

func TestParseConfigLlama3Rope(t *testing.T) {
	c := readConfig(t, "tiny-llama-config.json")
	require.Equal(t, ArchLlama, c.Architecture)
	require.Equal(t, &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 512}, c.RopeScaling)
	require.Equal(t, []int{2, 3}, c.EOSTokenIDs)
	names := map[string][]int{}
	for _, s := range ExpectedTensors(c) {
		names[s.Name] = s.Shape
	}
	require.Equal(t, []int{64, 48}, names["model.layers.1.self_attn.q_proj.weight"]) // head_dim × heads ≠ hidden
	require.Equal(t, []int{48}, names["model.layers.0.self_attn.o_proj.bias"])
	require.Equal(t, []int{96}, names["model.layers.0.mlp.up_proj.bias"])
	require.Equal(t, []int{300, 48}, names["lm_head.weight"])
}

func TestParseConfigErrorsNameTheKey(t *testing.T) {
	base, err := os.ReadFile(filepath.Join("testdata", "qwen2.5-0.5b-instruct-config.json"))
	require.NoError(t, err)
	llama, err := os.ReadFile(filepath.Join("testdata", "tiny-llama-config.json"))
	require.NoError(t, err)
	edit := func(src []byte, key string, v any) []byte {
		var m map[string]any
		require.NoError(t, json.Unmarshal(src, &m))
		if v == nil {
			delete(m, key)
		} else {
			m[key] = v
		}
		out, err := json.Marshal(m)
		require.NoError(t, err)
		return out
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"architecture", edit(base, "architectures", []string{"MistralForCausalLM"}), `"MistralForCausalLM" is not supported`},
		{"unknown key", edit(base, "quantization_config", map[string]any{"bits": 4}), `"quantization_config" is not supported`},
		{"yarn", edit(base, "rope_scaling", map[string]any{"rope_type": "yarn", "factor": 4}), `rope type "yarn" is not supported`},
		{"dynamic old spelling", edit(base, "rope_scaling", map[string]any{"type": "dynamic", "factor": 2}), `rope type "dynamic" is not supported`},
		{"sliding window", edit(base, "use_sliding_window", true), "use_sliding_window"},
		{"activation", edit(base, "hidden_act", "gelu"), `"gelu" is not supported`},
		{"model_type", edit(base, "model_type", "llama"), "does not match"},
		{"gqa", edit(base, "num_key_value_heads", 3), "num_key_value_heads"},
		{"missing", edit(base, "hidden_size", nil), "hidden_size: missing"},
		{"llama key on qwen2", edit(base, "mlp_bias", true), "mlp_bias"},
		{"pretraining_tp", edit(llama, "pretraining_tp", 2), "pretraining_tp"},
		{"llama3 without factor", edit(llama, "rope_scaling", map[string]any{"rope_type": "llama3", "factor": 8}), `needs "low_freq_factor"`},
		{"linear extra key", edit(llama, "rope_scaling", map[string]any{"rope_type": "linear", "factor": 2, "beta": 1}), `key "beta"`},
		{"dtype", edit(base, "torch_dtype", "float8_e4m3fn"), "float8_e4m3fn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(tc.data)
			require.Error(t, err)
			require.ErrorIs(t, err, tensor.ErrParam)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	c, err := ParseConfig(edit(llama, "rope_scaling", map[string]any{"type": "linear", "factor": 2}))
	require.NoError(t, err)
	require.Equal(t, &RopeScaling{Type: "linear", Factor: 2}, c.RopeScaling)
}

func TestConfigMarshalRoundTrip(t *testing.T) {
	for _, name := range []string{"qwen2.5-0.5b-instruct-config.json", "tiny-llama-config.json"} {
		c := readConfig(t, name)
		out, err := c.MarshalJSON()
		require.NoError(t, err)
		c2, err := ParseConfig(out)
		require.NoError(t, err)
		require.Equal(t, c, c2, name)
	}
}

// TestSaveOpenBitIdentical writes random weights in each dtype and shard count, opens them, saves
// what it opened in another layout and opens that: the bytes of every tensor are equal, and
// the values are the float32 originals rounded once to the dtype.
func TestSaveOpenBitIdentical(t *testing.T) {
	for _, cfgName := range []string{"tiny-qwen2-config.json", "tiny-llama-config.json"} {
		cfg := smallVocab(readConfig(t, cfgName))
		orig, err := RandomCheckpoint(cfg, 7)
		require.NoError(t, err)
		for _, dt := range []DType{Float32, BFloat16, Float16} {
			for _, shards := range []int{1, 3} {
				dir1, dir2 := t.TempDir(), t.TempDir()
				require.NoError(t, orig.Save(dir1, SaveOptions{DType: dt, Shards: shards}))
				ck1, err := Open(dir1)
				require.NoError(t, err)
				require.Equal(t, dt.String(), ck1.Config.TorchDType)
				for i, tt := range ck1.Tensors {
					require.Equal(t, dt, tt.DType)
					want, err := orig.Tensors[i].convert(dt)
					require.NoError(t, err)
					require.Equal(t, want.Data, tt.Data, tt.Name)
				}
				// the other sharding, same dtype: the same bytes back
				require.NoError(t, ck1.Save(dir2, SaveOptions{DType: dt, Shards: 4 - shards}))
				ck2, err := Open(dir2)
				require.NoError(t, err)
				require.Equal(t, ck1.Config, ck2.Config)
				require.Equal(t, ck1.Generation, ck2.Generation)
				for i := range ck1.Tensors {
					require.Equal(t, ck1.Tensors[i].Data, ck2.Tensors[i].Data)
				}
				require.NoError(t, ck1.Close())
				require.NoError(t, ck2.Close())
			}
		}
	}
}

func TestShardedLayout(t *testing.T) {
	cfg := smallVocab(readConfig(t, "tiny-qwen2-config.json"))
	ck, err := RandomCheckpoint(cfg, 1)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, ck.Save(dir, SaveOptions{DType: BFloat16, Shards: 3}))
	var idx struct {
		Metadata struct {
			TotalSize int `json:"total_size"`
		} `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	data, err := os.ReadFile(filepath.Join(dir, WeightsIndexFile))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &idx))
	total := 0
	files := map[string]int{}
	for _, s := range ExpectedTensors(cfg) {
		total += 2 * numel(s.Shape)
		files[idx.WeightMap[s.Name]]++
	}
	require.Equal(t, total, idx.Metadata.TotalSize)
	require.Len(t, idx.WeightMap, len(ExpectedTensors(cfg)))
	require.Len(t, files, 3)
	for i := 1; i <= 3; i++ {
		name := "model-0000" + string(rune('0'+i)) + "-of-00003.safetensors"
		require.Positive(t, files[name], name)
		raw, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		_, meta, err := safetensors.ReadMetadata(raw)
		require.NoError(t, err)
		require.Equal(t, map[string]string{"format": "pt"}, meta.Metadata())
	}
	require.NoFileExists(t, filepath.Join(dir, SingleWeightsFile))
	// saving unsharded over it removes the index, which would otherwise win
	require.NoError(t, ck.Save(dir, SaveOptions{DType: Float32, Shards: 1}))
	require.NoFileExists(t, filepath.Join(dir, WeightsIndexFile))
	ck2, err := Open(dir)
	require.NoError(t, err)
	require.Equal(t, Float32, ck2.Tensors[0].DType)
	ck2.Close()
}

func TestOpenErrors(t *testing.T) {
	cfg := smallVocab(readConfig(t, "tiny-qwen2-config.json"))
	ck, err := RandomCheckpoint(cfg, 1)
	require.NoError(t, err)
	write := func(t *testing.T, mutate func(dir string)) error {
		dir := t.TempDir()
		require.NoError(t, ck.Save(dir, SaveOptions{DType: Float32, Shards: 2}))
		mutate(dir)
		got, err := Open(dir)
		if err == nil {
			got.Close()
		}
		return err
	}
	rewriteShard := func(dir string, edit func(views map[string]safetensors.TensorView)) {
		p := filepath.Join(dir, "model-00002-of-00002.safetensors")
		raw, err := os.ReadFile(p)
		require.NoError(t, err)
		st, err := safetensors.Deserialize(raw)
		require.NoError(t, err)
		views := map[string]safetensors.TensorView{}
		for _, nt := range st.Tensors() {
			views[nt.Name] = nt.TensorView
		}
		edit(views)
		out, err := safetensors.Serialize(views, nil)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, out, 0o644))
	}
	err = write(t, func(dir string) {
		rewriteShard(dir, func(v map[string]safetensors.TensorView) { delete(v, "model.norm.weight") })
	})
	require.ErrorContains(t, err, "model.norm.weight")
	err = write(t, func(dir string) {
		rewriteShard(dir, func(v map[string]safetensors.TensorView) {
			tv, err := safetensors.NewTensorView(safetensors.I64, []uint64{32}, make([]byte, 256))
			require.NoError(t, err)
			v["model.norm.weight"] = tv
		})
	})
	require.ErrorIs(t, err, tensor.ErrDType)
	require.ErrorContains(t, err, "I64")
	err = write(t, func(dir string) {
		rewriteShard(dir, func(v map[string]safetensors.TensorView) {
			tv, err := safetensors.NewTensorView(safetensors.F32, []uint64{33}, make([]byte, 132))
			require.NoError(t, err)
			v["model.norm.weight"] = tv
		})
	})
	require.ErrorIs(t, err, tensor.ErrShape)
	require.ErrorContains(t, err, "[33]")
	err = write(t, func(dir string) {
		rewriteShard(dir, func(v map[string]safetensors.TensorView) { v["lm_head.weight"] = v["model.norm.weight"] })
	})
	require.ErrorContains(t, err, "lm_head.weight")
	err = write(t, func(dir string) {
		p := filepath.Join(dir, "model-00001-of-00002.safetensors")
		raw, err := os.ReadFile(p)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, raw[:len(raw)-1], 0o644))
	})
	require.ErrorContains(t, err, "not a valid safetensors file")
	err = write(t, func(dir string) { os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors")) })
	require.ErrorContains(t, err, "model-00002-of-00002.safetensors")
	err = write(t, func(dir string) {
		os.Remove(filepath.Join(dir, WeightsIndexFile))
	})
	require.ErrorContains(t, err, "neither model.safetensors nor model.safetensors.index.json")
	err = write(t, func(dir string) {
		data, _ := os.ReadFile(filepath.Join(dir, WeightsIndexFile))
		data = []byte(strings.Replace(string(data), `"model.norm.weight": "model-00002-of-00002.safetensors"`, `"model.norm.weight": "model-00001-of-00002.safetensors"`, 1))
		os.WriteFile(filepath.Join(dir, WeightsIndexFile), data, 0o644)
	})
	require.ErrorContains(t, err, "model.norm.weight")
	require.Error(t, ck.Save(t.TempDir(), SaveOptions{Shards: 1}))
	require.Error(t, ck.Save(t.TempDir(), SaveOptions{DType: Float32, Shards: 0}))
	_, err = Open(t.TempDir())
	require.True(t, errors.Is(err, tensor.ErrParam))
}

func TestSplitShardsNeverEmpty(t *testing.T) {
	sizes := []int{1000, 1, 1, 1, 1} // one huge tensor first
	var ts []*Tensor
	for _, s := range sizes {
		ts = append(ts, &Tensor{Data: make([]byte, s)})
	}
	for k := 1; k <= len(ts); k++ {
		sh := splitShards(ts, k)
		require.Len(t, sh, k)
		n := 0
		for _, s := range sh {
			require.NotEmpty(t, s)
			n += len(s)
		}
		require.Equal(t, len(ts), n)
	}
}

// TestSplitBySize: transformers' documented example of max_shard_size (weights of 6, 6, 2, 6,
// 2, 2 GB under a 10 GB limit shard as [6], [6+2], [6+2+2]); a tensor over the limit gets a
// shard of its own, placed when it is met (huggingface_hub's order).
func TestSplitBySize(t *testing.T) {
	shardSizes := func(sizes []int, max int64) [][]int {
		var ts []*Tensor
		for _, s := range sizes {
			ts = append(ts, &Tensor{Data: make([]byte, s)})
		}
		var out [][]int
		for _, sh := range splitBySize(ts, max) {
			var row []int
			for _, x := range sh {
				row = append(row, len(x.Data))
			}
			out = append(out, row)
		}
		return out
	}
	require.Equal(t, [][]int{{6}, {6, 2}, {6, 2, 2}}, shardSizes([]int{6, 6, 2, 6, 2, 2}, 10))
	require.Equal(t, [][]int{{20}, {3, 4}, {5}}, shardSizes([]int{3, 20, 4, 5}, 8))
	require.Equal(t, [][]int{{1, 2, 3}}, shardSizes([]int{1, 2, 3}, 6))
}

func TestFloat16Conversions(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := f16ToF32(uint16(h))
		if f != f { // NaN: stays NaN
			require.True(t, math.IsNaN(float64(f16ToF32(f32ToF16(f)))))
			continue
		}
		require.Equal(t, uint16(h), f32ToF16(f), "half %#04x", h)
	}
	// rounding to nearest even, against float64 arithmetic over the two neighbouring halves
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		f := math.Float32frombits(rng.Uint32())
		if math.IsNaN(float64(f)) || math.Abs(float64(f)) > 65504 {
			continue
		}
		h := f32ToF16(f)
		got := float64(f16ToF32(h))
		for _, n := range []uint16{h + 1, h - 1} {
			alt := float64(f16ToF32(n))
			if math.IsNaN(alt) || math.IsInf(alt, 0) || (n^h)&0x8000 != 0 {
				continue
			}
			d0, d1 := math.Abs(got-float64(f)), math.Abs(alt-float64(f))
			require.True(t, d0 < d1 || (d0 == d1 && h&1 == 0), "f=%g rounds to %g, %g is nearer", f, got, alt)
		}
	}
}
