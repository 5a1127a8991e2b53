package main

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/tprl/loop"
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
		{"worker.actor.kl_penalty=l3", "worker.actor.kl_penalty"}, // an alias: the error names the key as written
		{"worker.actor.clip_ratio_dual=1", "worker.actor.clip_ratio_dual"},
		{"worker.actor.global_batch_size=3", "worker.actor.global_batch_size"},
		{"worker.actor.micro_batch_size_per_device_for_update=5", "worker.actor.micro_batch_size_per_device_for_update"},
		{"worker.actor.model.heads=3", "worker.actor.model.heads"},
		{"training.adv_estimator=ppo", "training.adv_estimator"},
		{"optimization.advantage_estimator=ppo", "optimization.advantage_estimator"},
		{"optimization.divergence_type=pid", "optimization.divergence_type"},
		{"optimization.filter_key=speed", "optimization.filter_key"},
		{"worker.actor.optim.lr_scheduler_type=step", "worker.actor.optim.lr_scheduler_type"},
		{"training.logger=[console, neptune]", "training.logger"},
		{"training.steps=2.5", "training.steps"},
		{"training.steps=", "training.steps"},
		{"worker.rollout.n=1e-3", "worker.rollout.n"},
		{"worker.actor.optim.lr=", "worker.actor.optim.lr"},
		{"dataset.val_batch_size=0", "dataset.val_batch_size"},
		{"training.val_only=true", "training.val_only"},
		{"training.find_last_checkpoint=true", "training.find_last_checkpoint"},
		{"training.steps=-1", "training.steps"},
		{"dataset.options=11", "dataset.options"},
		{"optimization.perturbation=rotate", "optimization.perturbation"},
		{"optimization.trajectory_shaping_scope=local", "optimization.trajectory_shaping_scope"},
		{"trainers.steps=3", "trainers.steps"},
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

	frac := filepath.Join(dir, "frac.yaml")
	require.NoError(t, os.WriteFile(frac, []byte("worker:\n  rollout:\n    n: 2.5\n"), 0o644))
	_, err = LoadConfig(frac, nil)
	require.ErrorContains(t, err, "worker.rollout.n")
	assert.ErrorContains(t, err, "not an integer")
	empty := filepath.Join(dir, "empty.yaml")
	require.NoError(t, os.WriteFile(empty, []byte("training:\n  save_freq:\n"), 0o644))
	_, err = LoadConfig(empty, nil)
	assert.ErrorContains(t, err, "training.save_freq: "+empty+" line 2: empty value")

	_, err = LoadConfig(filepath.Join(dir, "missing.yaml"), nil)
	assert.ErrorContains(t, err, "missing.yaml")
}

