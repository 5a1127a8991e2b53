package main

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/examples/internal/vqa"
)

// Defects found by using the trainer as a user of the seed system would; each test failed
// before its fix.

// TestFullDivergenceRefusedAtValidation: "full" (listed in default.yaml, ROLL's name) used to
// pass validation and fail at the first RL step, after the whole warm start. It needs [B, T, V]
// log-distributions the step does not keep, so validation refuses it naming the kinds that
// work; with the divergence disabled the kind is unused and accepted.
func TestFullDivergenceRefusedAtValidation(t *testing.T) {
	for _, extra := range [][]string{nil, {"optimization.use_divergence_loss=true"}, {"worker.actor.kl_penalty=full"}} {
		o := append([]string{"optimization.divergence_penalty=full"}, extra...)
		if len(extra) > 0 && strings.HasPrefix(extra[0], "worker.") {
			o = extra
		}
		_, err := LoadConfig("", o)
		var ce *ConfigError
		require.True(t, errors.As(err, &ce), "%v: %v", o, err)
		assert.Equal(t, "optimization.divergence_penalty", ce.Key)
		for _, k := range []string{"kl", "abs", "mse", "low_var_kl"} {
			assert.Contains(t, err.Error(), k)
		}
	}
	_, err := LoadConfig("", []string{"optimization.divergence_penalty=full", "optimization.disable_divergence=true"})
	require.NoError(t, err)
}

// TestSFTShortcutNeverTouchesUserData: the default's planted answer-A bias (sft_shortcut 0.6)
// used to rewrite 60% of a user's own warm-start references. With dataset.train_files it is
// off; set explicitly it is an error naming the key.
func TestSFTShortcutNeverTouchesUserData(t *testing.T) {
	data := t.TempDir()
	samples := vqa.Generate(vqa.DefaultTaskConfig(), 1, 0, 64)
	train, err := vqa.WriteJSONL(data, "train", samples)
	require.NoError(t, err)
	cfg := tinyConfig(t, t.TempDir(), "dataset.train_files="+train, "training.sft_steps=10")
	assert.Zero(t, cfg.Training.SFTShortcut)
	tr, err := NewTrainer(cfg)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(1, 2))
	for s := range 10 {
		for _, e := range tr.train {
			require.Equal(t, e.ref, tr.sftReference(e, s, r), "step %d: a user's reference was rewritten", s)
		}
	}
	for _, v := range []string{"0.6", "0.1"} {
		_, err := LoadConfig("", []string{"dataset.train_files=" + train, "training.sft_shortcut=" + v})
		var ce *ConfigError
		require.True(t, errors.As(err, &ce), "%v", err)
		assert.Equal(t, "training.sft_shortcut", ce.Key)
		assert.Contains(t, err.Error(), "training.sft_shortcut=0")
	}
	_, err = LoadConfig("", []string{"dataset.train_files=" + train, "training.sft_shortcut=0"})
	require.NoError(t, err)
	c, err := LoadConfig("", nil) // the generated task keeps its bias
	require.NoError(t, err)
	assert.Equal(t, 0.6, c.Training.SFTShortcut)
}

