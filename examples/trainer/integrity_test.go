package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// damage rewrites the first value of the first tensor of the safetensors file at path: one
// flipped bit, or a NaN written over the value's bytes.
func damage(t *testing.T, path string, nan bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	off := 8 + int(binary.LittleEndian.Uint64(data)) // the first tensor's first byte
	if nan {
		binary.LittleEndian.PutUint32(data[off:], math.Float32bits(float32(math.NaN())))
	} else {
		data[off] ^= 1 << 3
	}
	require.NoError(t, os.WriteFile(path, data, 0o644))
}

// TestDamagedCheckpointRefused: a checkpoint with one flipped bit or a NaN written over its
// tensor bytes used to load without a word. Its checksum fails: the error names the file and
// offers the newest intact checkpoint; training.fallback_checkpoint=true takes that one with a
// warning, keeps the damaged one aside, and the run ends as an uninterrupted one.
func TestDamagedCheckpointRefused(t *testing.T) {
	a := t.TempDir()
	run(t, tinyConfig(t, a, "training.steps=6"))
	for _, nan := range []bool{false, true} {
		b := t.TempDir()
		run(t, tinyConfig(t, b))
		damage(t, filepath.Join(b, "checkpoints/global_step_4/model.safetensors"), nan)
		resume := tinyConfig(t, b, "training.steps=6", "training.find_last_checkpoint=true")
		_, err := Run(context.Background(), resume, &bytes.Buffer{}, &bytes.Buffer{})
		require.Error(t, err)
		for _, want := range []string{filepath.Join(b, "checkpoints/global_step_4/model.safetensors"), "SHA-256",
			filepath.Join(b, "checkpoints/global_step_2"), "training.fallback_checkpoint=true"} {
			assert.Contains(t, err.Error(), want)
		}
		// As training.load_checkpoint_path: refused too, with the intact one beside it.
		_, err = Run(context.Background(), tinyConfig(t, t.TempDir(), "training.load_checkpoint_path="+filepath.Join(b, "checkpoints/global_step_4")), &bytes.Buffer{}, &bytes.Buffer{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "model.safetensors")
		assert.Contains(t, err.Error(), "training.load_checkpoint_path="+filepath.Join(b, "checkpoints/global_step_2"))

		var errb bytes.Buffer
		_, err = Run(context.Background(), tinyConfig(t, b, "training.steps=6", "training.find_last_checkpoint=true", "training.fallback_checkpoint=true"), &bytes.Buffer{}, &errb)
		require.NoError(t, err, errb.String())
		assert.Contains(t, errb.String(), "warning: checkpoint "+filepath.Join(b, "checkpoints/global_step_4")+" is damaged")
		_, err = os.Stat(filepath.Join(b, "checkpoints/global_step_4.damaged/model.safetensors"))
		assert.NoError(t, err, "the damaged checkpoint is kept aside")
		sameRun(t, a, b, 6)
	}
}

// TestUnverifiedDamageRefused: without its manifest (a checkpoint of an older trainer) a
// checkpoint loads with a warning, and NaN over its tensor bytes is still refused by name.
func TestUnverifiedDamageRefused(t *testing.T) {
	b := t.TempDir()
	run(t, tinyConfig(t, b, "training.steps=2"))
	require.NoError(t, os.Remove(filepath.Join(b, "checkpoints/global_step_2", ckptManifest)))
	var errb bytes.Buffer
	_, err := Run(context.Background(), tinyConfig(t, b, "training.steps=3", "training.find_last_checkpoint=true"), &bytes.Buffer{}, &errb)
	require.NoError(t, err)
	assert.Contains(t, errb.String(), "has no checksums.sha256")

	require.NoError(t, os.Remove(filepath.Join(b, "checkpoints/global_step_3", ckptManifest)))
	damage(t, filepath.Join(b, "checkpoints/global_step_3/optimizer.safetensors"), true)
	tr, err := NewTrainer(tinyConfig(t, b, "training.steps=3"))
	require.NoError(t, err)
	err = tr.Load(filepath.Join(b, "checkpoints/global_step_3"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "optimizer.safetensors")
	assert.Contains(t, err.Error(), "NaN")
}

// TestStaleFilesCleanedAtStart: what a kill leaves (a checkpoint being written, a tracker and
// other atomic writes' temporary files, a checkpoint moved aside for its replacement) is cleaned
// or put back by the next start, which resumes as if nothing had happened.
func TestStaleFilesCleanedAtStart(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	run(t, tinyConfig(t, a))
	run(t, tinyConfig(t, b, "training.steps=2"))
	ckpts := filepath.Join(b, "checkpoints")
	stale := []string{filepath.Join(ckpts, ".tmp-global_step_3-123"), filepath.Join(ckpts, ".tmp-checkpoint_tracker.json-9"),
		filepath.Join(b, ".tmp-summary.json-77"), filepath.Join(b, "rollouts", ".tmp-step000003_0.png-5")}
	require.NoError(t, os.MkdirAll(stale[0], 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(stale[0], "model.safetensors"), []byte("partial"), 0o644))
	for _, f := range stale[1:] {
		require.NoError(t, os.WriteFile(f, []byte("partial"), 0o644))
	}
	// A kill between moving global_step_2 aside and putting its replacement in place.
	require.NoError(t, os.Rename(filepath.Join(ckpts, "global_step_2"), filepath.Join(ckpts, "global_step_2.old")))
	var errb bytes.Buffer
	_, err := Run(context.Background(), tinyConfig(t, b, "training.find_last_checkpoint=true"), &bytes.Buffer{}, &errb)
	require.NoError(t, err, errb.String())
	for _, f := range stale {
		_, err := os.Stat(f)
		assert.True(t, os.IsNotExist(err), "%s is still there", f)
		assert.Contains(t, errb.String(), "removed "+f)
	}
	assert.Contains(t, errb.String(), "restored "+filepath.Join(ckpts, "global_step_2"))
	assert.Contains(t, errb.String(), "resuming from "+filepath.Join(ckpts, "global_step_2"))
	sameRun(t, a, b, 4)
}

// TestResumeRewritesLogsExactly: a kill after step 4's outputs but before its checkpoint
// resumes from step 2; metrics.jsonl, rollouts.md and attention_diagnostics.md are cut at the
// resume point and written again as in an uninterrupted run (rollouts.md used to lose its
// blank lines there).
func TestResumeRewritesLogsExactly(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	extra := []string{"training.rollout_log_freq=1", "worker.reward.mdi_weight=1"}
	run(t, tinyConfig(t, a, extra...))
	run(t, tinyConfig(t, b, extra...))
	require.NoError(t, os.RemoveAll(filepath.Join(b, "checkpoints/global_step_4")))
	require.NoError(t, os.Remove(filepath.Join(b, "checkpoints", ckptTracker)))
	run(t, tinyConfig(t, b, append(extra, "training.find_last_checkpoint=true")...))
	md, err := os.ReadFile(filepath.Join(b, "rollouts.md"))
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(md), "## step 3\n"))
	sameRun(t, a, b, 4)
}

