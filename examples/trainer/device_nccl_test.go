//go:build cuda && nccl

package main

import (
	"sync"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"

	"github.com/stretchr/testify/require"
)

// TestDeviceNCCL: two ranks on two devices (CUEMU_DEVICES=2 under scripts/cuda-emu) with
// grad_reduce=bucketed, where each device sums its micro-batches and NCCL all-reduces the sums
// between the devices in buckets (no host staging), against the host-gather run
// (grad_reduce=ordered: every micro-batch's gradient comes down, the host adds them in one
// device's order, the sum goes up). With one micro-batch per rank both add the same two
// gradients in rank order, so on the emulator's rank-order NCCL the runs are bit-identical:
// weights and metrics. With two per rank NCCL adds (a₀+a₁)+(b₀+b₁) where the host adds
// ((a₀+a₁)+b₀)+b₁: last-bit differences in the gradients, which AdamW's normalisation turns
// into weights within 1e-5 relative (L2) after 3 steps, the bound TestBucketedReduceRun gives
// the host's bucketed reduction (seen: 4.4e-6; metrics within 2.9e-5 relative).
func TestDeviceNCCL(t *testing.T) {
	if b, err := cuda.New(1); err != nil {
		t.Skipf("SKIP: needs a second CUDA device: %v", err)
	} else {
		_ = b.Close()
	}
	var mu sync.Mutex
	reductions, buckets := 0, 0
	testNCCLReduced = func(n int) {
		mu.Lock()
		reductions, buckets = reductions+1, max(buckets, n)
		mu.Unlock()
	}
	defer func() { testNCCLReduced = nil }()
	for _, c := range []struct {
		micro   string
		perRank int
	}{{"worker.actor.micro_batch_size_per_device_for_update=4", 1}, {"worker.actor.micro_batch_size_per_device_for_update=2", 2}} {
		host, dev := t.TempDir(), t.TempDir()
		reductions = 0
		a := runLines(t, dpConfig(t, host, 2, "worker.actor.device=cuda", c.micro))
		require.Zero(t, reductions, "the host-gather run used NCCL")
		b := runLines(t, dpConfig(t, dev, 2, "worker.actor.device=cuda", c.micro, "worker.actor.grad_reduce=bucketed", "worker.actor.grad_bucket_mb=0.01"))
		// 3 RL steps × 1 mini-batch × 2 ranks, each in several 2,621-value buckets.
		require.Equal(t, 6, reductions, "NCCL reductions")
		require.Greater(t, buckets, 1, "buckets per reduction")
		diffs, worst := compareLines(a, b)
		wd := weightDiff(modelWeights(t, host, 3), modelWeights(t, dev, 3))
		t.Logf("%d micro-batch(es) per rank: NCCL vs host gather: largest relative metric difference %.2g, weights (relative L2) %.2g; %d buckets per reduction", c.perRank, worst, wd, buckets)
		if c.perRank == 1 {
			require.Empty(t, diffs)
			require.Zero(t, wd)
		} else {
			require.Less(t, wd, 1e-5)
		}
	}
}
