package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/tprl/loop"
)

// hfDPOverrides is a model_path run of 3 steps at the given ranks: 2 prompts × 2 samples per
// step, micro-batches of 2 rows (one per rank and mini-batch at 2 ranks), a checkpoint every
// step.
func hfDPOverrides(model, run string, ranks int, extra ...string) []string {
	return hfOverrides(model, run, append([]string{"training.steps=3", "training.save_freq=1",
		"worker.actor.micro_batch_size_per_device_for_update=2", "worker.actor.micro_batch_size_per_device_for_experience=2",
		fmt.Sprintf("training.n_gpus_per_node=%d", ranks)}, extra...)...)
}

// hfScaled are the memory features: bf16 compute, activation checkpointing, padding-free
// packing and ZeRO-2 (grad_reduce ordered: one device's sums).
var hfScaled = []string{"worker.actor.fsdp.mixed_precision_dtype=bf16", "worker.actor.model.enable_gradient_checkpointing=true",
	"worker.actor.padding_free=true", "worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP"}

func hfLines(t *testing.T, overrides []string) []MetricsLine {
	t.Helper()
	runHFTest(t, context.Background(), overrides)
	cfg := mustConfig(t, overrides)
	lines, err := ReadMetrics(filepath.Join(cfg.Training.RunDir, "metrics.jsonl"))
	require.NoError(t, err)
	return lines
}

// TestModelPathDataParallel: a Qwen2 model_path run at 2 in-process ranks with bf16,
// checkpointing, padding-free and ZeRO-2 gives one rank's metrics and weights with the same
// features bit for bit (ordered reduction); so does NO_SHARD with the bucketed reduction up to
// the last bits of the sum. Its checkpoint resumes at 1 rank.
func TestModelPathDataParallel(t *testing.T) {
	model := tinyHF(t)
	dir := func(name string) string { return filepath.Join(t.TempDir(), name) }
	one, two := dir("one"), dir("two")
	a := hfLines(t, hfDPOverrides(model, one, 1, hfScaled...))
	b := hfLines(t, hfDPOverrides(model, two, 2, hfScaled...))
	diffs, worst := compareLines(a, b)
	require.Empty(t, diffs)
	t.Logf("ZeRO-2 bf16, 2 ranks vs 1: largest relative metric difference %.2g", worst)
	require.Zero(t, weightDiff(modelWeights(t, one, 3), modelWeights(t, two, 3)), "weights after 3 steps")
	require.Equal(t, modelWeights(t, one, 3), modelWeights(t, two, 3))
	require.Equal(t, optimizerMoments(t, one, 3), optimizerMoments(t, two, 3), "the moments (2 ranks: their shards)")
	for _, l := range b[:3] {
		require.NotNil(t, l.Metrics["perf/allreduce_bytes"], "step %d", l.Step)
		require.Positive(t, *l.Metrics["perf/allreduce_bytes"])
	}

	// A 2-rank run of 1 step resumed at 1 rank: the same steps 2 and 3.
	resumed := dir("resumed")
	hfLines(t, hfDPOverrides(model, resumed, 2, append(hfScaled, "training.steps=1")...))
	c := hfLines(t, hfDPOverrides(model, resumed, 1, append(hfScaled, "training.find_last_checkpoint=true")...))
	diffs, _ = compareLines(a, c)
	require.Empty(t, diffs, "2 ranks → 1 after step 1")
	require.Equal(t, modelWeights(t, one, 3), modelWeights(t, resumed, 3))

	// The features against the float32, padded, unsharded run of 1 rank.
	baseDir := dir("base")
	base := hfLines(t, hfDPOverrides(model, baseDir, 1, "worker.actor.padding_free=false"))
	// The rollouts are the same samples (rewards, lengths: exact); entropy and the losses are
	// token means of quantities computed from bf16 logits, each off by O(u), u = 2^-8 bf16's
	// unit roundoff: they must agree within u relative (measured: 1e-4). The gradient norm
	// (bf16's backward, after AdamW steps that bf16 already moved) is reported, not bounded.
	const u = 1.0 / 256
	// The KL to the reference (actor/reward_kl_penalty; kind kl: the token mean of
	// log p_policy − log p_ref over the sampled tokens) is a difference of nearly equal
	// log-probs (0.02 against 12), so no relative bound can hold. At step 1 the policy is the
	// reference, scored the same way in each precision: 0 exactly in both runs. After it,
	// each of the two log-probs carries bf16's error, at most √R·u·|log p| per token (R = 2 + 15L
	// roundings on a token's path, the random-walk model hflm's TestMixedPrecisionBF16
	// asserts), which no longer cancel once the policy has moved; |log p| of the sampled
	// tokens is the entropy H on average, so |ΔKL| ≤ 2√R·u·H, H the float32 run's entropy.
	kl, ent := "actor/reward_kl_penalty", "actor/entropy"
	sqrtR := math.Sqrt(2 + 15*2) // the tiny Qwen2's 2 layers
	for i := range base {
		x, y := *base[i].Metrics[kl], *b[i].Metrics[kl]
		if base[i].Step == 1 {
			require.Zero(t, x, "step 1: the policy is the reference")
			require.Zero(t, y, "step 1: the policy is the reference")
			continue
		}
		tol := 2 * sqrtR * u * *base[i].Metrics[ent]
		require.LessOrEqual(t, math.Abs(x-y), tol, "step %d: KL %.4g (float32) vs %.4g (bf16)", base[i].Step, x, y)
		t.Logf("step %d: KL %.4g (float32) vs %.4g (bf16): |Δ| = %.3g = %.3f of the bound 2√R·u·H", base[i].Step, x, y, math.Abs(x-y), math.Abs(x-y)/tol)
	}
	rel := metricDiffs(base, b)
	for _, k := range sortedKeys(rel) {
		name, _, _ := strings.Cut(k, "@")
		switch {
		case exactKey(name) || strings.HasPrefix(name, "reward/"):
			require.Zero(t, rel[k], k)
		case name == "actor/entropy" || name == "actor/entropy_loss" || name == "actor/pg_loss":
			require.LessOrEqual(t, rel[k], u, k)
		}
		t.Logf("bf16+checkpointing+padding-free+ZeRO-2 at 2 ranks vs float32 padded at 1: %s: %.3g", k, rel[k])
	}
	// (AdamW at lr 0.01 moves each weight by ~lr whatever its gradient's size, and the random
	// model's gradients are mostly noise-sized: bf16 flips the sign of many updates.)
	t.Logf("weights after 3 steps: relative L2 difference %.3g", weightDiff(modelWeights(t, baseDir, 3), modelWeights(t, two, 3)))
}

