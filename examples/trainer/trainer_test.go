package main

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/examples/internal/vqa"
)

// tinyConfig is a configuration that runs a few steps in about a second.
func tinyConfig(t *testing.T, dir string, extra ...string) Config {
	t.Helper()
	o := []string{
		"training.run_dir=" + dir,
		"training.steps=4", "training.sft_steps=3", "training.sft_batch_size=8", "training.val_freq=2",
		"training.save_freq=2", "training.progress=false", "training.rollout_log_freq=2",
		"dataset.train_size=64", "dataset.val_size=8", "dataset.rollout_batch_size=4",
		"worker.rollout.n=2", "worker.rollout.max_response_length=12",
		"worker.actor.global_batch_size=2", "worker.actor.micro_batch_size_per_device_for_update=2",
		"worker.actor.micro_batch_size_per_device_for_experience=4",
		"worker.actor.model.dim=16", "worker.actor.model.layers=1", "worker.actor.model.heads=2", "worker.actor.model.mlp_dim=32",
	}
	cfg, err := LoadConfig("", append(o, extra...))
	require.NoError(t, err)
	return cfg
}

func run(t *testing.T, cfg Config) *Summary {
	t.Helper()
	var out, errb bytes.Buffer
	s, err := Run(cfg, &out, &errb)
	require.NoError(t, err, "stderr: %s", errb.String())
	return s
}

func TestEndToEnd(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyConfig(t, dir, "worker.actor.use_kl_loss=true", "optimization.enable_entropy_filtering=true")
	s := run(t, cfg)
	assert.Equal(t, 4, s.Steps)
	for _, f := range []string{"metrics.jsonl", "curves.png", "rollouts.md", "config.yaml", "summary.json",
		"checkpoints/global_step_2/model.safetensors", "checkpoints/global_step_4/model.safetensors",
		"checkpoints/global_step_4/optimizer.safetensors", "checkpoints/global_step_4/state.json",
		"checkpoints/global_step_4/config.yaml", "checkpoints/global_step_4/ref.safetensors", "checkpoints/checkpoint_tracker.json"} {
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err, f)
		assert.Positive(t, st.Size(), f)
	}
	png, _ := os.ReadFile(filepath.Join(dir, "curves.png"))
	assert.True(t, bytes.HasPrefix(png, []byte("\x89PNG")))
	lines, err := ReadMetrics(filepath.Join(dir, "metrics.jsonl"))
	require.NoError(t, err)
	require.Len(t, lines, 5) // step 0 (warm start) + 4 RL steps
	for _, l := range lines[1:] {
		for _, k := range []string{"actor/pg_loss", "actor/pg_clipfrac_higher", "actor/ppo_kl", "actor/entropy_loss",
			"actor/grad_norm", "actor/kl_loss", "reward/overall", "reward/accuracy", "reward/format",
			"perf/tokens_per_s", "perf/step_s"} {
			v, ok := l.Metrics[k]
			require.True(t, ok, "step %d: no %s", l.Step, k)
			require.NotNil(t, v, "step %d: %s is not finite", l.Step, k)
			assert.False(t, math.IsNaN(*v) || math.IsInf(*v, 0), k)
		}
		for _, k := range []string{"actor/perception_token_fraction", "actor/scaling_factor_mean", "perception/precision",
			"perception/recall", "entropy_mask/precision", "entropy_mask/recall", "actor/entropy_token_fraction"} {
			_, ok := l.Metrics[k]
			assert.True(t, ok, "step %d: no %s", l.Step, k)
		}
	}
	_, ok := lines[2].Metrics["val/accuracy"]
	assert.True(t, ok, "validation at step 2 (val_freq 2)")
	md, _ := os.ReadFile(filepath.Join(dir, "rollouts.md"))
	assert.Contains(t, string(md), "## step 1")
}

// TestResumeEquivalence: 4 steps in one go and 2 steps + a resumed 2 give identical metrics
// (all but wall-time fields), and identical final weights.
func TestResumeEquivalence(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	run(t, tinyConfig(t, a))
	run(t, tinyConfig(t, b, "training.steps=2"))
	run(t, tinyConfig(t, b, "training.find_last_checkpoint=true"))
	la, err := ReadMetrics(filepath.Join(a, "metrics.jsonl"))
	require.NoError(t, err)
	lb, err := ReadMetrics(filepath.Join(b, "metrics.jsonl"))
	require.NoError(t, err)
	require.Equal(t, len(la), len(lb))
	for i := range la {
		require.Equal(t, la[i].Step, lb[i].Step)
		for k, va := range la[i].Metrics {
			if timingKey(k) {
				continue
			}
			vb, ok := lb[i].Metrics[k]
			require.True(t, ok, "step %d: resumed run lacks %s", la[i].Step, k)
			if va == nil || vb == nil {
				assert.Equal(t, va == nil, vb == nil, "step %d %s", la[i].Step, k)
				continue
			}
			assert.Equal(t, *va, *vb, "step %d %s", la[i].Step, k)
		}
		for k := range lb[i].Metrics {
			_, ok := la[i].Metrics[k]
			assert.True(t, ok || timingKey(k), "step %d: resumed run has extra %s", la[i].Step, k)
		}
	}
	wa, _ := os.ReadFile(filepath.Join(a, "checkpoints/global_step_4/model.safetensors"))
	wb, _ := os.ReadFile(filepath.Join(b, "checkpoints/global_step_4/model.safetensors"))
	assert.True(t, bytes.Equal(wa, wb), "final weights differ")
}

