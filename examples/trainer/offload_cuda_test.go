//go:build cuda

package main

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"

	"github.com/stretchr/testify/require"
)

// TestDeviceOffloadSameRun: with the optimizer offloaded (offload.offload_optimizer; its other
// names are TestOffloadKeys') a device run writes the non-offloaded device run's checkpoints bit for bit
// (weights and AdamW moments) and its metrics within dpTolerance (1e-12 relative): the device
// sums the micro-batches either way, and the host's AdamW is the device kernel's arithmetic
// (vlm's TestCUDAKernels holds them bitwise equal). Only the gradient norm is summed in another
// order (the device per parameter in blocks, the host in index order), so actor/grad_norm may
// differ in its last float64 bits; the float32 clip factor did not in these steps (the
// weights would show it). A run interrupted after 2 steps and resumed equals it too: the
// checkpoint's moments are the host's.
func TestDeviceOffloadSameRun(t *testing.T) {
	base := []string{"worker.actor.device=cuda", "worker.actor.use_kl_loss=true", "worker.actor.max_grad_norm=0.05"}
	ref, off, resumed := t.TempDir(), t.TempDir(), t.TempDir()
	a := runLines(t, tinyConfig(t, ref, base...))
	b := runLines(t, tinyConfig(t, off, append(base, "worker.actor.offload.offload_optimizer=true")...))
	run(t, tinyConfig(t, resumed, append(base, "worker.actor.offload.offload_optimizer=true", "training.steps=2")...))
	d := runLines(t, tinyConfig(t, resumed, append(base, "worker.actor.offload.offload_optimizer=true", "training.find_last_checkpoint=true")...))
	diffs, worst := compareLines(a, b)
	t.Logf("largest relative metric difference %.2g", worst)
	require.Empty(t, diffs)
	diffs, _ = compareLines(b, d[len(d)-len(b):])
	require.Empty(t, diffs, "resumed")
	for _, dir := range []string{off, resumed} {
		for _, step := range []int{2, 4} {
			require.Equal(t, modelWeights(t, ref, step), modelWeights(t, dir, step), "step %d weights", step)
			require.Equal(t, optimizerMoments(t, ref, step), optimizerMoments(t, dir, step), "step %d moments", step)
		}
	}
}

// TestDeviceOffloadSharded: fsdp.sharding_strategy=SHARD_GRAD_OP with the offloaded optimizer on
// two ranks on two devices (the ZeRO-2 shard's moments and the ordered reduce-scatter on the
// host) writes one device's non-offloaded run: weights bit for bit, metrics within dpTolerance.
// Needs two devices (CUEMU_DEVICES=2 under scripts/cuda-emu).
func TestDeviceOffloadSharded(t *testing.T) {
	if b, err := cuda.New(1); err != nil {
		t.Skipf("SKIP: needs a second CUDA device: %v", err)
	} else {
		_ = b.Close()
	}
	one, two := t.TempDir(), t.TempDir()
	a := runLines(t, dpConfig(t, one, 1, "worker.actor.device=cuda"))
	b := runLines(t, dpConfig(t, two, 2, "worker.actor.device=cuda", "worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP",
		"worker.actor.offload.offload_optimizer=true"))
	diffs, worst := compareLines(a, b)
	t.Logf("largest relative metric difference %.2g", worst)
	require.Empty(t, diffs)
	require.Equal(t, modelWeights(t, one, 3), modelWeights(t, two, 3))
	require.Equal(t, optimizerMoments(t, one, 3), optimizerMoments(t, two, 3))
}

// TestDeviceOffloadMemory: the offloaded optimizer holds 8 bytes per parameter (AdamW's two
// float32 moments) less on the device after an RL step, and its step's peak is as much lower.
// The model is the tests' tiny one; MTRL_OFFLOAD_MODEL=dim=64,layers=2,heads=4,mlp_dim=128 (the
// default model) sets worker.actor.model keys. The numbers are logged (docs/2026-11-memory.md).
func TestDeviceOffloadMemory(t *testing.T) {
	var model []string
	if s := os.Getenv("MTRL_OFFLOAD_MODEL"); s != "" {
		for _, kv := range strings.Split(s, ",") {
			model = append(model, "worker.actor.model."+kv)
		}
	}
	measure := func(extra ...string) (params int, resident, peak int64) {
		cfg := tinyConfig(t, t.TempDir(), append(append([]string{"worker.actor.device=cuda", "worker.actor.use_kl_loss=true"}, model...), extra...)...)
		tr, err := NewTrainer(cfg)
		require.NoError(t, err)
		defer tr.Close()
		_, err = tr.WarmStart(context.Background(), NewProgress(&bytes.Buffer{}, "", 0, false))
		require.NoError(t, err)
		require.NoError(t, tr.FreezeReference())
		b := tr.dev.backend().(*cuda.Backend)
		_, err = tr.Step() // the first step allocates what every step keeps
		require.NoError(t, err)
		settle()
		b.ResetPeak()
		_, err = tr.Step()
		require.NoError(t, err)
		settle()
		resident, _ = b.Allocated()
		return tr.model.NumParams(), resident, b.Peak()
	}
	p, on, onPeak := measure("worker.actor.offload.offload_optimizer=true")
	_, off, offPeak := measure()
	t.Logf("P = %d parameters; device bytes after an RL step: %d without offload, %d with (-%d); step peak %d and %d (-%d)",
		p, off, on, off-on, offPeak, onPeak, offPeak-onPeak)
	require.Equal(t, int64(8*p), off-on, "resident bytes saved")
	require.GreaterOrEqual(t, offPeak-onPeak, int64(8*p), "peak bytes saved")
}

// settle runs the collector until the finalizers of dropped device tensors have released them.
func settle() {
	for range 3 {
		runtime.GC()
		runtime.Gosched()
	}
}
