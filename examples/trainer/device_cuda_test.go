//go:build cuda

package main

import (
	"bytes"
	"context"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/examples/hfmodel"

	"github.com/stretchr/testify/require"
)

// TestDeviceRunMatchesCPU: the same short run (3 SFT steps, then 3 VPPO steps with validation)
// with the policy's forward and backward on the device (worker.actor.device=cuda; under
// scripts/cuda-emu, the emulated one) logs the CPU run's metrics: every non-timing metric of
// every step within 1e-4·(1 + |cpu|). The device model differs from the host's in the last
// bits of every GEMM (TestCUDAModelGradients: logits within 1e-4, gradients within 1e-3 of
// float64) and AdamW normalises gradients, so weights drift apart by about lr·1e-3 per step;
// the sampled tokens stay the same unless a uniform falls within that of a boundary, which
// this seed does not hit (a flipped token would show as a large, not a small, difference).
// Observed on the emulator: 1.3e-6 at most.
func TestDeviceRunMatchesCPU(t *testing.T) {
	cpu, dev := t.TempDir(), t.TempDir()
	extra := []string{"training.steps=3", "training.save_freq=0", "training.sft_steps=3"}
	run(t, tinyConfig(t, cpu, extra...))
	run(t, tinyConfig(t, dev, append(extra, "worker.actor.device=cuda")...))
	closeRuns(t, cpu, dev, 1e-4)
}

// closeRuns requires the metrics of the device run in dev to be the CPU run's in cpu: every
// non-timing metric of every step within tol·(1 + |cpu|). It reports each metric out of bounds.
func closeRuns(t *testing.T, cpu, dev string, tol float64) {
	t.Helper()
	la, err := ReadMetrics(filepath.Join(cpu, "metrics.jsonl"))
	require.NoError(t, err)
	lb, err := ReadMetrics(filepath.Join(dev, "metrics.jsonl"))
	require.NoError(t, err)
	require.Equal(t, len(la), len(lb))
	worst, worstKey := 0.0, ""
	for i := range la {
		for _, k := range slices.Sorted(maps.Keys(la[i].Metrics)) {
			va := la[i].Metrics[k]
			if timingKey(k) {
				continue
			}
			vb, ok := lb[i].Metrics[k]
			require.True(t, ok, "step %d: the device run lacks %s", la[i].Step, k)
			if va == nil || vb == nil {
				require.Equal(t, va == nil, vb == nil, "step %d %s", la[i].Step, k)
				continue
			}
			d := math.Abs(*va-*vb) / (1 + math.Abs(*va))
			if math.IsNaN(*va) && math.IsNaN(*vb) {
				d = 0
			}
			if d > worst {
				worst, worstKey = d, k
			}
			if d > tol { // every metric out of bounds is reported: which ones tells a cause
				t.Errorf("step %d %s: cpu %v, device %v (relative difference %.3g > %g)", la[i].Step, k, *va, *vb, d, tol)
			}
		}
	}
	t.Logf("%d metric lines; largest relative difference %.3g (%s)", len(la), worst, worstKey)
}

// TestDeviceModelPathMatchesCPU: a model_path run (the tiny random Qwen2 with the real Qwen2.5
// tokenizer, 2 RL steps with validation and the KL loss against the frozen base) with the
// model on the device (worker.actor.device=cuda: hflm.LoadOn, DeviceTraining) logs the CPU
// run's metrics within 1e-4·(1 + |cpu|), with LoRA (dropout included: its masks are drawn on
// the host) and in full fine-tuning (the reference a second load on the device), and exports
// an adapter and a merged model within 1e-4 of the CPU run's. The sampled tokens are the same
// unless a uniform falls within float32 rounding of a boundary, which these seeds do not hit.
// Full fine-tuning runs at lr 1e-4: AdamW moves a weight whose gradient is a sum that cancels
// to within float32 rounding of zero (embedding rows, ~1e-7 here, differing in the second
// digit between any two summation orders) by up to lr either way, which at lr 1e-2 moves the
// second step's KL by 30% between the CPU and the device (and between two CPU kernels alike);
// the device's AdamW on identical gradients is checked in examples/hflm
// (TestCUDAFullTraining).
func TestDeviceModelPathMatchesCPU(t *testing.T) {
	model := tinyHF(t)
	for _, c := range []struct{ name, set string }{
		{"lora", "worker.actor.model.lora_rank=4 worker.actor.model.lora_alpha=8 worker.actor.model.lora_dropout=0.1"},
		{"full", "worker.actor.model.lora_rank=0 worker.actor.optim.lr=1e-4"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cpu, dev := filepath.Join(t.TempDir(), "cpu"), filepath.Join(t.TempDir(), "dev")
			extra := append(strings.Fields(c.set), "dataset.val_size=2", "worker.actor.use_kl_loss=true")
			for _, r := range []struct {
				dir string
				set []string
			}{{cpu, extra}, {dev, append(extra, "worker.actor.device=cuda")}} {
				cfg, err := LoadConfig("", hfOverrides(model, r.dir, r.set...))
				require.NoError(t, err)
				run(t, cfg)
			}
			closeRuns(t, cpu, dev, 1e-4)
			a, err := hfmodel.OpenWeights(filepath.Join(cpu, hfExportDir))
			require.NoError(t, err)
			defer a.Close()
			b, err := hfmodel.OpenWeights(filepath.Join(dev, hfExportDir))
			require.NoError(t, err)
			defer b.Close()
			for _, name := range []string{"model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight", "model.embed_tokens.weight"} {
				wa, wb := a.Tensor(name).Float32s(), b.Tensor(name).Float32s()
				require.Equal(t, len(wa), len(wb))
				for i := range wa {
					require.InDelta(t, wa[i], wb[i], 1e-4, "%s[%d]", name, i)
				}
			}
		})
	}
}

