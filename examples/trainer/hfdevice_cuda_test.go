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
//     device-vs-CPU bound of TestDeviceModelPathMatchesCPU; through collective.HostTensors
//     (what a binary without -tags nccl uses) the bucketed run's weights are NCCL's bit for bit.
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
		lora := []string{"worker.actor.model.lora_rank=4", "worker.actor.model.lora_alpha=8", "training.steps=2", "training.save_freq=2"}
		one, two, bucketed, cpu := dir("one"), dir("two"), dir("bucketed"), dir("cpu")
		a := hfLines(t, over(one, 1, append(lora, dev)...))
		b := hfLines(t, over(two, 2, append(lora, dev)...))
		diffs, _ := compareLines(a, b)
		require.Empty(t, diffs)
		require.Equal(t, modelWeights(t, one, 2), modelWeights(t, two, 2), "ordered: 2 devices vs 1")
		// Two micro-batches of one row per rank: NCCL adds (a₀+a₁)+(b₀+b₁), one device a₀+a₁+b₀+b₁.
		hfLines(t, over(bucketed, 2, append(lora, dev, "worker.actor.grad_reduce=bucketed", "worker.actor.micro_batch_size_per_device_for_update=1",
			"worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP", "worker.actor.grad_bucket_mb=0.01")...))
		wd := weightDiff(modelWeights(t, one, 2), modelWeights(t, bucketed, 2))
		t.Logf("bucketed ZeRO-2 (2 devices) vs ordered (1): weights %.2g apart (relative L2)", wd)
		require.Less(t, wd, 1e-5)
		hfLines(t, over(cpu, 2, lora...))
		closeRuns(t, cpu, two, 1e-4)
		if haveNCCL { // a binary without nccl reduces through the host: the same bits
			testHostCollectives = true
			host := dir("host")
			hfLines(t, over(host, 2, append(lora, dev, "worker.actor.grad_reduce=bucketed", "worker.actor.micro_batch_size_per_device_for_update=1",
				"worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP", "worker.actor.grad_bucket_mb=0.01")...))
			testHostCollectives = false
			require.Equal(t, modelWeights(t, bucketed, 2), modelWeights(t, host, 2), "bucketed ZeRO-2: NCCL vs HostTensors")
			mu.Lock()
			require.Equal(t, 2, kinds["*collective.HostTensors"], "collectives (the host run's 2 ranks): %v", kinds)
			require.Positive(t, kinds["*cuda.NCCL"], "collectives: %v", kinds)
			mu.Unlock()
		}
	})

	// With 4 devices (CUEMU_DEVICES=4; CI runs 2): 4 ranks ordered equal one device bit for bit,
	// and the bytes each rank receives per step in each mode at 2 and 4 ranks are the formulas
	// of docs/data-parallel.md, with P the trained values and one bucket (c = ⌈P/N⌉):
	// ordered (N−1)·k·4P (k micro-batches per rank), bucketed all-reduce 2(N−1)·4c, ZeRO-2's
	// reduce-scatter and parameter all-gather (N−1)·4c each, ordered ZeRO-2 both.
	t.Run("four", func(t *testing.T) {
		if b, err := cuda.New(3); err != nil {
			t.Skipf("SKIP: needs 4 CUDA devices: %v", err)
		} else {
			_ = b.Close()
		}
		four := []string{"worker.actor.model.lora_rank=4", "worker.actor.model.lora_alpha=8", "dataset.rollout_batch_size=4",
			"worker.actor.global_batch_size=4", "training.steps=1", dev}
		one := dir("one")
		a := hfLines(t, over(one, 1, four...))
		var p int64
		for _, w := range modelWeights(t, one, 1) {
			p += int64(len(w.Data))
		}
		for _, n := range []int64{2, 4} {
			c := (p + n - 1) / n
			for _, m := range []struct {
				name  string
				set   []string
				bytes int64
			}{
				{"ordered", nil, (n - 1) * (4 / n) * 4 * p},
				{"ordered ZeRO-2", []string{"worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP"}, (n-1)*(4/n)*4*p + (n-1)*4*c},
				{"bucketed", []string{"worker.actor.grad_reduce=bucketed"}, 2 * (n - 1) * 4 * c},
				{"bucketed ZeRO-2", []string{"worker.actor.grad_reduce=bucketed", "worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP"}, 2 * (n - 1) * 4 * c},
			} {
				r := dir("r")
				b := hfLines(t, over(r, int(n), append(four, m.set...)...))
				got := int64(*b[0].Metrics["perf/allreduce_bytes"])
				t.Logf("N = %d, %s: %d bytes received per rank per step (P = %d)", n, m.name, got, p)
				require.Equal(t, m.bytes, got, "N = %d, %s", n, m.name)
				if m.set == nil || m.name == "ordered ZeRO-2" {
					diffs, _ := compareLines(a, b)
					require.Empty(t, diffs, "N = %d, %s", n, m.name)
					require.Equal(t, modelWeights(t, one, 1), modelWeights(t, r, 1), "N = %d, %s", n, m.name)
				}
			}
		}
	})
	t.Logf("tensor collectives bootstrapped: %v", kinds)
}