// TestRowVideosAreAnError: a row's videos used to be dropped without a word; now the run
// fails naming the key and the way out, and with dataset.ignore_videos=true it trains on the
// images and says how many videos it skipped.
func TestRowVideosAreAnError(t *testing.T) {
	data := t.TempDir()
	samples := vqa.Generate(vqa.DefaultTaskConfig(), 1, 0, 16)
	p, err := vqa.WriteJSONL(data, "train", samples)
	require.NoError(t, err)
	raw, err := os.ReadFile(p)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	lines[3] = strings.TrimSuffix(lines[3], "}") + `,"videos":["clip.mp4"]}`
	require.NoError(t, os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	_, err = NewTrainer(tinyConfig(t, t.TempDir(), "dataset.train_files="+p))
	require.Error(t, err)
	for _, want := range []string{"dataset.train_files", "train.jsonl:4", `"videos"`, "dataset.ignore_videos=true"} {
		assert.Contains(t, err.Error(), want)
	}
	dir := t.TempDir()
	var out, errb bytes.Buffer
	_, err = Run(context.Background(), tinyConfig(t, dir, "dataset.train_files="+p, "dataset.ignore_videos=true", "training.steps=1"), &out, &errb)
	require.NoError(t, err, errb.String())
	assert.Contains(t, errb.String(), "dataset.ignore_videos: 1 videos")
}

// TestResumeFromExperimentDirectory: the seed FAQ's resume form, find_last_checkpoint with
// load_checkpoint_path naming the experiment directory, used to fail on
// <dir>/model.safetensors and leave an empty run directory behind. Now it resumes that run from
// its newest checkpoint (the same trajectory as an uninterrupted run); with a run_dir of its
// own it takes the newest checkpoint's weights; without find_last_checkpoint the error names
// the newest checkpoint; and a failed start leaves no directory it created.
func TestResumeFromExperimentDirectory(t *testing.T) {
	root := t.TempDir()
	a, exp := filepath.Join(root, "a"), filepath.Join(root, "runs", "proj", "exp")
	run(t, tinyConfig(t, a))
	run(t, tinyConfig(t, exp, "training.steps=2"))
	run(t, tinyConfig(t, "", "training.find_last_checkpoint=true", "training.load_checkpoint_path="+exp))
	sameRun(t, a, exp, 4)

	other := filepath.Join(root, "other")
	var out, errb bytes.Buffer
	_, err := Run(context.Background(), tinyConfig(t, other, "training.find_last_checkpoint=true", "training.load_checkpoint_path="+exp, "training.steps=1"), &out, &errb)
	require.NoError(t, err, errb.String())
	assert.Contains(t, errb.String(), "weights from "+filepath.Join(exp, "checkpoints", "global_step_4"))

	fresh := filepath.Join(root, "new", "run")
	_, err = Run(context.Background(), tinyConfig(t, fresh, "training.load_checkpoint_path="+exp), &out, &errb)
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(exp, "checkpoints", "global_step_4"))
	assert.Contains(t, err.Error(), "training.find_last_checkpoint=true")
	_, err = Run(context.Background(), tinyConfig(t, fresh, "training.load_checkpoint_path="+filepath.Join(root, "nothing-here")), &out, &errb)
	require.Error(t, err)
	// A failure after the run directory was made (bad data) removes what it made.
	_, err = Run(context.Background(), tinyConfig(t, fresh, "dataset.train_files="+filepath.Join(root, "missing.jsonl")), &out, &errb)
	require.ErrorContains(t, err, "missing.jsonl")
	_, err = os.Stat(filepath.Join(root, "new"))
	assert.True(t, os.IsNotExist(err), "a failed start left %s behind", filepath.Join(root, "new"))
}

// TestAttentionDiagnosticsHaveNoEmptyRanges: with the default's 2 blocks the "late" third had
// no block and printed NaN; the ranges now follow the depth (early / late for 2 blocks).
func TestAttentionDiagnosticsHaveNoEmptyRanges(t *testing.T) {
	for _, layers := range []string{"1", "2", "3"} {
		dir := t.TempDir()
		run(t, tinyConfig(t, dir, "training.steps=1", "worker.actor.model.layers="+layers, "worker.reward.mdi_weight=1"))
		ad, err := os.ReadFile(filepath.Join(dir, "attention_diagnostics.md"))
		require.NoError(t, err)
		assert.NotContains(t, string(ad), "NaN", "layers %s:\n%s", layers, ad)
		lines, err := ReadMetrics(filepath.Join(dir, "metrics.jsonl"))
		require.NoError(t, err)
		n := 0
		for k, v := range lines[1].Metrics {
			if strings.HasPrefix(k, "mdi/") && strings.HasSuffix(k, "_mdi") {
				n++
				assert.NotNil(t, v, "layers %s: %s is not finite", layers, k)
			}
		}
		want := map[string]int{"1": 1, "2": 2, "3": 3}[layers]
		assert.Equal(t, want, n, "layers %s: per-range MDI metrics", layers)
	}
}

