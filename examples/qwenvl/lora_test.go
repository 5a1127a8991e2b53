package qwenvl

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/tensor"
)

// towerTargets names every tower projection of the variant (PEFT's list form): "proj" also
// matches the Conv3d patch embedding visual.patch_embed.proj, as in PEFT.
func towerTargets(m *Model) []string {
	if m.Config.Variant == Qwen25VL {
		return []string{"qkv", "proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "mlp.0", "mlp.2"}
	}
	return []string{"qkv", "proj", "fc1", "fc2", "mlp.0", "mlp.2"}
}

// randomizeB gives every adapter a random B (PEFT's zero B hides the adapters from the forward
// and zeroes A's gradient).
func randomizeB(t *testing.T, m *Model, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 3))
	ps, err := m.peftTensors()
	require.NoError(t, err)
	for _, p := range ps {
		if strings.HasSuffix(p.name, ".lora_B.weight") {
			for i := range host(p.value) {
				host(p.value)[i] = float32(0.1 * rng.NormFloat64())
			}
		}
	}
	require.NoError(t, m.repackAdapters())
}

// TestTowerLoRASelection checks which modules get adapters against PEFT's matching rules.
func TestTowerLoRASelection(t *testing.T) {
	q2, q25 := "qwen2-vl.json", "qwen2.5-vl.json"
	const layers = 2 // both test configurations; the towers' depths are 2 and 3
	for _, c := range []struct {
		name          string
		cfg           string
		lora          hflm.LoRAConfig
		lm, tower     int
		firstTowerMod string
	}{
		// all-linear: every nn.Linear but lm_head; the Conv3d patch embedding is not one.
		{"all-linear qwen2", q2, hflm.LoRAConfig{TargetModules: []string{"all-linear"}}, 7 * layers, 4*2 + 2, "visual.blocks.0.attn.qkv"},
		{"all-linear qwen2.5", q25, hflm.LoRAConfig{TargetModules: []string{"all-linear"}}, 7 * layers, 5*3 + 2, "visual.blocks.0.attn.qkv"},
		// q_proj matches no tower module (its attention is one qkv).
		{"q_proj", q2, hflm.LoRAConfig{TargetModules: []string{"q_proj", "v_proj"}}, 2 * layers, 0, ""},
		// Qwen2.5-VL's tower MLP has the language model's names.
		{"gate_proj qwen2.5", q25, hflm.LoRAConfig{TargetModules: []string{"gate_proj"}}, layers, 3, "visual.blocks.0.mlp.gate_proj"},
		{"gate_proj qwen2", q2, hflm.LoRAConfig{TargetModules: []string{"gate_proj"}}, layers, 0, ""},
		// PEFT's string form of exclude_modules: a regular expression over whole names.
		{"exclude visual", q25, hflm.LoRAConfig{TargetModules: []string{"all-linear"}, ExcludeModules: []string{`.*visual.*`}}, 7 * layers, 0, ""},
		{"exclude merger", q2, hflm.LoRAConfig{TargetModules: []string{"all-linear"}, ExcludeModules: []string{"merger.mlp.0", "merger.mlp.2"}}, 7 * layers, 4 * 2, "visual.blocks.0.attn.qkv"},
		// "proj" also matches the patch embedding (PEFT adapts Conv3d layers).
		{"proj", q2, hflm.LoRAConfig{TargetModules: []string{"proj"}}, 0, 1 + 2, "visual.patch_embed.proj"},
		// transformers ≥ 4.52's names select the same modules.
		{"nested name", q2, hflm.LoRAConfig{TargetModules: []string{"model.visual.blocks.1.attn.qkv", "language_model.layers.0.self_attn.o_proj"}}, 1, 1, "visual.blocks.1.attn.qkv"},
		{"regex", q2, hflm.LoRAConfig{TargetModules: []string{`.*blocks\.\d+\.mlp\.fc\d`}}, 0, 2 * 2, "visual.blocks.0.mlp.fc1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := loadCase(t, filepath.Join("testdata", "models", c.cfg), 3, "float32", "legacy")
			cfg := c.lora
			cfg.Rank, cfg.Alpha = 2, 4
			require.NoError(t, m.AddLoRA(cfg))
			ps, err := m.LM.Params()
			require.NoError(t, err)
			require.Len(t, ps, 2*c.lm)
			require.Equal(t, c.tower, m.TowerAdapters())
			if c.tower > 0 {
				require.Equal(t, c.firstTowerMod, m.Vision.lora.adapters[0].module)
			}
		})
	}
	for _, bad := range []hflm.LoRAConfig{
		{TargetModules: []string{"q_proj", "qkv_typo"}},                   // an entry matching nothing
		{TargetModules: []string{"lm_head"}},                              // not adapted here
		{TargetModules: []string{"all-linear", "q_proj"}},                 // all-linear is a setting of its own
		{TargetModules: []string{"qkv"}, ExcludeModules: []string{"qkv"}}, // nothing left
		{TargetModules: []string{`.*(visual`}},                            // not a regular expression
		{TargetModules: []string{"q_proj"}, ExcludeModules: []string{"nothing"}},
		{},
	} {
		m := loadCase(t, filepath.Join("testdata", "models", "qwen2-vl.json"), 3, "float32", "legacy")
		bad.Rank, bad.Alpha = 2, 4
		require.ErrorIs(t, m.AddLoRA(bad), tensor.ErrParam, "%+v", bad)
	}
}

