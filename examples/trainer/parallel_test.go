package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// dpConfig is tinyConfig with one mini-batch of 4 prompts × 2 responses per step, so that 1, 2
// and 4 ranks each take whole groups in whole micro-batches.
func dpConfig(t *testing.T, dir string, ranks int, extra ...string) Config {
	t.Helper()
	o := []string{"training.steps=3", "training.sft_steps=2", "training.val_freq=3", "training.save_freq=1",
		"worker.actor.global_batch_size=4", "worker.actor.micro_batch_size_per_device_for_update=2",
		"worker.actor.micro_batch_size_per_device_for_experience=2", "training.rollout_log_freq=0",
		fmt.Sprintf("training.n_gpus_per_node=%d", ranks)}
	return tinyConfig(t, dir, append(o, extra...)...)
}

func runLines(t *testing.T, cfg Config) []MetricsLine {
	t.Helper()
	run(t, cfg)
	lines, err := ReadMetrics(filepath.Join(cfg.Training.RunDir, "metrics.jsonl"))
	require.NoError(t, err)
	return lines
}

// dpTolerance is the difference allowed between runs on different numbers of ranks:
// |x - y| <= dpTolerance * max(|x|, |y|). The weights are bit-identical (collective.OrderedSum adds the
// micro-batch gradients in one device's order), so every float32 quantity is too; what may
// differ is the last bit of a float64 metric averaged in another order (seen: 1.8e-16).
const dpTolerance = 1e-12