// TestWarmStartResumesExactly: the warm start used to be lost on an interrupt. Now it is
// checkpointed every training.sft_save_freq steps and on the interrupt, and the resumed run
// equals an uninterrupted one (metrics, step-0 line included, and weights); the older
// warm-start checkpoints are removed, and all of them once global_step_0 exists.
func TestWarmStartResumesExactly(t *testing.T) {
	extra := []string{"training.sft_steps=12", "training.sft_save_freq=4", "training.steps=2"}
	a, b := t.TempDir(), t.TempDir()
	run(t, tinyConfig(t, a, extra...))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	testAfterWarmStep = func(s int) {
		if s == 10 {
			cancel()
		}
	}
	defer func() { testAfterWarmStep = nil }()
	var out, errb bytes.Buffer
	_, err := Run(ctx, tinyConfig(t, b, extra...), &out, &errb)
	require.ErrorIs(t, err, ErrInterrupted)
	testAfterWarmStep = nil
	warm, _ := filepath.Glob(filepath.Join(b, "checkpoints", "sft_step_*"))
	require.Equal(t, []string{filepath.Join(b, "checkpoints", "sft_step_10")}, warm, "the interrupt's checkpoint, the periodic ones removed")
	assert.Contains(t, errb.String(), "training.find_last_checkpoint=true")

	_, err = Run(context.Background(), tinyConfig(t, b, extra...), &out, &errb)
	require.ErrorContains(t, err, "warm-start checkpoint (step 10 of 12)", "resuming needs find_last_checkpoint, as an RL checkpoint does")

	errb.Reset()
	_, err = Run(context.Background(), tinyConfig(t, b, append(extra, "training.find_last_checkpoint=true")...), &out, &errb)
	require.NoError(t, err, errb.String())
	assert.Contains(t, errb.String(), "resuming the warm start from "+warm[0])
	sameRun(t, a, b, 2)
	warm, _ = filepath.Glob(filepath.Join(b, "checkpoints", "sft_step_*"))
	assert.Empty(t, warm)
}

// TestKilledInFirstCheckpointRestarts: a run stopped between the step-0 metrics line and the
// first checkpoint used to leave a run directory that refused the same command and lost the
// warm start. The same command now resumes the warm start from its last checkpoint and ends as
// an uninterrupted run.
func TestKilledInFirstCheckpointRestarts(t *testing.T) {
	extra := []string{"training.sft_steps=8", "training.sft_save_freq=3", "training.steps=2", "training.find_last_checkpoint=true"}
	a, b := t.TempDir(), t.TempDir()
	run(t, tinyConfig(t, a, extra...))
	testBeforeCommit = func(name string) error {
		if name == "global_step_0" {
			return errors.New("stopped inside the first checkpoint (injected)")
		}
		return nil
	}
	defer func() { testBeforeCommit = nil }()
	_, err := Run(context.Background(), tinyConfig(t, b, extra...), &bytes.Buffer{}, &bytes.Buffer{})
	require.ErrorContains(t, err, "injected")
	testBeforeCommit = nil
	lines, err := ReadMetrics(filepath.Join(b, "metrics.jsonl"))
	require.NoError(t, err)
	require.Len(t, lines, 1, "the step-0 line was written")
	warm, _ := filepath.Glob(filepath.Join(b, "checkpoints", "sft_step_*"))
	require.Equal(t, []string{filepath.Join(b, "checkpoints", "sft_step_6")}, warm)

	var errb bytes.Buffer
	_, err = Run(context.Background(), tinyConfig(t, b, extra...), &bytes.Buffer{}, &errb)
	require.NoError(t, err, errb.String())
	assert.Contains(t, errb.String(), "resuming the warm start from "+warm[0])
	sameRun(t, a, b, 2)
}