// TestSeedConfigLoads loads the seeds' config.yaml verbatim (shared/seeds/mtrl-config.yaml, kept
// as testdata so the test does not depend on the checkout's neighbours) and checks that each key
// with a meaning here lands in its field, and each PyTorch/vLLM-only key gets one warning.
func TestSeedConfigLoads(t *testing.T) {
	c, err := LoadConfig("testdata/mtrl-config.yaml", nil)
	require.NoError(t, err)
	d, tr, o, a, r := c.Dataset, c.Training, c.Optimization, c.Worker.Actor, c.Worker.Rollout
	assert.Equal(t, "data/train.jsonl", d.TrainFiles)
	assert.Equal(t, "data/images", d.ImageDir)
	assert.Equal(t, 512, d.MaxPromptLength)
	assert.Equal(t, 512, d.MaxResponseLength)
	assert.Equal(t, 256, d.RolloutBatchSize)
	assert.Equal(t, 64, d.ValBatchSize)
	assert.Equal(t, 10, tr.TotalEpochs)
	assert.Equal(t, 0, tr.Steps, "total_epochs alone sets the budget")
	assert.Equal(t, StringList{"console", "wandb"}, tr.Logger)
	assert.Equal(t, 8, tr.NGPUsPerNode)
	assert.Equal(t, 500, tr.SaveFreq)
	assert.Equal(t, 100, tr.ValFreq)
	assert.Equal(t, advantage.EstimatorGAE, o.AdvantageEstimator)
	assert.Equal(t, 0.95, o.Lam)
	assert.Equal(t, 0.01, o.DivergenceCoef)
	assert.Equal(t, divergence.AdaptiveController, o.DivergenceType)
	assert.Equal(t, 6.0, o.DivergenceTarget)
	assert.True(t, o.EnableEntropyFiltering)
	assert.Equal(t, 0.2, o.TopPPerceptionTokens)
	assert.Equal(t, 5e-7, a.Optim.LR)
	assert.Equal(t, 10, a.Optim.WarmupSteps)
	assert.Equal(t, 256, a.GlobalBatchSize)
	assert.Equal(t, 2, a.MicroBatchSizePerDeviceForUpdate)
	assert.Equal(t, 0.3, a.ClipRatioHigh)
	assert.Equal(t, -1, r.TopK)
	ws := strings.Join(c.Warnings(), "\n")
	assert.Equal(t, "videos", d.VideoKey, "a real key: a row's videos are an error, not dropped")
	assert.Equal(t, "Qwen/Qwen2.5-VL-7B-Instruct", a.Model.ModelPath, "read, and refused by Run: a hub name, not a directory")
	assert.False(t, a.FSDP.CPUOffload, "read: the optimizer offload's switch (offload.go)")
	for _, k := range []string{"worker.hybrid_engine", "worker.actor.model.trust_remote_code", "worker.rollout.name",
		"worker.rollout.gpu_memory_utilization", "worker.reward.reward_fn_path"} {
		assert.Equal(t, 1, strings.Count(ws, "config: "+k+" "), "one warning for %s in:\n%s", k, ws)
	}
	// The memory keys are read with model_path (scale.go).
	assert.True(t, a.Model.EnableGradientCheckpointing)
	assert.Equal(t, "bf16", a.FSDP.MixedPrecisionDType)
	assert.True(t, a.PaddingFree)
	assert.True(t, a.DynamicBatching)
	assert.Contains(t, ws, "config: worker.actor.fsdp.sharding_strategy=FULL_SHARD runs as SHARD_GRAD_OP")
	assert.Len(t, c.Warnings(), 6, ws)
	stage, err := a.FSDP.Sharding()
	require.NoError(t, err)
	assert.Equal(t, loop.ShardGradients, stage, "FULL_SHARD: ZeRO-2 here")
	ctl, err := c.Controller()
	require.NoError(t, err)
	assert.Equal(t, 0.01, ctl.Coef())
}

func TestUnknownKeySuggestsNearest(t *testing.T) {
	for _, tc := range []struct{ override, want string }{
		{"optimization.divergence_cof=0.1", "optimization.divergence_coef"},
		{"worker.actor.optim.learning_rat=1", "worker.actor.optim.lr"},
		{"training.top_k=3", "worker.rollout.top_k"},
		{"worker.rollout.temprature=0.5", "worker.rollout.temperature"},
	} {
		_, err := LoadConfig("", []string{tc.override})
		require.Error(t, err, tc.override)
		if tc.want == "worker.actor.optim.lr" {
			assert.NotContains(t, err.Error(), "did you mean", "a far-away name gets no guess: %v", err)
			continue
		}
		assert.Contains(t, err.Error(), `did you mean "`+tc.want+`"?`, tc.override)
	}
}

