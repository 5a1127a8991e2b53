package hflm

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/tensor"
)

// loraModel is a model of cfgFile with adapters whose B is random too (PEFT's zero B would make
// the adapters invisible in the forward and A's gradient zero).
func loraModel(t *testing.T, cfgFile string, targets ...string) *Model {
	m := loadCheckpoint(t, filepath.Join("testdata", cfgFile), 31, "float32", 1)
	require.NoError(t, m.AddLoRA(LoRAConfig{Rank: 3, Alpha: 6, TargetModules: targets, Seed: 4}))
	for i, ad := range m.adapters {
		for j := range host(ad.b) {
			host(ad.b)[j] = float32(0.05 * math.Sin(float64(7*i+j)))
		}
	}
	require.NoError(t, m.Repack())
	return m
}

// TestLoRAMatchesMerged checks the adapters against the merged model, which the goldens verify:
// the logits agree, and each adapter's gradients are the chain rule of the merged weight's,
// dA = s·Bᵀ·dW and dB = s·dW·Aᵀ. The base with adapters disabled is the model before them.
func TestLoRAMatchesMerged(t *testing.T) {
	for _, c := range []struct {
		cfg     string
		targets []string
	}{{"qwen2-untied.json", []string{"all-linear"}}, {"qwen2-tied.json", []string{"q_proj", "v_proj", "down_proj"}}} {
		t.Run(c.cfg, func(t *testing.T) {
			m := loraModel(t, c.cfg, c.targets...)
			plain := loadCheckpoint(t, filepath.Join("testdata", c.cfg), 31, "float32", 1)
			merged := loraModel(t, c.cfg, c.targets...)
			// merged's adapters, folded, with the same values as m's
			var as, bs [][]float32
			for _, ad := range merged.adapters {
				as, bs = append(as, append([]float32(nil), host(ad.a)...)), append(bs, append([]float32(nil), host(ad.b)...))
			}
			scale := merged.adapters[0].scale
			require.NoError(t, merged.MergeLoRA())
			require.Empty(t, merged.adapters)

			seq := []int32{1, 5, 9, 14, 3, 27, 8}
			lg, err := m.Logits(seq)
			require.NoError(t, err)
			want, err := merged.Logits(seq)
			require.NoError(t, err)
			for i, v := range host(want) {
				require.InDelta(t, v, host(lg)[i], 2e-6)
			}
			base, err := m.Base().Logits(seq)
			require.NoError(t, err)
			orig, err := plain.Logits(seq)
			require.NoError(t, err)
			require.Equal(t, host(orig), host(base))
			require.NotEqual(t, host(orig), host(lg))

			prompts, comps := [][]int32{{1, 5, 9}, {4, 7}}, [][]int32{{14, 3, 27}, {8, 60, 11, 2}}
			d := [][]float32{{1, -0.5, 0.25}, {0.3, 0.7, -1, 0.2}}
			for _, mod := range []*Model{m, merged} {
				s, err := mod.Score(prompts, comps, 0.8, true)
				require.NoError(t, err)
				require.NoError(t, s.Backward(d, d))
			}
			for i, ad := range m.adapters {
				g := host(merged.byName[ad.module+".weight"].grad) // [out, in]
				out, in, r := ad.b.Dim(0), ad.a.Dim(1), ad.a.Dim(0)
				for k := range r {
					for j := range in { // dA[k][j] = s Σ_o B[o][k] dW[o][j]
						sum := 0.0
						for o := range out {
							sum += float64(bs[i][o*r+k]) * float64(g[o*in+j])
						}
						require.InDelta(t, float64(scale)*sum, host(ad.ga)[k*in+j], 1e-4*math.Abs(float64(scale)*sum)+1e-6, "%s A[%d][%d]", ad.module, k, j)
					}
					for o := range out { // dB[o][k] = s Σ_j dW[o][j] A[k][j]
						sum := 0.0
						for j := range in {
							sum += float64(g[o*in+j]) * float64(as[i][k*in+j])
						}
						require.InDelta(t, float64(scale)*sum, host(ad.gb)[o*r+k], 1e-4*math.Abs(float64(scale)*sum)+1e-6, "%s B[%d][%d]", ad.module, o, k)
					}
				}
			}
			// the frozen base got no gradient
			for _, p := range m.params {
				require.Nil(t, p.grad, p.name)
			}
		})
	}
}