// TestDeviceModelPathResume: on the device, a model_path LoRA run of 2 steps in one go and 1
// step + a resumed 1 give identical metrics, bit for bit: the checkpoint downloads the
// device's adapters and AdamW moments, the resumed run uploads them, and the device kernels
// are deterministic.
func TestDeviceModelPathResume(t *testing.T) {
	model := tinyHF(t)
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	set := []string{"worker.actor.device=cuda", "worker.actor.model.lora_rank=4", "worker.actor.model.lora_alpha=8", "worker.actor.model.lora_dropout=0.1"}
	for _, r := range []struct {
		dir string
		set []string
	}{{a, set}, {b, append(set, "training.steps=1")}, {b, append(set, "training.find_last_checkpoint=true")}} {
		cfg, err := LoadConfig("", hfOverrides(model, r.dir, r.set...))
		require.NoError(t, err)
		run(t, cfg)
	}
	sameRun(t, a, b, 2)
}

// TestDeviceResumeEquivalence: on the device, 4 steps in one go and 2 steps + a resumed 2 give
// identical metrics and final weights, bit for bit: a checkpoint downloads the device's
// weights and AdamW moments, the resumed run uploads them, and the device kernels are
// deterministic (fixed-order sums, no atomics).
func TestDeviceResumeEquivalence(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	const dev = "worker.actor.device=cuda"
	run(t, tinyConfig(t, a, dev, "worker.actor.use_kl_loss=true"))
	run(t, tinyConfig(t, b, dev, "worker.actor.use_kl_loss=true", "training.steps=2"))
	run(t, tinyConfig(t, b, dev, "worker.actor.use_kl_loss=true", "training.find_last_checkpoint=true"))
	sameRun(t, a, b, 4)
}

// TestDeviceStepTransfers: after the warm start, an RL step on the device moves no weights
// either way: the policy's and the reference's stay resident, the rollout samples there and
// the optimizer updates them in place there.
func TestDeviceStepTransfers(t *testing.T) {
	cfg := tinyConfig(t, t.TempDir(), "worker.actor.device=cuda", "worker.actor.use_kl_loss=true")
	tr, err := NewTrainer(cfg)
	require.NoError(t, err)
	defer tr.Close()
	_, err = tr.WarmStart(context.Background(), NewProgress(&bytes.Buffer{}, "", 0, false))
	require.NoError(t, err)
	require.NoError(t, tr.FreezeReference())
	up0, down0 := tr.model.Transfers()
	rup0, rdown0 := tr.ref.Transfers()
	const steps = 2
	for range steps {
		_, err := tr.Step()
		require.NoError(t, err)
	}
	up, down := tr.model.Transfers()
	rup, rdown := tr.ref.Transfers()
	t.Logf("policy: %d uploads, %d downloads of its weights in %d steps; reference: %d, %d", up-up0, down-down0, steps, rup-rup0, rdown-rdown0)
	require.Equal(t, up0, up, "weight uploads during RL steps")
	require.Equal(t, rup0, rup, "reference uploads during RL steps")
	require.Equal(t, rdown0, rdown, "reference downloads during RL steps")
	require.Equal(t, down0, down, "weight downloads during RL steps (the rollout samples on the device too)")
}