// exactKeys must agree bit for bit: they are computed from the sampled tokens and masks.
func exactKey(k string) bool {
	for _, p := range []string{"reward/accuracy", "reward/format", "response_length/", "val/accuracy", "val/format",
		"perception/precision", "perception/recall", "entropy_mask/", "perception/visual_token_fraction", "actor/lr"} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// compareLines reports the keys of b that differ from a beyond the tolerance (timings skipped).
func compareLines(a, b []MetricsLine) (diffs []string, worst float64) {
	if len(a) != len(b) {
		return []string{fmt.Sprintf("%d lines, want %d", len(b), len(a))}, math.Inf(1)
	}
	for i := range a {
		var keys []string
		for k := range a[i].Metrics {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if strings.HasPrefix(k, "perf/") || strings.HasPrefix(k, "timing_s/") {
				continue
			}
			px, py := a[i].Metrics[k], b[i].Metrics[k]
			if (px == nil) != (py == nil) {
				diffs = append(diffs, fmt.Sprintf("step %d %s: %v vs %v", a[i].Step, k, px, py))
				continue
			}
			if px == nil {
				continue
			}
			x, y := *px, *py
			if math.IsNaN(x) && math.IsNaN(y) || x == y {
				continue
			}
			rel := math.Abs(x-y) / max(math.Abs(x), math.Abs(y), 1e-3)
			if exactKey(k) || !(math.Abs(x-y) <= dpTolerance*max(math.Abs(x), math.Abs(y))) {
				diffs = append(diffs, fmt.Sprintf("step %d %s: %v vs %v (rel %.2g)", a[i].Step, k, x, y, rel))
			}
			if !math.IsNaN(rel) {
				worst = max(worst, rel)
			}
		}
	}
	return diffs, worst
}

// TestDataParallelSameMetrics: the same seed and configuration give the same metrics.jsonl on
// 1, 2 and 4 in-process ranks.
func TestDataParallelSameMetrics(t *testing.T) {
	dir1 := t.TempDir()
	one := runLines(t, dpConfig(t, dir1, 1))
	for _, n := range []int{2, 4} {
		dir := t.TempDir()
		lines := runLines(t, dpConfig(t, dir, n))
		diffs, worst := compareLines(one, lines)
		wd := weightDiff(modelWeights(t, dir1, 3), modelWeights(t, dir, 3))
		t.Logf("%d ranks: largest relative metric difference %.2g, weights %.2g", n, worst, wd)
		require.Empty(t, diffs, "%d ranks", n)
		require.Zero(t, wd, "%d ranks: weights after 3 steps differ from one rank's", n)
	}
}

// modelWeights reads the policy weights of a run's checkpoint of step.
func modelWeights(t *testing.T, dir string, step int) map[string]NamedTensor {
	t.Helper()
	p := filepath.Join(dir, "checkpoints", stepDirName(step), ckptModel)
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	ts, err := DecodeSafetensors(data, p)
	require.NoError(t, err)
	return ts
}

// weightDiff is the relative L2 difference of two sets of weights.
func weightDiff(a, b map[string]NamedTensor) float64 {
	var d, n float64
	for k, x := range a {
		for i, v := range x.Data {
			e := float64(v) - float64(b[k].Data[i])
			d += e * e
			n += float64(v) * float64(v)
		}
	}
	return math.Sqrt(d / n)
}

// TestDataParallelPerRankScope: trajectory_shaping_scope=per_micro_batch takes the shaping
// range per rank's mini-batch, as the reference does per device, so unlike the default global
// scope (TestDataParallelSameMetrics) the result changes with the number of ranks.
func TestDataParallelPerRankScope(t *testing.T) {
	scope := "optimization.trajectory_shaping_scope=per_micro_batch"
	dir1, dir2 := t.TempDir(), t.TempDir()
	one := runLines(t, dpConfig(t, dir1, 1, scope))
	two := runLines(t, dpConfig(t, dir2, 2, scope))
	diffs, _ := compareLines(one, two)
	require.NotEmpty(t, diffs, "per-rank shaping gave the same metrics on 1 and 2 ranks")
	require.NotZero(t, weightDiff(modelWeights(t, dir1, 3), modelWeights(t, dir2, 3)))
	// The rollouts of step 1 come from the same weights: only the update differs.
	require.Equal(t, *one[1].Metrics["reward/accuracy"], *two[1].Metrics["reward/accuracy"])
}

// TestDataParallelRankFailure: an error in one rank stops every rank, Run returns that rank's
// error, and the run directory holds only complete checkpoints of the steps before.
func TestDataParallelRankFailure(t *testing.T) {
	boom := errors.New("injected failure")
	testRankFail = func(rank, step int) error {
		if rank == 1 && step == 2 {
			return boom
		}
		return nil
	}
	defer func() { testRankFail = nil }()
	dir := t.TempDir()
	var out, errb bytes.Buffer
	_, err := Run(context.Background(), dpConfig(t, dir, 2), &out, &errb)
	require.ErrorIs(t, err, boom)
	require.Contains(t, err.Error(), "rank 1")
	entries, err := os.ReadDir(filepath.Join(dir, "checkpoints"))
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.ElementsMatch(t, []string{"global_step_0", "global_step_1", ckptTracker}, names)
	lines, err := ReadMetrics(filepath.Join(dir, "metrics.jsonl"))
	require.NoError(t, err)
	require.Len(t, lines, 2) // steps 0 and 1
	ck := &Checkpoints{Root: filepath.Join(dir, "checkpoints")}
	last, step, err := ck.Last()
	require.NoError(t, err)
	require.Equal(t, 1, step, last)
}

// TestDataParallelResume: a checkpoint written by 2 ranks resumes on 1 and on 4, and both
// continue exactly as the uninterrupted run on 1 rank.
func TestDataParallelResume(t *testing.T) {
	full := t.TempDir()
	want := runLines(t, dpConfig(t, full, 1))
	for _, n := range []int{1, 4} {
		dir := t.TempDir()
		run(t, dpConfig(t, dir, 2, "training.steps=2"))
		got := runLines(t, dpConfig(t, dir, n, "training.find_last_checkpoint=true"))
		diffs, _ := compareLines(want, got)
		require.Empty(t, diffs, "resumed on %d ranks", n)
		require.Zero(t, weightDiff(modelWeights(t, full, 3), modelWeights(t, dir, 3)), "resumed on %d ranks", n)
	}
}

// TestCompareRunDirs compares the metrics.jsonl and final weights of two run directories named
// by MTRL_COMPARE_RUNS=dirA,dirB,step (scripts/ci-mpi: one process against mpirun -np 2).
func TestCompareRunDirs(t *testing.T) {
	spec := os.Getenv("MTRL_COMPARE_RUNS")
	if spec == "" {
		t.Skip("MTRL_COMPARE_RUNS not set")
	}
	parts := strings.Split(spec, ",")
	require.Len(t, parts, 3, "MTRL_COMPARE_RUNS=dirA,dirB,step")
	var step int
	_, err := fmt.Sscan(parts[2], &step)
	require.NoError(t, err)
	read := func(dir string) []MetricsLine {
		l, err := ReadMetrics(filepath.Join(dir, "metrics.jsonl"))
		require.NoError(t, err)
		return l
	}
	diffs, worst := compareLines(read(parts[0]), read(parts[1]))
	wd := weightDiff(modelWeights(t, parts[0], step), modelWeights(t, parts[1], step))
	t.Logf("largest relative metric difference %.2g, weights %.2g", worst, wd)
	require.Empty(t, diffs)
	require.Zero(t, wd)
}

// TestDataParallelAlgorithms: the batch-wide parts (whitening of reinforce_plus_plus, ReMax's
// greedy baselines, online filtering's sampling rounds, the critic of gae) give the same run on
// 2 ranks as on 1.
func TestDataParallelAlgorithms(t *testing.T) {
	for _, extra := range [][]string{
		{"optimization.advantage_estimator=gae"},
		{"optimization.advantage_estimator=reinforce_plus_plus"},
		{"optimization.advantage_estimator=remax"},
		{"optimization.online_filtering=true", "optimization.filter_key=format"},
	} {
		t.Run(strings.Join(extra, ","), func(t *testing.T) {
			o := append([]string{"training.steps=2"}, extra...)
			dir1, dir2 := t.TempDir(), t.TempDir()
			one := runLines(t, dpConfig(t, dir1, 1, o...))
			two := runLines(t, dpConfig(t, dir2, 2, o...))
			diffs, _ := compareLines(one, two)
			require.Empty(t, diffs)
			require.Zero(t, weightDiff(modelWeights(t, dir1, 2), modelWeights(t, dir2, 2)))
		})
	}
}
