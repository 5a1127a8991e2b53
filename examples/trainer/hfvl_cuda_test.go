//go:build cuda

package main

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/stretchr/testify/require"
)

// TestDeviceVLModelPathMatchesCPU: a model_path RL step of the tiny Qwen2.5-VL (window
// attention, a full-attention block) with LoRA on both the language model and the vision
// tower (dropout 0.1: the masks are drawn on the host), the perturbed pass of the perception
// score, the KL loss against the base and validation before and after, with the model on the
// device (worker.actor.device=cuda: qwenvl.LoadDirOn, DeviceTraining) logs the CPU run's
// metrics within 1e-4·(1 + |cpu|) (observed: 1.7e-6) and exports a merged model within 1e-7 of
// the CPU run's, tower included. One step: after an update the two runs' adapters differ in
// the last bits (AdamW's g/(|g| + eps) of gradients that cancel to rounding noise), and
// sampling among the 151,936 nearly equally likely tokens of a random model flips a token for
// differences of that size (at step 2, a quarter of the rows at lr 1e-2 and at 1e-4 alike);
// lr 1e-4 keeps the updated models close enough for the greedy validation after the step.
// The resume test below runs further steps on the device.
func TestDeviceVLModelPathMatchesCPU(t *testing.T) {
	model := tinyVL(t, "qwen2.5-vl.json")
	cpu, dev := filepath.Join(t.TempDir(), "cpu"), filepath.Join(t.TempDir(), "dev")
	extra := []string{"worker.actor.model.lora_rank=4", "worker.actor.model.lora_alpha=8", "worker.actor.model.lora_dropout=0.1",
		"dataset.val_size=2", "worker.actor.use_kl_loss=true", "worker.actor.optim.lr=1e-4", "training.steps=1"}
	for _, r := range []struct {
		dir string
		set []string
	}{{cpu, extra}, {dev, append(extra, "worker.actor.device=cuda")}} {
		cfg, err := LoadConfig("", vlOverrides(model, r.dir, r.set...))
		require.NoError(t, err)
		run(t, cfg)
	}
	closeRuns(t, cpu, dev, 1e-4)
	read := func(path string) map[string][]float32 {
		ts, err := hfmodel.ReadSafetensors(path)
		require.NoError(t, err)
		out := map[string][]float32{}
		for _, x := range ts {
			out[x.Name] = x.Float32s()
		}
		return out
	}
	base := read(filepath.Join(model, "model.safetensors"))
	want, got := read(filepath.Join(cpu, hfExportDir, "model.safetensors")), read(filepath.Join(dev, hfExportDir, "model.safetensors"))
	for _, name := range []string{"visual.blocks.0.attn.qkv.weight", "visual.merger.mlp.2.weight", "model.layers.0.self_attn.q_proj.weight"} {
		require.Equal(t, len(want[name]), len(got[name]), name)
		moved := 0.0
		for i := range got[name] {
			require.InDelta(t, want[name][i], got[name][i], 1e-7, "%s[%d]", name, i)
			moved = max(moved, math.Abs(float64(got[name][i]-base[name][i])))
		}
		require.Greater(t, moved, 1e-6, "%s did not move", name)
	}
}

// TestDeviceVLModelPathResume: on the device, a Qwen2-VL LoRA run (the tower's adapters and
// dropout included, the perturbed pass on) of 2 steps in one go and 1 step + a resumed 1 give
// identical metrics, bit for bit: the checkpoint downloads the device's adapters and AdamW
// moments, the resumed run uploads them, and the device kernels are deterministic.
func TestDeviceVLModelPathResume(t *testing.T) {
	model := tinyVL(t, "qwen2-vl.json")
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	set := []string{"worker.actor.device=cuda", "worker.actor.model.lora_rank=4", "worker.actor.model.lora_alpha=8", "worker.actor.model.lora_dropout=0.1", "dataset.max_response_length=4"}
	for _, r := range []struct {
		dir string
		set []string
	}{{a, set}, {b, append(set, "training.steps=1")}, {b, append(set, "training.find_last_checkpoint=true")}} {
		cfg, err := LoadConfig("", vlOverrides(model, r.dir, r.set...))
		require.NoError(t, err)
		run(t, cfg)
	}
	sameRun(t, a, b, 2)
}