// TestModelPathDataParallelBucketed: NO_SHARD with the bucketed reduction (micro-batches summed
// on each rank, reduce-scatter and all-gather in 0.01 MiB buckets) at 2 ranks against one
// ordered rank. With one micro-batch per rank both add the same two gradients in rank order,
// so the metrics and weights are equal bit for bit: the bucketed path cuts, scatters and
// gathers every value to its place.
func TestModelPathDataParallelBucketed(t *testing.T) {
	model := tinyHF(t)
	one, two := filepath.Join(t.TempDir(), "one"), filepath.Join(t.TempDir(), "two")
	a := hfLines(t, hfDPOverrides(model, one, 1, "training.steps=2"))
	b := hfLines(t, hfDPOverrides(model, two, 2, "training.steps=2", "worker.actor.grad_reduce=bucketed", "worker.actor.grad_bucket_mb=0.01"))
	diffs, _ := compareLines(a, b)
	require.Empty(t, diffs)
	require.Equal(t, modelWeights(t, one, 2), modelWeights(t, two, 2))
}

// TestModelPathOffloadKeys: worker.actor.offload.* is accepted with a warning that says why it
// does nothing (host memory already) on a model_path run.
func TestModelPathOffloadKeys(t *testing.T) {
	cfg, err := LoadConfig("", []string{"worker.actor.model.model_path=m", "worker.actor.offload.offload_params=true", "worker.actor.offload.offload_optimizer=true"})
	require.NoError(t, err)
	var found bool
	for _, w := range cfg.Warnings() {
		found = found || strings.Contains(w, "worker.actor.offload.") && strings.Contains(w, "CPU")
	}
	require.True(t, found, "warnings: %q", cfg.Warnings())
}

// optimizerMoments reads a checkpoint's AdamW moments by "exp_avg.<name>" and
// "exp_avg_sq.<name>", from optimizer.safetensors or from the per-rank shards (all of them,
// verified): the same map whatever wrote them.
func optimizerMoments(t *testing.T, dir string, step int) map[string][]float32 {
	t.Helper()
	ck := filepath.Join(dir, "checkpoints", stepDirName(step))
	out := map[string][]float32{}
	if _, err := os.Stat(filepath.Join(ck, ckptShardIndex)); err != nil {
		files, err := readCheckpoint(ck, ckptOptimizer)
		require.NoError(t, err)
		ts, err := DecodeSafetensors(files[ckptOptimizer], ckptOptimizer)
		require.NoError(t, err)
		for k, v := range ts {
			out[k] = v.Data
		}
		return out
	}
	var idx shardIndex
	data, err := os.ReadFile(filepath.Join(ck, ckptShardIndex))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &idx))
	all := [][2]int{{0, idx.Values}}
	names, err := shardFilesFor(ck, idx.Params, all)
	require.NoError(t, err)
	files, err := readCheckpoint(ck, names...)
	require.NoError(t, err)
	shards, err := momentShards(ck, files, idx.Params, all)
	require.NoError(t, err)
	m, v, err := wholeFromShards(shards, idx.Params)
	require.NoError(t, err)
	for i, p := range idx.Params {
		out["exp_avg."+p.Name], out["exp_avg_sq."+p.Name] = m[i], v[i]
	}
	return out
}

