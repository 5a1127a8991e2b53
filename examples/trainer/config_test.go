package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDefaultConfigValid(t *testing.T) {
	c := DefaultConfig()
	require.NoError(t, c.Validate())
	u, err := c.Update()
	require.NoError(t, err)
	assert.True(t, u.Tokens.EnablePerceptionFiltering)
	assert.InDelta(t, 0.4, u.Tokens.TopPPerceptionTokens, 0)
	assert.True(t, u.Tokens.EnableTrajectoryReweighting)
	assert.Equal(t, "default", u.Policy.LossType.String())
}

func TestOverrides(t *testing.T) {
	c, err := LoadConfig("", []string{"optimization.top_p_perception_tokens=0.25", "optimization.enable_perception_filtering=false",
		"worker.actor.optim.betas=[0.8, 0.99]", "training.adv_estimator=rloo", "worker.actor.loss_type=gspo"})
	require.NoError(t, err)
	assert.Equal(t, 0.25, c.Optimization.TopPPerceptionTokens)
	assert.False(t, c.Tokens().EnablePerceptionFiltering)
	assert.Equal(t, []float64{0.8, 0.99}, c.Worker.Actor.Optim.Betas)
	a, err := c.Advantage()
	require.NoError(t, err)
	assert.Equal(t, "rloo", a.Estimator.String())
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ override, key string }{
		{"optimization.top_p_perception_tokens=1.5", "optimization.top_p_perception_tokens"},
		{"optimization.top_p_perception_tokenz=0.5", "optimization.top_p_perception_tokenz"},
		{"worker.actor.optim.lr=-1", "worker.actor.optim.lr"},
		{"worker.actor.optim.lr=fast", "worker.actor.optim.lr"},
		{"worker.actor.optim.betas=[0.9]", "worker.actor.optim.betas"},
		{"worker.rollout.n=0", "worker.rollout.n"},
		{"worker.rollout.top_p=0", "worker.rollout.top_p"},
		{"worker.actor.loss_type=ppo2", "worker.actor.loss_type"},
		{"worker.actor.loss_avg_mode=mean", "worker.actor.loss_avg_mode"},
		{"worker.actor.kl_penalty=l3", "worker.actor.kl_penalty"},
		{"worker.actor.clip_ratio_dual=1", "worker.actor.clip_ratio_dual"},
		{"worker.actor.global_batch_size=3", "worker.actor.global_batch_size"},
		{"worker.actor.micro_batch_size_per_device_for_update=5", "worker.actor.micro_batch_size_per_device_for_update"},
		{"worker.actor.model.heads=3", "worker.actor.model.heads"},
		{"training.adv_estimator=ppo", "training.adv_estimator"},
		{"training.find_last_checkpoint=true", "training.find_last_checkpoint"},
		{"training.steps=-1", "training.steps"},
		{"dataset.options=11", "dataset.options"},
		{"optimization.perturbation=rotate", "optimization.perturbation"},
		{"optimization.trajectory_shaping_scope=local", "optimization.trajectory_shaping_scope"},
		{"trainer.steps=3", "trainer.steps"},
		{"worker.actor=3", "worker.actor"},
		{"worker.actor.lr.x=3", "worker.actor.lr.x"},
	} {
		_, err := LoadConfig("", []string{tc.override})
		require.Error(t, err, tc.override)
		var ce *ConfigError
		require.True(t, errors.As(err, &ce), "%s: %v", tc.override, err)
		assert.Equal(t, tc.key, ce.Key, "%s: %v", tc.override, err)
		assert.Contains(t, err.Error(), tc.key)
	}
	_, err := LoadConfig("", []string{"no-equals-sign"})
	assert.ErrorContains(t, err, "key.path=value")
}

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	require.NoError(t, os.WriteFile(good, []byte("training:\n  steps: 7\nworker:\n  rollout:\n    n: 4\n"), 0o644))
	c, err := LoadConfig(good, []string{"training.steps=9"})
	require.NoError(t, err)
	assert.Equal(t, 9, c.Training.Steps) // the override wins
	assert.Equal(t, 4, c.Worker.Rollout.N)
	assert.Equal(t, 0.4, c.Optimization.TopPPerceptionTokens) // defaults kept

	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("worker:\n  actor:\n    optim:\n      learning_rate: 0.1\n"), 0o644))
	_, err = LoadConfig(bad, nil)
	var ce *ConfigError
	require.True(t, errors.As(err, &ce), "%v", err)
	assert.Equal(t, "worker.actor.optim.learning_rate", ce.Key)
	assert.Contains(t, err.Error(), "line 4")

	typ := filepath.Join(dir, "type.yaml")
	require.NoError(t, os.WriteFile(typ, []byte("training:\n  steps: many\n"), 0o644))
	_, err = LoadConfig(typ, nil)
	assert.ErrorContains(t, err, "steps")

	_, err = LoadConfig(filepath.Join(dir, "missing.yaml"), nil)
	assert.ErrorContains(t, err, "missing.yaml")
}