// TestDeviceDataParallel: two ranks (training.n_gpus_per_node=2 worker.actor.device=cuda), rank
// r on device ordinal r, log one device's metrics and end with bit-identical weights: each
// micro-batch's gradient comes down, the host adds them in one device's order and uploads the
// sum, and every replica takes the same AdamW step on its device. Needs two devices
// (CUEMU_DEVICES=2 under scripts/cuda-emu).
func TestDeviceDataParallel(t *testing.T) {
	if b, err := cuda.New(1); err != nil {
		t.Skipf("SKIP: needs a second CUDA device: %v", err)
	} else {
		_ = b.Close()
	}
	var mu sync.Mutex
	opened := map[string]bool{}
	testDeviceOpened = func(_ int, name string) {
		mu.Lock()
		opened[name] = true
		mu.Unlock()
	}
	defer func() { testDeviceOpened = nil }()
	dir1, dir2 := t.TempDir(), t.TempDir()
	one := runLines(t, dpConfig(t, dir1, 1, "worker.actor.device=cuda"))
	two := runLines(t, dpConfig(t, dir2, 2, "worker.actor.device=cuda"))
	require.True(t, opened["cuda:0"] && opened["cuda:1"], "devices opened: %v", opened)
	diffs, worst := compareLines(one, two)
	wd := weightDiff(modelWeights(t, dir1, 3), modelWeights(t, dir2, 3))
	t.Logf("2 ranks on 2 devices: largest relative metric difference %.2g, weights %.2g", worst, wd)
	require.Empty(t, diffs)
	require.Zero(t, wd)
}

// TestDeviceStepTraffic: in an RL step on one device no per-token tensor comes to the host:
// every device-to-host copy (the backend counts them all: tensor downloads, host staging of
// ops without a device kernel, kernels' own small results) is smaller than one micro-batch's
// [rows, T] float32 tensor — what comes down is the sampled token ids of each decode step,
// reductions, per-row statistics and the gradient norm. The response length is long enough
// (T = 48, 2 rows per update micro-batch: 384 bytes) that per-row values stay below it.
// The claim is checked with and without trajectory shaping (on by default; tprl's
// ShapingKernel moves only [B] vectors), with the KL loss, and with the KL loss, the entropy
// penalty and both token filters (their union), and in the default configuration, whose MDI
// reward sums the attention maps on the device (vlm.Activations.ResponseAttention: eight
// float64 sums per row come down).
func TestDeviceStepTraffic(t *testing.T) {
	for _, c := range []struct {
		name  string
		extra []string
	}{
		{"resident", []string{"worker.reward.mdi_weight=0", "optimization.enable_trajectory_reweighting=false"}},
		{"shaping", []string{"worker.reward.mdi_weight=0"}},
		{"kl_loss", []string{"worker.reward.mdi_weight=0", "worker.actor.use_kl_loss=true"}},
		{"kl_entropy_union", []string{"worker.reward.mdi_weight=0", "worker.actor.use_kl_loss=true",
			"optimization.use_entropy_penalty=true", "optimization.entropy_penalty_coef=0.01", "optimization.enable_entropy_filtering=true"}},
		{"default", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := tinyConfig(t, t.TempDir(), append([]string{"worker.actor.device=cuda", "worker.rollout.max_response_length=48"}, c.extra...)...)
			tr, err := NewTrainer(cfg)
			require.NoError(t, err)
			defer tr.Close()
			_, err = tr.WarmStart(context.Background(), NewProgress(&bytes.Buffer{}, "", 0, false))
			require.NoError(t, err)
			require.NoError(t, tr.FreezeReference())
			b, ok := tr.dev.backend().(*cuda.Backend)
			require.True(t, ok, "the actor's backend is %T", tr.dev.backend())
			rows, T := cfg.Worker.Actor.MicroBatchSizePerDeviceForUpdate, tr.respLen
			perToken := int64(rows * T * 4)
			for step := range 2 {
				b.ResetTraffic()
				_, err := tr.Step()
				require.NoError(t, err)
				up, down := b.Traffic()
				t.Logf("step %d: down %d copies, %d bytes, largest %d; up %d copies, %d bytes, largest %d (a [%d, %d] float32 tensor: %d bytes)",
					step+1, down.Copies, down.Bytes, down.Largest, up.Copies, up.Bytes, up.Largest, rows, T, perToken)
				require.Less(t, down.Largest, perToken, "step %d: a device-to-host copy of a per-token tensor's size", step+1)
			}
		})
	}
}