// TestTowerLoRAFiniteDifferences checks the tower adapters' backward, with dropout, against
// central differences of the forward: L = Σ r·features, each adapter matrix moved along its
// own gradient g/|g| changes L at the rate |g| (the same dropout masks: the random stream is
// rewound before each pass). The base tower gets no gradient, and Params holds the adapters
// alone.
func TestTowerLoRAFiniteDifferences(t *testing.T) {
	for _, cfgFile := range []string{"qwen2-vl.json", "qwen2.5-vl.json"} {
		t.Run(cfgFile, func(t *testing.T) {
			m := loadCase(t, filepath.Join("testdata", "models", cfgFile), 11, "float32", "legacy")
			// PEFT's string form: every tower module, the Conv3d patch embedding included
			require.NoError(t, m.AddLoRA(hflm.LoRAConfig{Rank: 3, Alpha: 6, Dropout: 0.25, TargetModules: []string{`(model\.)?visual\..*`}, Seed: 5}))
			randomizeB(t, m, 1)
			v := m.Vision
			perBlock := 4 // qkv, proj, fc1, fc2
			if m.Config.Variant == Qwen25VL {
				perBlock = 5
			}
			require.Len(t, v.lora.adapters, 1+perBlock*v.cfg.Depth+2) // the patch embedding, the blocks, the merger
			ps, err := m.Params()
			require.NoError(t, err)
			for _, p := range ps {
				require.True(t, strings.HasPrefix(p.Name, "base_model.model.visual.") && strings.Contains(p.Name, ".lora_"), p.Name)
			}
			require.Len(t, ps, 2*len(v.lora.adapters))
			state, err := m.LM.DropoutState()
			require.NoError(t, err)
			p := testPatches([][3]int{{1, 4, 6}, {2, 4, 4}}, v.cfg.PatchDim())
			r := make([]float32, 0)
			pass := func() (*tensor.Tensor, *VisionActs) {
				require.NoError(t, m.LM.SetDropoutState(state))
				out, a, err := v.Forward(p.Values, p.Grids, true)
				require.NoError(t, err)
				return out, a
			}
			out, a := pass()
			rng := rand.New(rand.NewPCG(1, 2))
			for range out.Len() {
				r = append(r, float32(rng.NormFloat64()))
			}
			dOut, _ := f32(out.Shape()...)
			copy(host(dOut), r)
			require.NoError(t, v.Backward(a, dOut))
			for _, prm := range v.params {
				require.Nil(t, prm.grad, "%s: the frozen base has no gradient", prm.name)
			}
			loss := func() float64 {
				o, _ := pass()
				l := 0.0
				for i, x := range host(o) {
					l += float64(r[i]) * float64(x)
				}
				return l
			}
			const eps = 1e-2
			worst := 0.0
			for _, ps := range ps {
				g, w := host(ps.Grad), host(ps.Value)
				norm := 0.0
				for _, x := range g {
					norm += float64(x) * float64(x)
				}
				norm = math.Sqrt(norm)
				require.Positive(t, norm, ps.Name)
				orig := slices.Clone(w)
				step := func(s float64) float64 {
					for j := range w {
						w[j] = orig[j] + float32(s*float64(g[j])/norm)
					}
					require.NoError(t, v.Repack())
					return loss()
				}
				fd := (step(eps) - step(-eps)) / (2 * eps)
				copy(w, orig)
				require.NoError(t, v.Repack())
				require.InDelta(t, norm, fd, 0.01*norm, "%s: |g| = %g, central difference %g", ps.Name, norm, fd)
				worst = max(worst, math.Abs(fd-norm)/norm)
			}
			t.Logf("largest relative difference %.2g over %d adapter matrices", worst, len(ps))
		})
	}
}