// metricDiffs are the relative differences |x−y|/max(|x|,|y|,1e-3) of every metric of a and b
// but the timings, by key and step.
func metricDiffs(a, b []MetricsLine) map[string]float64 {
	out := map[string]float64{}
	for i := range min(len(a), len(b)) {
		for k, px := range a[i].Metrics {
			py := b[i].Metrics[k]
			if px == nil || py == nil || strings.HasPrefix(k, "perf/") || strings.HasPrefix(k, "timing_s/") {
				continue
			}
			out[fmt.Sprintf("%s@%d", k, a[i].Step)] = math.Abs(*px-*py) / max(math.Abs(*px), math.Abs(*py), 1e-3)
		}
	}
	return out
}

func sortedKeys(m map[string]float64) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// TestModelPathDataParallelBytes measures (MTRL_HF_DP_BYTES=1; docs/2026-11-memory.md) the
// bytes each rank receives per step in the gradient reduction and the optimizer's
// parameter all-gather (perf/allreduce_bytes) and the AdamW moments each rank holds, at 2 and
// 4 ranks, for every grad_reduce and sharding_strategy, on the tiny Qwen2.
func TestModelPathDataParallelBytes(t *testing.T) {
	if os.Getenv("MTRL_HF_DP_BYTES") == "" {
		t.Skip("MTRL_HF_DP_BYTES not set")
	}
	model := tinyHF(t)
	for _, n := range []int{2, 4} {
		for _, c := range []struct{ reduce, shard string }{{"ordered", "NO_SHARD"}, {"bucketed", "NO_SHARD"}, {"ordered", "SHARD_GRAD_OP"}, {"bucketed", "SHARD_GRAD_OP"}} {
			run := filepath.Join(t.TempDir(), "run")
			o := hfDPOverrides(model, run, n, "training.steps=1", "dataset.rollout_batch_size=4", "worker.actor.global_batch_size=4",
				"worker.actor.grad_reduce="+c.reduce, "worker.actor.fsdp.sharding_strategy="+c.shard)
			lines := hfLines(t, o)
			cfg := mustConfig(t, o)
			s, err := openHF(cfg)
			require.NoError(t, err)
			ps, err := s.model.Params()
			require.NoError(t, err)
			params := 0
			for _, p := range ps {
				params += p.Value.Len()
			}
			moments := 8 * params // M and V, float32
			if c.shard != "NO_SHARD" {
				rc := loop.ReduceConfig{Ordered: c.reduce == "ordered", BucketBytes: int(cfg.Worker.Actor.GradBucketMB * (1 << 20))}
				zero, _, err := loop.NewShardedAdamW(ps, loop.ShardGradients, rc, 0, n, 0.9, 0.999, 1e-8, 0)
				require.NoError(t, err)
				moments = 0
				for _, sh := range zero.Moments() {
					moments += 8 * (sh.Hi - sh.Lo)
				}
			}
			t.Logf("N=%d %s %s: %d parameters (%d micro-batches of 2 rows per rank); received per rank and step %.0f bytes (%.3g × the float32 gradient); moments on rank 0 %d bytes (%.3g × whole)",
				n, c.reduce, c.shard, params, 8/n/2, *lines[0].Metrics["perf/allreduce_bytes"], *lines[0].Metrics["perf/allreduce_bytes"]/float64(4*params), moments, float64(moments)/float64(8*params))
		}
	}
}

// TestModelPathVLDataParallel: a Qwen2.5-VL LoRA run (the perception score's perturbed pass
// on) at 2 ranks with ZeRO-2 writes one rank's metrics and weights bit for bit.
func TestModelPathVLDataParallel(t *testing.T) {
	model := tinyVL(t, "qwen2.5-vl.json")
	data := writeSeedData(t, t.TempDir(), 4)
	common := []string{"training.steps=2", "training.save_freq=1", "dataset.train_files=" + data, "worker.actor.model.lora_rank=4",
		"dataset.max_pixels=2000", "worker.actor.micro_batch_size_per_device_for_update=2",
		"worker.actor.micro_batch_size_per_device_for_experience=2", "worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP"}
	one, two := filepath.Join(t.TempDir(), "one"), filepath.Join(t.TempDir(), "two")
	a := hfLines(t, vlOverrides(model, one, common...))
	b := hfLines(t, vlOverrides(model, two, append(common, "training.n_gpus_per_node=2")...))
	diffs, _ := compareLines(a, b)
	require.Empty(t, diffs)
	require.Equal(t, modelWeights(t, one, 2), modelWeights(t, two, 2))
	require.NotNil(t, b[0].Metrics["actor/perception_token_fraction"], "the perception score is computed")
}