// TestLoRASaveLoad writes a PEFT adapter directory and loads it into a fresh base model.
func TestLoRASaveLoad(t *testing.T) {
	m := loraModel(t, "qwen2-untied.json", "q_proj", "k_proj", "v_proj", "o_proj")
	dir := t.TempDir()
	require.NoError(t, m.SaveLoRA(dir, "Qwen/Qwen2.5-0.5B-Instruct"))
	var cfg map[string]any
	data, err := os.ReadFile(filepath.Join(dir, AdapterConfigFile))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &cfg))
	require.Equal(t, "LORA", cfg["peft_type"])
	require.Equal(t, float64(3), cfg["r"])
	require.Equal(t, float64(6), cfg["lora_alpha"])
	require.Equal(t, []any{"q_proj", "k_proj", "v_proj", "o_proj"}, cfg["target_modules"])
	ts, err := hfmodel.ReadSafetensors(filepath.Join(dir, AdapterWeightsFile))
	require.NoError(t, err)
	require.Len(t, ts, 3*4*2)
	require.Equal(t, "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight", ts[0].Name)
	require.Equal(t, []int{3, 32}, ts[0].Shape)
	for _, tn := range ts {
		require.True(t, strings.HasPrefix(tn.Name, "base_model.model.model.layers."), tn.Name)
	}

	fresh := loadCheckpoint(t, filepath.Join("testdata", "qwen2-untied.json"), 31, "float32", 1)
	require.NoError(t, fresh.LoadLoRA(dir))
	seq := []int32{1, 5, 9, 14}
	a, err := m.Logits(seq)
	require.NoError(t, err)
	b, err := fresh.Logits(seq)
	require.NoError(t, err)
	require.Equal(t, host(a), host(b))

	other := loadCheckpoint(t, filepath.Join("testdata", "qwen2-tied.json"), 31, "float32", 1) // other shapes
	require.ErrorIs(t, other.LoadLoRA(dir), tensor.ErrShape)
	require.ErrorIs(t, fresh.AddLoRA(LoRAConfig{Rank: 1, Alpha: 1, TargetModules: []string{"q_proj"}}), tensor.ErrParam)
	plain := loadCheckpoint(t, filepath.Join("testdata", "qwen2-tied.json"), 31, "float32", 1)
	for _, bad := range []LoRAConfig{
		{Rank: 0, Alpha: 1, TargetModules: []string{"q_proj"}},
		{Rank: 2, Alpha: 0, TargetModules: []string{"q_proj"}},
		{Rank: 2, Alpha: 1, Dropout: 1, TargetModules: []string{"q_proj"}},
		{Rank: 2, Alpha: 1, TargetModules: []string{"lm_head"}},
		{Rank: 2, Alpha: 1},
	} {
		require.ErrorIs(t, plain.AddLoRA(bad), tensor.ErrParam, "%+v", bad)
	}
}