// TestTowerLoRAMergeAndFiles: the model with adapters on the language model and the tower
// computes what the merged model (MergeLoRA, and the export through Checkpoint) computes; Base
// is the model before the adapters, bit for bit; SaveLoRA writes PEFT's names and shapes and
// LoadLoRA into a fresh model gives the same logits bit for bit.
func TestTowerLoRAMergeAndFiles(t *testing.T) {
	g := readModelGolden(t)
	for _, cfgFile := range []string{"qwen2-vl.json", "qwen2.5-vl.json"} {
		t.Run(cfgFile, func(t *testing.T) {
			path := filepath.Join("testdata", "models", cfgFile)
			m := loadCase(t, path, 7, "float32", "legacy")
			s := goldenSample(g, m, g.Cases[0].IDs)
			before, err := m.Logits(s)
			require.NoError(t, err)
			targets := append(towerTargets(m), "q_proj", "o_proj", "down_proj")
			if m.Config.Variant == Qwen25VL {
				targets = append(towerTargets(m)[:2], "gate_proj", "up_proj", "down_proj", "mlp.0", "mlp.2", "q_proj", "o_proj")
			}
			require.NoError(t, m.AddLoRA(hflm.LoRAConfig{Rank: 2, Alpha: 8, TargetModules: targets, Seed: 9}))
			randomizeB(t, m, 2)
			with, err := m.Logits(s)
			require.NoError(t, err)
			base, err := m.Base().Logits(s)
			require.NoError(t, err)
			require.Equal(t, host(before), host(base), "Base is the model without adapters")
			diff := 0.0
			for i, v := range host(with) {
				diff = max(diff, math.Abs(float64(v-host(before)[i])))
			}
			require.Greater(t, diff, 1e-3, "the adapters change the logits")

			// PEFT's files
			dir := t.TempDir()
			require.NoError(t, m.SaveLoRA(dir, "Qwen/Qwen2-VL-2B-Instruct"))
			var ac map[string]any
			data, err := os.ReadFile(filepath.Join(dir, hflm.AdapterConfigFile))
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(data, &ac))
			require.Equal(t, "LORA", ac["peft_type"])
			require.Len(t, ac["target_modules"], len(targets))
			ts, err := hfmodel.ReadSafetensors(filepath.Join(dir, hflm.AdapterWeightsFile))
			require.NoError(t, err)
			shapes := map[string][]int{}
			for _, tn := range ts {
				shapes[tn.Name] = tn.Shape
			}
			v := m.Config.Vision
			require.Equal(t, []int{2, v.Dim}, shapes["base_model.model.visual.blocks.0.attn.qkv.lora_A.weight"])
			require.Equal(t, []int{3 * v.Dim, 2}, shapes["base_model.model.visual.blocks.0.attn.qkv.lora_B.weight"])
			require.Equal(t, []int{2, v.InChannels, v.TemporalPatchSize, v.PatchSize, v.PatchSize}, shapes["base_model.model.visual.patch_embed.proj.lora_A.weight"])
			require.Equal(t, []int{v.Dim, 2, 1, 1, 1}, shapes["base_model.model.visual.patch_embed.proj.lora_B.weight"])
			require.Equal(t, []int{v.OutDim, 2}, shapes["base_model.model.visual.merger.mlp.2.lora_B.weight"])
			require.Equal(t, []int{2, m.Config.Text.HiddenSize}, shapes["base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"])
			lm, err := m.LM.Params()
			require.NoError(t, err)
			require.Len(t, ts, 2*m.TowerAdapters()+len(lm))

			fresh := loadCase(t, path, 7, "float32", "legacy")
			require.NoError(t, fresh.LoadLoRA(dir))
			again, err := fresh.Logits(s)
			require.NoError(t, err)
			require.Equal(t, host(with), host(again), "SaveLoRA → LoadLoRA")
			other := loadCase(t, filepath.Join("testdata", "models", map[string]string{"qwen2-vl.json": "qwen2.5-vl.json", "qwen2.5-vl.json": "qwen2-vl.json"}[cfgFile]), 7, "float32", "legacy")
			require.Error(t, other.LoadLoRA(dir), "another architecture's adapter")

			// the export: Checkpoint merges into copies; MergeLoRA folds in place
			ck, err := m.Checkpoint()
			require.NoError(t, err)
			exported, err := Load(ck)
			require.NoError(t, err)
			ex, err := exported.Logits(s)
			require.NoError(t, err)
			require.NoError(t, m.MergeLoRA())
			require.Zero(t, m.TowerAdapters())
			merged, err := m.Logits(s)
			require.NoError(t, err)
			worst := 0.0
			for i, w := range host(with) {
				worst = max(worst, math.Abs(float64(w-host(merged)[i])), math.Abs(float64(w-host(ex)[i])))
			}
			require.Less(t, worst, 2e-5, "merged logits = base + adapters")
			t.Logf("merged vs adapters: max |Δ logit| = %.2g", worst)
		})
	}
}