func TestRunRefusesExistingCheckpoints(t *testing.T) {
	dir := t.TempDir()
	run(t, tinyConfig(t, dir, "training.steps=1"))
	_, err := Run(tinyConfig(t, dir, "training.steps=1"), &bytes.Buffer{}, &bytes.Buffer{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "find_last_checkpoint")
}

func TestDataFileErrors(t *testing.T) {
	dir := t.TempDir()
	samples := vqa.Generate(vqa.DefaultTaskConfig(), 1, 0, 8)
	path, err := vqa.WriteJSONL(dir, "train", samples)
	require.NoError(t, err)
	vpath, err := vqa.WriteJSONL(dir, "val", samples[:4])
	require.NoError(t, err)

	// The files work, in both formats.
	run(t, tinyConfig(t, t.TempDir(), "dataset.train_files="+path, "dataset.val_files="+vpath, "training.steps=1"))
	ppath, err := vqa.WriteParquet(dir, "train", samples)
	require.NoError(t, err)
	run(t, tinyConfig(t, t.TempDir(), "dataset.train_files="+ppath, "dataset.val_files="+vpath, "training.steps=1"))

	// A corrupt line names the file and line.
	data, _ := os.ReadFile(path)
	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, append(data, []byte("{not json\n")...), 0o644))
	_, err = NewTrainer(tinyConfig(t, t.TempDir(), "dataset.train_files="+bad))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dataset.train_files")
	assert.Contains(t, err.Error(), "bad.jsonl")
	assert.Contains(t, err.Error(), "9") // the line

	// A missing image names its path.
	imgs, _ := filepath.Glob(filepath.Join(dir, "images", "val_*.png"))
	require.NotEmpty(t, imgs)
	require.NoError(t, os.Remove(imgs[0]))
	_, err = NewTrainer(tinyConfig(t, t.TempDir(), "dataset.train_files="+path, "dataset.val_files="+vpath))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dataset.val_files")
	assert.Contains(t, err.Error(), filepath.Base(imgs[0]))

	// A missing file.
	_, err = NewTrainer(tinyConfig(t, t.TempDir(), "dataset.train_files="+filepath.Join(dir, "nope.jsonl")))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nope.jsonl")
}

// TestFailedSaveKeepsCheckpoints: a save that fails before its commit leaves the previous
// checkpoint, the tracker and the resume point intact, and no partial directory behind.
func TestFailedSaveKeepsCheckpoints(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyConfig(t, dir, "training.steps=2")
	run(t, cfg)
	ck := &Checkpoints{Root: filepath.Join(dir, "checkpoints")}
	before, _ := os.ReadFile(filepath.Join(dir, "checkpoints/global_step_2/model.safetensors"))
	tracker, _ := os.ReadFile(filepath.Join(dir, "checkpoints", ckptTracker))

	tr, err := NewTrainer(cfg)
	require.NoError(t, err)
	require.NoError(t, tr.Load(filepath.Join(dir, "checkpoints/global_step_2")))
	tr.step = 3
	ck.beforeCommit = func() error { return errors.New("disk full (injected)") }
	_, err = tr.Save(ck)
	require.ErrorContains(t, err, "injected")

	entries, _ := os.ReadDir(ck.Root)
	for _, e := range entries {
		assert.False(t, strings.HasPrefix(e.Name(), ".tmp"), "temporary %s left behind", e.Name())
		assert.NotEqual(t, "global_step_3", e.Name())
	}
	after, _ := os.ReadFile(filepath.Join(dir, "checkpoints/global_step_2/model.safetensors"))
	assert.Equal(t, before, after)
	tracker2, _ := os.ReadFile(filepath.Join(dir, "checkpoints", ckptTracker))
	assert.Equal(t, tracker, tracker2)
	d, step, err := ck.Last()
	require.NoError(t, err)
	assert.Equal(t, 2, step)
	assert.Equal(t, filepath.Join(ck.Root, "global_step_2"), d)

	// A corrupt weights file is an error naming it, and changes nothing.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "checkpoints/global_step_2/model.safetensors"), []byte("garbage!!"), 0o644))
	tr2, err := NewTrainer(cfg)
	require.NoError(t, err)
	err = tr2.Load(filepath.Join(dir, "checkpoints/global_step_2"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "model.safetensors")
	assert.Equal(t, 0, tr2.step)
}
