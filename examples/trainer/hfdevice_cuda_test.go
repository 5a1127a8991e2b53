//go:build cuda

package main

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/tensor/collective"

	"github.com/stretchr/testify/require"
)

// TestDeviceModelPathDataParallel: a model_path run (the tiny random Qwen2 with a 1,056-token cut
// of the real tokenizer) on
// 2 emulated devices (scripts/cuda-emu: CUEMU_DEVICES=2), the gradients reduced on device
// buffers through NCCL (the emulator's libnccl stand-in; collective.HostTensors in a binary
// without -tags nccl), each micro-batch 2 rows: one per rank at 2 ranks, two on 1.
//
//   - full fine-tuning, ordered (the default): 2 ranks with ZeRO-2 write one device's metrics,
//     weights and AdamW moments bit for bit; a run that goes 2 ranks (NO_SHARD) → 1 (ZeRO-1)
//     → 2 (ZeRO-2), resuming each step from the previous world's checkpoint, ends as the
//     uninterrupted one-device run, bit for bit;
//   - LoRA: 2 ranks ordered (NO_SHARD) equal one device bit for bit; bucketed ZeRO-2 in small
//     buckets (reduce-scatter, partial norms), two one-row micro-batches per rank, ends within
//     1e-5 relative L2 of one device's weights, the bound the CPU's bucketed reduction has (TestBucketedReduceRun); and the
//     2-rank device run logs the 2-rank CPU run's metrics within 1e-4·(1 + |cpu|), the
//     device-vs-CPU bound of TestDeviceModelPathMatchesCPU.
func TestDeviceModelPathDataParallel(t *testing.T) {
	if b, err := cuda.New(1); err != nil {
		t.Skipf("SKIP: needs a second CUDA device: %v", err)
	} else {
		_ = b.Close()
	}
	var mu sync.Mutex
	kinds := map[string]int{}
	testDeviceCollectives = func(c collective.Tensors) {
		mu.Lock()
		kinds[fmt.Sprintf("%T", c)]++
		mu.Unlock()
	}
	defer func() { testDeviceCollectives = nil }()
	model := tinyHFSmallVocab(t)
	dir := func(name string) string { return filepath.Join(t.TempDir(), name) }
	dev := "worker.actor.device=cuda"
	over := func(run string, ranks int, extra ...string) []string {
		return hfDPOverrides(model, run, ranks, append([]string{"dataset.max_prompt_length=128"}, extra...)...)
	}

	t.Run("full", func(t *testing.T) {
		full := []string{dev, "worker.actor.model.lora_rank=0", "worker.actor.optim.lr=1e-4"}
		one, two := dir("one"), dir("two")
		a := hfLines(t, over(one, 1, full...))
		b := hfLines(t, over(two, 2, append(full, "worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP", "worker.actor.grad_bucket_mb=4")...))
		diffs, worst := compareLines(a, b)
		require.Empty(t, diffs)
		t.Logf("ordered ZeRO-2, 2 devices vs 1: largest relative metric difference %.2g", worst)
		sameState(t, one, two, 3, "2 devices (ZeRO-2) vs 1")
		for _, l := range b {
			t.Logf("step %d: %.0f bytes received per rank (perf/allreduce_bytes)", l.Step, *l.Metrics["perf/allreduce_bytes"])
		}
		// 2 → 1 → 2 ranks, one step each.
		re := dir("resumed")
		hfLines(t, over(re, 2, append(full, "training.steps=1")...))
		hfLines(t, over(re, 1, append(full, "training.steps=2", "training.find_last_checkpoint=true", "worker.actor.fsdp.sharding_strategy=optim")...))
		c := hfLines(t, over(re, 2, append(full, "training.find_last_checkpoint=true", "worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP", "worker.actor.grad_bucket_mb=4")...))
		diffs, _ = compareLines(a, c)
		require.Empty(t, diffs, "2 → 1 → 2 ranks")
		sameState(t, one, re, 3, "2 → 1 → 2 ranks")
	})

	t.Run("lora", func(t *testing.T) {
		lora := []string{"worker.actor.model.lora_rank=4", "worker.actor.model.lora_alpha=8", "training.save_freq=3"}
		one, two, bucketed, cpu := dir("one"), dir("two"), dir("bucketed"), dir("cpu")
		a := hfLines(t, over(one, 1, append(lora, dev)...))
		b := hfLines(t, over(two, 2, append(lora, dev)...))
		diffs, _ := compareLines(a, b)
		require.Empty(t, diffs)
		require.Equal(t, modelWeights(t, one, 3), modelWeights(t, two, 3), "ordered: 2 devices vs 1")
		// Two micro-batches of one row per rank: NCCL adds (a₀+a₁)+(b₀+b₁), one device a₀+a₁+b₀+b₁.
		hfLines(t, over(bucketed, 2, append(lora, dev, "worker.actor.grad_reduce=bucketed", "worker.actor.micro_batch_size_per_device_for_update=1",
			"worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP", "worker.actor.grad_bucket_mb=0.01")...))
		wd := weightDiff(modelWeights(t, one, 3), modelWeights(t, bucketed, 3))
		t.Logf("bucketed ZeRO-2 (2 devices) vs ordered (1): weights %.2g apart (relative L2)", wd)
		require.Less(t, wd, 1e-5)
		hfLines(t, over(cpu, 2, lora...))
		closeRuns(t, cpu, two, 1e-4)
	})
	if haveNCCL {
		require.Zero(t, kinds["*collective.HostTensors"], "collectives: %v", kinds)
		require.Positive(t, kinds["*cuda.NCCL"], "collectives: %v", kinds)
	}
	t.Logf("tensor collectives bootstrapped: %v", kinds)
}