// TestTowerLoRATraining: an optimizer step after a backward moves the tower's adapters (and
// the language model's) and no base weight; with Vision.Frozen (freeze_vision_tower) the
// tower's adapters are not trained, as verl freezes model.visual after adding them.
func TestTowerLoRATraining(t *testing.T) {
	g := readModelGolden(t)
	for _, frozen := range []bool{false, true} {
		m := loadCase(t, filepath.Join("testdata", "models", "qwen2.5-vl.json"), 3, "float32", "legacy")
		require.NoError(t, m.AddLoRA(hflm.LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"all-linear"}, Seed: 1}))
		m.Vision.Frozen = frozen
		opt, _, err := m.Training(0)
		require.NoError(t, err)
		ps, err := m.Params()
		require.NoError(t, err)
		tower := 0
		for _, p := range ps {
			if strings.HasPrefix(p.Name, "base_model.model.visual.") {
				tower++
			}
		}
		want := 2 * m.TowerAdapters()
		if frozen {
			want = 0
		}
		require.Equal(t, want, tower)
		before := map[string][]float32{}
		for _, name := range paramNames(m) {
			before[name] = slices.Clone(host(m.Weight(name)))
		}
		initA := map[*towerAdapter][]float32{}
		for _, ad := range m.Vision.lora.adapters {
			initA[ad] = slices.Clone(host(ad.a))
		}
		s := goldenSample(g, m, g.Cases[0].IDs)
		for range 2 { // B is zero at first: A moves from the second step
			sc, err := m.Score([]Sample{s}, []int{2}, 1, true)
			require.NoError(t, err)
			require.NoError(t, sc.Backward([][]float32{{1, -1}}, nil))
			_, err = opt.Step(1e-2, 0)
			require.NoError(t, err)
			m.LM.ZeroGrads()
			m.Vision.ZeroGrads()
		}
		for name, w := range before {
			require.Equal(t, w, host(m.Weight(name)), name)
		}
		for _, ad := range m.Vision.lora.adapters {
			require.Equal(t, !frozen, !allZero(host(ad.b)), "%s: B (frozen %v)", ad.module, frozen)
			require.Equal(t, !frozen, !slices.Equal(initA[ad], host(ad.a)), "%s: A (frozen %v)", ad.module, frozen)
		}
	}
}

func allZero(v []float32) bool {
	for _, x := range v {
		if x != 0 {
			return false
		}
	}
	return true
}