// TestDamagedWarmStartCheckpoint: a damaged warm-start checkpoint is refused by name; with
// training.fallback_checkpoint=true the warm start starts again and the run ends as an
// uninterrupted one.
func TestDamagedWarmStartCheckpoint(t *testing.T) {
	extra := []string{"training.sft_steps=8", "training.sft_save_freq=3", "training.steps=2", "training.find_last_checkpoint=true"}
	a, b := t.TempDir(), t.TempDir()
	run(t, tinyConfig(t, a, extra...))
	testBeforeCommit = func(name string) error {
		if name == "global_step_0" {
			return os.ErrDeadlineExceeded // any failure: the run stops inside its first checkpoint
		}
		return nil
	}
	_, err := Run(context.Background(), tinyConfig(t, b, extra...), &bytes.Buffer{}, &bytes.Buffer{})
	testBeforeCommit = nil
	require.Error(t, err)
	warm := filepath.Join(b, "checkpoints", "sft_step_6")
	damage(t, filepath.Join(warm, "model.safetensors"), false)
	_, err = Run(context.Background(), tinyConfig(t, b, extra...), &bytes.Buffer{}, &bytes.Buffer{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(warm, "model.safetensors"))
	assert.Contains(t, err.Error(), "training.fallback_checkpoint=true")
	var errb bytes.Buffer
	_, err = Run(context.Background(), tinyConfig(t, b, append(extra, "training.fallback_checkpoint=true")...), &bytes.Buffer{}, &errb)
	require.NoError(t, err, errb.String())
	assert.Contains(t, errb.String(), "the warm start would start again from step 0")
	sameRun(t, a, b, 2)
}