// TestLoRADropout: dropout changes training passes only, and its backward is that pass's
// derivative (the loss falls along the negative gradient of the same masks).
func TestLoRADropout(t *testing.T) {
	m := loadCheckpoint(t, filepath.Join("testdata", "qwen2-untied.json"), 31, "float32", 1)
	require.NoError(t, m.AddLoRA(LoRAConfig{Rank: 4, Alpha: 8, Dropout: 0.5, TargetModules: []string{"all-linear"}, Seed: 2}))
	for i, ad := range m.adapters {
		for j := range host(ad.b) {
			host(ad.b)[j] = float32(0.05 * math.Cos(float64(3*i+j)))
		}
	}
	require.NoError(t, m.Repack())
	prompts, comps := [][]int32{{1, 5, 9}}, [][]int32{{14, 3, 27}}
	eval1, err := m.Score(prompts, comps, 1, false)
	require.NoError(t, err)
	eval2, err := m.Score(prompts, comps, 1, false)
	require.NoError(t, err)
	require.Equal(t, eval1.LogProbs, eval2.LogProbs)
	train, err := m.Score(prompts, comps, 1, true)
	require.NoError(t, err)
	require.NotEqual(t, eval1.LogProbs, train.LogProbs)

	// L = Σ d·logp of a training pass with the masks of seed 9; along u = g/|g| its central
	// difference is g·u = |g|.
	d := [][]float32{{1, -0.7, 0.4}}
	loss := func(backward bool) float64 {
		m.dropRNG = rand.New(rand.NewPCG(9, 9))
		s, err := m.Score(prompts, comps, 1, true)
		require.NoError(t, err)
		if backward {
			require.NoError(t, s.Backward(d, nil))
		}
		l := 0.0
		for j, v := range s.LogProbs[0] {
			l += float64(d[0][j]) * float64(v)
		}
		return l
	}
	m.ZeroGrads()
	loss(true)
	ps, err := m.Params()
	require.NoError(t, err)
	norm := 0.0
	for _, p := range ps {
		for _, g := range host(p.Grad) {
			norm += float64(g) * float64(g)
		}
	}
	norm = math.Sqrt(norm)
	step := func(eps float64) {
		for _, p := range ps {
			w, g := host(p.Value), host(p.Grad)
			for j := range w {
				w[j] += float32(eps * float64(g[j]) / norm)
			}
		}
		require.NoError(t, m.Repack())
	}
	const eps = 1e-2
	step(eps)
	up := loss(false)
	step(-2 * eps)
	down := loss(false)
	step(eps)
	require.InDelta(t, norm, (up-down)/(2*eps), 0.02*norm)
}

// TestDropoutState: restoring a DropoutState replays the same masks (the training pass's
// log-probs repeat bit for bit), and a model without adapters has none.
func TestDropoutState(t *testing.T) {
	m := loadCheckpoint(t, filepath.Join("testdata", "qwen2-untied.json"), 31, "float32", 1)
	st, err := m.DropoutState()
	require.NoError(t, err)
	require.Nil(t, st)
	require.ErrorIs(t, m.SetDropoutState([]byte{1}), tensor.ErrParam)
	require.NoError(t, m.AddLoRA(LoRAConfig{Rank: 4, Alpha: 8, Dropout: 0.5, TargetModules: []string{"all-linear"}, Seed: 2}))
	for i, ad := range m.adapters {
		for j := range host(ad.b) {
			host(ad.b)[j] = float32(0.05 * math.Sin(float64(5*i+j)))
		}
	}
	require.NoError(t, m.Repack())
	prompts, comps := [][]int32{{1, 5, 9}}, [][]int32{{14, 3, 27}}
	pass := func() [][]float32 {
		s, err := m.Score(prompts, comps, 1, true)
		require.NoError(t, err)
		return s.LogProbs
	}
	st, err = m.DropoutState()
	require.NoError(t, err)
	first, second := pass(), pass()
	require.NotEqual(t, first, second, "fresh masks each pass")
	require.NoError(t, m.SetDropoutState(st))
	require.Equal(t, first, pass())
	require.ErrorIs(t, m.SetDropoutState([]byte("not a pcg")), tensor.ErrParam)
}

// TestLoRAExcludeModules: PEFT's exclude_modules (here its string form, a regular expression)
// keeps adapters off layer 0; adapter_config.json records it as a string, and LoadLoRA builds
// the same adapters from it.
func TestLoRAExcludeModules(t *testing.T) {
	m := loadCheckpoint(t, filepath.Join("testdata", "qwen2-untied.json"), 31, "float32", 1)
	require.NoError(t, m.AddLoRA(LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"all-linear"}, ExcludeModules: []string{`.*\.layers\.0\..*`}, Seed: 1}))
	require.Len(t, m.adapters, len(projections)*(m.Config.NumHiddenLayers-1))
	for _, ad := range m.adapters {
		require.False(t, strings.HasPrefix(ad.module, "model.layers.0."), ad.module)
	}
	dir := t.TempDir()
	require.NoError(t, m.SaveLoRA(dir, "base"))
	var cfg map[string]any
	data, err := os.ReadFile(filepath.Join(dir, AdapterConfigFile))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &cfg))
	require.Equal(t, `.*\.layers\.0\..*`, cfg["exclude_modules"])
	fresh := loadCheckpoint(t, filepath.Join("testdata", "qwen2-untied.json"), 31, "float32", 1)
	require.NoError(t, fresh.LoadLoRA(dir))
	require.Len(t, fresh.adapters, len(m.adapters))
}
