package hflm

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tprl"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

type testPrompt []int32

// trainSeven trains m with GRPO through tprl/loop for steps steps, a KL loss to reference: the
// reward is 1 for completions that start with token 7. The mean probability of 7 as the first
// token must grow tenfold. It returns each step's metrics.
func trainSeven(t *testing.T, m *Model, reference *Policy[testPrompt], steps int, lr float64) []map[string]float64 {
	policy := &Policy[testPrompt]{Model: m, Prompt: func(p testPrompt) []int32 { return p }, Stop: []int32{2, 3}}
	var data []testPrompt
	for i := range 16 {
		data = append(data, testPrompt{1, int32(10 + i), int32(40 + i%5)})
	}
	reward := func(in loop.RewardInputs[testPrompt]) ([]float64, error) {
		out := make([]float64, len(in.Completions))
		for i, c := range in.Completions {
			if len(c.Tokens) > 0 && c.Tokens[0] == 7 {
				out[i] = 1
			}
		}
		return out, nil
	}
	opt, grads, err := m.Training(0)
	require.NoError(t, err)
	cfg := loop.Config{
		Steps: steps, Prompts: 4, Sampling: loop.Sampling{N: 4, MaxTokens: 3, Temperature: 1, TopP: 1},
		Advantage:        advantage.DefaultConfig(),
		Update:           tprl.UpdateConfig{Tokens: tprl.DefaultConfig(), Policy: ppo.DefaultPolicyConfig(ppo.Vanilla), KLLoss: &ppo.KLConfig{Kind: divergence.LowVarKL, Coef: 0.01}},
		MiniBatchPrompts: 4, PPOEpochs: 1, UpdateRows: 8, ScoreRows: 16,
		LR: loop.Schedule{LR: lr}, Seed: 3,
	}
	l, err := loop.New(cfg, loop.Parts[testPrompt]{
		Policy: policy, Reference: reference, Optimizer: opt, Gradients: grads,
		Rewards: []loop.Reward[testPrompt]{{Name: "seven", Weight: 1, Func: reward}},
		Data:    loop.NewEpochs(data, true, 1),
	})
	require.NoError(t, err)
	p7 := func() float64 {
		p := 0.0
		for _, d := range data {
			sc, err := m.Score([][]int32{d}, [][]int32{{7}}, 1, false)
			require.NoError(t, err)
			p += math.Exp(float64(sc.LogProbs[0][0])) / float64(len(data))
		}
		return p
	}
	before := p7()
	var rewards []float64
	var metrics []map[string]float64
	for range cfg.Steps {
		res, err := l.Step(context.Background())
		require.NoError(t, err)
		rewards = append(rewards, res.Metrics["reward/seven"])
		metrics = append(metrics, res.Metrics)
		res.Release()
	}
	after := p7()
	t.Logf("rewards %v; p(7 first) %.3f → %.3f", rewards, before, after)
	require.Greater(t, after, 10*before)
	return metrics
}

// exportLogits exports m (Checkpoint → Save, sharded) and returns the logits of seq of the
// exported directory loaded afresh (packed from scratch).
func exportLogits(t *testing.T, m *Model, seq []int32) []float32 {
	ck, err := m.Checkpoint(hfmodel.NewGenerationConfig(m.Config))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, ck.Save(dir, hfmodel.SaveOptions{DType: hfmodel.Float32, Shards: 2}))
	saved, err := LoadDir(dir)
	require.NoError(t, err)
	lg, err := saved.Logits(seq)
	require.NoError(t, err)
	return host(lg)
}

// TestPolicyLearns trains every weight of a tiny Qwen2 with a frozen copy as the reference.
// The trained model exported and loaded afresh gives its logits bit for bit: the optimizer
// repacked what it changed.
func TestPolicyLearns(t *testing.T) {
	cfgFile := filepath.Join("testdata", "qwen2-untied.json")
	m := loadCheckpoint(t, cfgFile, 21, "float32", 1)
	ref := loadCheckpoint(t, cfgFile, 21, "float32", 1)
	trainSeven(t, m, &Policy[testPrompt]{Model: ref, Prompt: func(p testPrompt) []int32 { return p }}, 12, 3e-2)
	seq := []int32{1, 10, 40}
	got, err := m.Logits(seq)
	require.NoError(t, err)
	require.Equal(t, exportLogits(t, m, seq), host(got))
	base, err := ref.Logits(seq)
	require.NoError(t, err)
	require.NotEqual(t, host(base), host(got))
}

// TestLoRAPolicyLearns trains only LoRA adapters (all-linear), the reference being the same
// model with its adapters disabled: the base weights do not move, the adapter saves in PEFT
// format, and the export (adapters merged) has the merged model's logits bit for bit. The base's
// matrices are held only packed (their values dropped).
func TestLoRAPolicyLearns(t *testing.T) {
	cfgFile := filepath.Join("testdata", "qwen2-untied.json")
	m := loadCheckpoint(t, cfgFile, 21, "float32", 1)
	orig := loadCheckpoint(t, cfgFile, 21, "float32", 1)
	require.NoError(t, m.AddLoRA(LoRAConfig{Rank: 8, Alpha: 16, TargetModules: []string{"all-linear"}, Seed: 1}))
	ps, err := m.Params()
	require.NoError(t, err)
	require.Len(t, ps, 2*7*m.Config.NumHiddenLayers)
	trainSeven(t, m, &Policy[testPrompt]{Model: m.Base(), Prompt: func(p testPrompt) []int32 { return p }}, 24, 2e-2)
	for i, p := range m.params {
		// the frozen matrices are held once, as their panels (with a vector GEMM), and read back
		// exactly
		require.Equal(t, p.packed.Packed() == nil, p.value != nil, p.name)
		v, err := p.values()
		require.NoError(t, err)
		want, err := orig.params[i].values()
		require.NoError(t, err)
		require.Equal(t, host(want), host(v), p.name)
	}
	require.NoError(t, m.SaveLoRA(t.TempDir(), "tiny"))

	seq := []int32{1, 10, 40}
	exported := exportLogits(t, m, seq)
	require.NoError(t, m.MergeLoRA())
	merged, err := m.Logits(seq)
	require.NoError(t, err)
	require.Equal(t, host(merged), exported)
}
