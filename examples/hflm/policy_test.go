package hflm

import (
	"context"
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

// TestPolicyLearns trains a tiny Qwen2 with GRPO through tprl/loop, with a frozen copy as the
// KL reference: the reward (completions that start with token 7) must rise.
func TestPolicyLearns(t *testing.T) {
	cfgFile := filepath.Join("testdata", "qwen2-untied.json")
	m := loadCheckpoint(t, cfgFile, 21, "float32", 1)
	ref := loadCheckpoint(t, cfgFile, 21, "float32", 1)
	type prompt []int32
	policy := &Policy[prompt]{Model: m, Prompt: func(p prompt) []int32 { return p }, Stop: []int32{2, 3}}
	reference := &Policy[prompt]{Model: ref, Prompt: func(p prompt) []int32 { return p }}
	var data []prompt
	for i := range 16 {
		data = append(data, prompt{1, int32(10 + i), int32(40 + i%5)})
	}
	reward := func(in loop.RewardInputs[prompt]) ([]float64, error) {
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
		Steps: 12, Prompts: 4, Sampling: loop.Sampling{N: 4, MaxTokens: 3, Temperature: 1, TopP: 1},
		Advantage:        advantage.DefaultConfig(),
		Update:           tprl.UpdateConfig{Tokens: tprl.DefaultConfig(), Policy: ppo.DefaultPolicyConfig(ppo.Vanilla), KLLoss: &ppo.KLConfig{Kind: divergence.LowVarKL, Coef: 0.01}},
		MiniBatchPrompts: 4, PPOEpochs: 1, UpdateRows: 8, ScoreRows: 16,
		LR: loop.Schedule{LR: 3e-2}, Seed: 3,
	}
	l, err := loop.New(cfg, loop.Parts[prompt]{
		Policy: policy, Reference: reference, Optimizer: opt, Gradients: grads,
		Rewards: []loop.Reward[prompt]{{Name: "seven", Weight: 1, Func: reward}},
		Data:    loop.NewEpochs(data, true, 1),
	})
	require.NoError(t, err)
	var rewards []float64
	for range cfg.Steps {
		res, err := l.Step(context.Background())
		require.NoError(t, err)
		rewards = append(rewards, res.Metrics["reward/seven"])
		res.Release()
	}
	t.Logf("rewards %v", rewards)
	first := (rewards[0] + rewards[1] + rewards[2]) / 3
	last := (rewards[9] + rewards[10] + rewards[11]) / 3
	require.Greater(t, last, first+0.3)

	// The trained weights as a checkpoint, loaded afresh (packed from scratch), give the same
	// logits as the trained model: the optimizer repacked what it changed.
	ck, err := m.Checkpoint(nil)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, ck.Save(dir, hfmodel.SaveOptions{DType: hfmodel.Float32, Shards: 2}))
	saved, err := LoadDir(dir)
	require.NoError(t, err)
	want, err := saved.Logits(data[0])
	require.NoError(t, err)
	got, err := m.Logits(data[0])
	require.NoError(t, err)
	require.Equal(t, host(want), host(got))
	base, err := ref.Logits(data[0])
	require.NoError(t, err)
	require.NotEqual(t, host(base), host(got))
}