// TestDeviceVLModelPathDataParallel: the tiny Qwen2-VL with LoRA on the language model and the
// tower (the perturbed pass on) on 2 emulated devices (scripts/cuda-emu: CUEMU_DEVICES=2), the
// gradients reduced on device buffers by the text model's reduction (hflm.DeviceReduce through
// NCCL). A run of one step on one device resumed on 2 (ordered: each rank one micro-batch of
// two rows, one device two) ends as the uninterrupted one-device run, bit for bit in metrics,
// adapters and AdamW moments: the 2 ranks upload the one-device checkpoint, reduce in one
// device's order and write a checkpoint one device would. Bucketed ZeRO-2 in small buckets,
// two one-row micro-batches per rank, ends within 1e-5 relative L2 of one device's weights
// (TestDeviceModelPathDataParallel's bound). Six RL steps in all: the LM head over the real
// 151,936-token vocabulary dominates the emulator's time.
func TestDeviceVLModelPathDataParallel(t *testing.T) {
	if b, err := cuda.New(1); err != nil {
		t.Skipf("SKIP: needs a second CUDA device: %v", err)
	} else {
		_ = b.Close()
	}
	model := tinyVL(t, "qwen2-vl.json")
	dir := func(name string) string { return filepath.Join(t.TempDir(), name) }
	over := func(run string, ranks int, extra ...string) []string {
		return vlOverrides(model, run, append([]string{"worker.actor.device=cuda", "worker.actor.model.lora_rank=4", "worker.actor.model.lora_alpha=8",
			"dataset.max_response_length=4", "training.save_freq=1", "worker.actor.micro_batch_size_per_device_for_update=2",
			"worker.actor.micro_batch_size_per_device_for_experience=2", fmt.Sprintf("training.n_gpus_per_node=%d", ranks)}, extra...)...)
	}
	one, re, bucketed := dir("one"), dir("resumed"), dir("bucketed")
	a := hfLines(t, over(one, 1))
	hfLines(t, over(re, 1, "training.steps=1"))
	c := hfLines(t, over(re, 2, "training.find_last_checkpoint=true"))
	diffs, _ := compareLines(a, c)
	require.Empty(t, diffs, "1 → 2 ranks")
	sameState(t, one, re, 2, "1 → 2 ranks")
	// Two micro-batches of one row per rank: NCCL adds (a₀+a₁)+(b₀+b₁), one device a₀+a₁+b₀+b₁.
	hfLines(t, over(bucketed, 2, "worker.actor.grad_reduce=bucketed", "worker.actor.micro_batch_size_per_device_for_update=1",
		"worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP", "worker.actor.grad_bucket_mb=0.01"))
	wd := weightDiff(modelWeights(t, one, 2), modelWeights(t, bucketed, 2))
	t.Logf("bucketed ZeRO-2 (2 devices) vs ordered (1): weights %.2g apart (relative L2)", wd)
	require.Less(t, wd, 1e-5)
}

// TestDeviceVLModelPathOffload: with the optimizer offloaded (offload.offload_optimizer) a
// Qwen2-VL LoRA run on the device (the tower's adapters and dropout included, the perturbed
// pass on, clipping active) writes the non-offloaded device run's checkpoints bit for bit
// (adapters and AdamW moments, steps 1 and 2) and its metrics within dpTolerance: the text
// model's offload path (offloadedTraining), whose host AdamW is the device kernel's arithmetic;
// only actor/grad_norm is summed in another order (TestDeviceModelPathOffload).
func TestDeviceVLModelPathOffload(t *testing.T) {
	model := tinyVL(t, "qwen2-vl.json")
	ref, off := filepath.Join(t.TempDir(), "ref"), filepath.Join(t.TempDir(), "off")
	set := []string{"worker.actor.device=cuda", "worker.actor.model.lora_rank=4", "worker.actor.model.lora_alpha=8", "worker.actor.model.lora_dropout=0.1",
		"worker.actor.max_grad_norm=0.05", "dataset.max_response_length=4", "training.save_freq=1"}
	a := hfLines(t, vlOverrides(model, ref, set...))
	b := hfLines(t, vlOverrides(model, off, append(set, "worker.actor.offload.offload_optimizer=true")...))
	diffs, worst := compareLines(a, b)
	t.Logf("largest relative metric difference %.2g", worst)
	require.Empty(t, diffs)
	for _, step := range []int{1, 2} {
		sameState(t, ref, off, step, "offloaded")
	}
	// and the optimizer really is the offloaded one (equal results alone would not show it)
	s, err := openHFVL(mustConfig(t, vlOverrides(model, filepath.Join(t.TempDir(), "probe"), append(set, "worker.actor.offload.offload_optimizer=true")...)))
	require.NoError(t, err)
	defer func() { _ = s.close() }()
	opt, _, _, err := s.training(0)
	require.NoError(t, err)
	require.IsType(t, hfOffloaded{}, opt, "offload_optimizer=true on the device")
}