func TestAliasesAndWarnings(t *testing.T) {
	c, err := LoadConfig("", []string{"worker.actor.use_kl_loss=true", "algorithm.kl_coef=0.05", "trainer.total_epochs=2",
		"data.rollout_batch_size=8", "worker.rollout.max_new_tokens=16", "worker.rollout.gpu_memory_utilization=0.5",
		"worker.rollout.gpu_memory_utilization=0.6", "worker.actor.fsdp.cpu_offload=true", "training.logger=console,tensorboard"})
	require.NoError(t, err)
	assert.True(t, c.DivergenceInLoss())
	assert.False(t, c.DivergenceInReward())
	assert.Equal(t, 0.05, c.Optimization.DivergenceCoef)
	assert.Equal(t, 2, c.Training.TotalEpochs)
	assert.Equal(t, 0, c.Training.Steps)
	assert.Equal(t, 8, c.Dataset.RolloutBatchSize)
	assert.Equal(t, 16, c.Dataset.MaxResponseLength)
	assert.Equal(t, StringList{"console", "tensorboard"}, c.Training.Logger)
	c2, err := LoadConfig("", []string{"trainer.test_freq=7", "data.train_batch_size=8", "algorithm.kl_ctrl.type=adaptive",
		"algorithm.kl_ctrl.target_kl=0.2", "trainer.save_limit=3"})
	require.NoError(t, err)
	assert.Equal(t, 7, c2.Training.ValFreq)
	assert.Equal(t, 8, c2.Dataset.RolloutBatchSize)
	assert.Equal(t, divergence.AdaptiveController, c2.Optimization.DivergenceType)
	assert.Equal(t, 0.2, c2.Optimization.DivergenceTarget)
	assert.Len(t, c2.Warnings(), 1)
	assert.Len(t, c.Warnings(), 2, "one warning per key: %v", c.Warnings())

	// The budget given last wins, with a warning.
	c, err = LoadConfig("testdata/mtrl-config.yaml", []string{"training.steps=5"})
	require.NoError(t, err)
	assert.Equal(t, 5, c.Training.Steps)
	assert.Equal(t, 0, c.Training.TotalEpochs)
	assert.Contains(t, strings.Join(c.Warnings(), "\n"), "the budget is 5 steps")
	c, err = LoadConfig("", []string{"training.steps=5", "training.total_epochs=3"})
	require.NoError(t, err)
	assert.Equal(t, 0, c.Training.Steps)
	assert.Equal(t, 3, c.Training.TotalEpochs)
	c, err = LoadConfig("", []string{"training.steps=7.0"})
	require.NoError(t, err)
	assert.Equal(t, 7, c.Training.Steps)
}

func TestFlagsAfterOverrides(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	cfg := fs.String("config", "", "")
	pc := fs.Bool("print-config", false, "")
	o, err := parseArgs(fs, []string{"training.steps=3", "-config", "x.yaml", "worker.rollout.n=2", "-print-config"})
	require.NoError(t, err)
	assert.Equal(t, []string{"training.steps=3", "worker.rollout.n=2"}, o)
	assert.Equal(t, "x.yaml", *cfg)
	assert.True(t, *pc)
}

// TestSeedREADMESnippets: keys from the MTRL README's other examples (LoRA, video, vLLM prefix
// caching, Ulysses) are accepted with a warning; the seeds' config=FILE form names the file.
func TestSeedREADMESnippets(t *testing.T) {
	c, err := LoadConfig("", []string{"dataset.video_fps=2.0", "worker.actor.model.peft_type=lora", "worker.actor.model.lora_rank=8",
		"worker.rollout.enable_prefix_caching=true", "worker.actor.ulysses_size=2", "dataset.min_pixels=262144"})
	require.NoError(t, err)
	ws := strings.Join(c.Warnings(), "\n")
	assert.Len(t, c.Warnings(), 6, ws)
	assert.Contains(t, ws, "no LoRA")
	assert.Contains(t, ws, "dataset.image_size^2 = 1024 pixels")
	_, err = LoadConfig("", []string{"training.find_last_checkpoint=true", "training.load_checkpoint_path=ck/step_1000"})
	require.NoError(t, err)
}

// TestEasyR1Layout: a file with EasyR1's section names and verl's nested kl_ctrl loads.
func TestEasyR1Layout(t *testing.T) {
	p := filepath.Join(t.TempDir(), "easyr1.yaml")
	require.NoError(t, os.WriteFile(p, []byte(`data:
  rollout_batch_size: 8
algorithm:
  adv_estimator: rloo
  kl_coef: 0.02
  kl_ctrl:
    target_kl: 0.3
trainer:
  total_epochs: 2
  test_freq: 5
`), 0o644))
	c, err := LoadConfig(p, nil)
	require.NoError(t, err)
	assert.Equal(t, 8, c.Dataset.RolloutBatchSize)
	assert.Equal(t, advantage.EstimatorRLOO, c.Optimization.AdvantageEstimator)
	assert.Equal(t, 0.02, c.Optimization.DivergenceCoef)
	assert.Equal(t, 0.3, c.Optimization.DivergenceTarget)
	assert.Equal(t, 2, c.Training.TotalEpochs)
	assert.Equal(t, 5, c.Training.ValFreq)
}
