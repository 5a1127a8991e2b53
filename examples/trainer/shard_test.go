package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/tprl/loop"
)

// TestShardedOptimizerSameRun: with worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP (ZeRO-2,
// ordered reduction) and optim (ZeRO-1) 2 and 4 ranks write the metrics and the bit-identical
// weights of one rank with NO_SHARD; a run of 2 sharded ranks stopped after 2 steps, whose
// checkpoint holds each rank's moments in its own file, resumes on 4 sharded ranks and on 1
// unsharded rank exactly as the run that went on.
func TestShardedOptimizerSameRun(t *testing.T) {
	const zero2 = "worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP"
	dir1 := t.TempDir()
	one := runLines(t, dpConfig(t, dir1, 1))
	for _, c := range []struct {
		n     int
		shard string
	}{{2, zero2}, {4, zero2}, {2, "worker.actor.fsdp.sharding_strategy=optim"}, {4, "worker.actor.fsdp.sharding_strategy=optim"}} {
		n, dir := c.n, t.TempDir()
		lines := runLines(t, dpConfig(t, dir, n, c.shard))
		diffs, _ := compareLines(one, lines)
		require.Empty(t, diffs, "%d ranks, %s", n, c.shard)
		require.Zero(t, weightDiff(modelWeights(t, dir1, 3), modelWeights(t, dir, 3)), "%d ranks, %s", n, c.shard)
		require.FileExists(t, filepath.Join(dir, "checkpoints", stepDirName(3), shardFileName(n-1, n)))
		if n == 2 && c.shard == zero2 {
			// The sharded exchange is really taken: each rank holds 2 micro-batch gradients of
			// P values (its 4 rows of the mini-batch in micro-batches of 2). OrderedSum counts
			// the 2·2·P values of its all-gather; the ordered reduce-scatter receives the other
			// rank's 2·P/2 and the parameters' all-gather P/2: 3/8 of it.
			plain := runLines(t, dpConfig(t, t.TempDir(), 2))
			bytes := func(l MetricsLine) float64 { return *l.Metrics["perf/allreduce_bytes"] }
			require.InDelta(t, 3.0/8, bytes(lines[1])/bytes(plain[1]), 1e-3)
		}
	}
	for _, resume := range []struct {
		ranks int
		extra string
	}{{4, zero2}, {1, "worker.actor.fsdp.sharding_strategy=NO_SHARD"}} {
		dir := t.TempDir()
		run(t, dpConfig(t, dir, 2, zero2, "training.steps=2"))
		got := runLines(t, dpConfig(t, dir, resume.ranks, resume.extra, "training.find_last_checkpoint=true"))
		diffs, _ := compareLines(one, got)
		require.Empty(t, diffs, "resumed on %d ranks, %s", resume.ranks, resume.extra)
		require.Zero(t, weightDiff(modelWeights(t, dir1, 3), modelWeights(t, dir, 3)), "resumed on %d ranks", resume.ranks)
	}
}

// TestBucketedReduceRun: grad_reduce=bucketed (and with SHARD_GRAD_OP) on 2 ranks trains as
// one rank does, within float32 rounding: after 3 steps the weights are within 1e-5 relative
// (L2) of one rank's ordered run. Bit-identity with N is what the ordered default keeps.
func TestBucketedReduceRun(t *testing.T) {
	dir1 := t.TempDir()
	run(t, dpConfig(t, dir1, 1))
	for _, extra := range [][]string{{"worker.actor.grad_reduce=bucketed"},
		{"worker.actor.grad_reduce=bucketed", "worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP", "worker.actor.grad_bucket_mb=0.01"}} {
		dir := t.TempDir()
		run(t, dpConfig(t, dir, 2, extra...))
		d := weightDiff(modelWeights(t, dir1, 3), modelWeights(t, dir, 3))
		t.Logf("%v: relative L2 weight difference from one rank %.2g", extra, d)
		require.Less(t, d, 1e-5, "%v", extra)
		if len(extra) == 1 {
			// ZeRO-1 reduces as NO_SHARD does and updates each value as HostAdamW does: the
			// same bits as bucketed NO_SHARD at the same N, though not one rank's.
			z1 := t.TempDir()
			run(t, dpConfig(t, z1, 2, "worker.actor.grad_reduce=bucketed", "worker.actor.fsdp.sharding_strategy=optim"))
			require.Equal(t, modelWeights(t, dir, 3), modelWeights(t, z1, 3), "ZeRO-1 against NO_SHARD, bucketed")
		}
	}
}

// TestShardingStrategies: FSDP's and Megatron-FSDP's names map to replicated, ZeRO-1 and
// ZeRO-2 (docs/data-parallel.md#sharding-strategies); the ones that would shard more than
// this trainer does warn and say what; other values are refused naming the choices.
func TestShardingStrategies(t *testing.T) {
	for v, want := range map[string]struct {
		stage loop.Sharding
		warns bool
	}{
		"NO_SHARD": {0, false}, "no_shard": {0, false}, "optim": {loop.ShardOptimizer, false},
		"SHARD_GRAD_OP": {loop.ShardGradients, false}, "optim_grads": {loop.ShardGradients, false},
		"FULL_SHARD": {loop.ShardGradients, true}, "optim_grads_params": {loop.ShardGradients, true},
		"HYBRID_SHARD": {loop.ShardGradients, true}, "_HYBRID_SHARD_ZERO2": {loop.ShardGradients, true},
	} {
		cfg, err := LoadConfig("", []string{"worker.actor.fsdp.sharding_strategy=" + v})
		require.NoError(t, err, v)
		stage, err := cfg.Worker.Actor.FSDP.Sharding()
		require.NoError(t, err, v)
		require.Equal(t, want.stage, stage, v)
		warned := strings.Contains(strings.Join(cfg.Warnings(), "\n"), "sharding_strategy="+v+" runs as SHARD_GRAD_OP")
		require.Equal(t, want.warns, warned, "%s: %q", v, cfg.Warnings())
	}
	_, err := LoadConfig("", []string{"worker.actor.fsdp.sharding_strategy=ZERO1"})
	require.ErrorContains(t, err, "optim (ZeRO-1)")
	_, err = LoadConfig("", []string{"worker.actor.fsdp.sharding_strategy=optim", "worker.actor.device=cuda"})
	require.ErrorContains(t, err, "worker.actor.device")
}
