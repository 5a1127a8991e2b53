package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// zeroParams are 3 parameters of 37, 64 and 5 values (106), with 40-value buckets: the
// ranks' pieces cross the parameters' boundaries.
func zeroParams(t *testing.T) []loop.Param {
	var ps []loop.Param
	for i, n := range []int{37, 64, 5} {
		ps = append(ps, loop.Param{Name: string(rune('a' + i)), Value: tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, n)),
			Grad: tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, n))})
	}
	return ps
}

// zeroRanks builds the ZeRO-2 optimizers of world ranks over params (40-value buckets).
func zeroRanks(t *testing.T, params []loop.Param, world int) []*loop.ShardedAdamW {
	var out []*loop.ShardedAdamW
	for r := range world {
		o, _, err := loop.NewShardedAdamW(params, loop.ShardGradients, loop.ReduceConfig{Ordered: true, BucketBytes: 160}, r, world, 0.9, 0.999, 1e-8, 0)
		require.NoError(t, err)
		out = append(out, o)
	}
	return out
}

// TestMomentShardsResplit: moments written as per-rank files by W ranks (W = 1, 2, 3, 4) are
// read back by every rank of every other world size (and by an unsharded optimizer) as the
// same values bit for bit, each rank reading only the files its ranges overlap; the files hold
// only their rank's values.
func TestMomentShardsResplit(t *testing.T) {
	ps := zeroParams(t)
	params := shardParamsOf(ps)
	n := 106
	rng := rand.New(rand.NewPCG(1, 2))
	flat := loop.MomentShard{Hi: n, M: make([]float32, n), V: make([]float32, n)}
	for i := range n {
		flat.M[i], flat.V[i] = rng.Float32()-0.5, rng.Float32()
	}
	for _, from := range []int{1, 2, 3, 4} {
		dir := t.TempDir()
		writers := zeroRanks(t, ps, from)
		for _, o := range writers {
			require.NoError(t, o.SetMoments([]loop.MomentShard{flat}))
		}
		err := collective.Run(context.Background(), from, func(ctx context.Context, c collective.Comm) error {
			if from == 1 {
				c = nil
			}
			return saveMomentShards(ctx, c, dir, params, writers[max(0, rankOf(c))].Moments())
		})
		require.NoError(t, err)
		for r := range from {
			st, err := os.Stat(filepath.Join(dir, shardFileName(r, from)))
			require.NoError(t, err)
			require.Less(t, st.Size(), int64(8*n/from+8*n/4+1024), "rank %d of %d writes its share only", r, from)
		}
		// An unsharded reader: every file, the whole moments.
		all := [][2]int{{0, n}}
		names, err := shardFilesFor(dir, params, all)
		require.NoError(t, err)
		require.Len(t, names, from+1)
		files, err := readCheckpoint(dir, names...)
		require.NoError(t, err)
		shards, err := momentShards(dir, files, params, all)
		require.NoError(t, err)
		m, v, err := wholeFromShards(shards, params)
		require.NoError(t, err)
		require.Equal(t, [][]float32{flat.M[:37], flat.M[37:101], flat.M[101:]}, m)
		require.Equal(t, [][]float32{flat.V[:37], flat.V[37:101], flat.V[101:]}, v)
		for _, to := range []int{1, 2, 3, 4} {
			readers := zeroRanks(t, ps, to)
			for r, o := range readers {
				var want [][2]int
				for _, s := range o.Moments() {
					want = append(want, [2]int{s.Lo, s.Hi})
				}
				names, err := shardFilesFor(dir, params, want)
				require.NoError(t, err)
				files, err := readCheckpoint(dir, names...)
				require.NoError(t, err)
				shards, err := momentShards(dir, files, params, want)
				require.NoError(t, err)
				require.NoError(t, o.SetMoments(shards), "%d → %d, rank %d", from, to, r)
				for _, s := range o.Moments() {
					require.Equal(t, flat.M[s.Lo:s.Hi], s.M, "%d → %d, rank %d", from, to, r)
					require.Equal(t, flat.V[s.Lo:s.Hi], s.V, "%d → %d, rank %d", from, to, r)
				}
			}
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func rankOf(c collective.Comm) int {
	if c == nil {
		return 0
	}
	return c.Rank()
}

// TestShardIndexRefusals: an index of other parameters, a missing or misnamed file, ranges
// that leave a gap or overlap, and a shard that lacks a range are errors naming the file.
func TestShardIndexRefusals(t *testing.T) {
	ps := zeroParams(t)
	params := shardParamsOf(ps)
	good := shardIndex{Format: shardIndexFmt, WorldSize: 2, Values: 106, Params: params, Files: []shardFile{
		{shardFileName(0, 2), 0, [][2]int{{0, 20}, {40, 60}}}, {shardFileName(1, 2), 1, [][2]int{{20, 40}, {60, 106}}}}}
	_, err := parseShardIndex("d", mustJSON(t, good), params)
	require.NoError(t, err)
	for name, edit := range map[string]func(*shardIndex){
		"another model": func(x *shardIndex) { x.Params = x.Params[:2] },
		"a gap":         func(x *shardIndex) { x.Files[1].Ranges[0] = [2]int{21, 40} },
		"an overlap":    func(x *shardIndex) { x.Files[1].Ranges[0] = [2]int{19, 40} },
		"short":         func(x *shardIndex) { x.Files[1].Ranges[1] = [2]int{60, 100} },
		"a file short":  func(x *shardIndex) { x.Files = x.Files[:1] },
		"misnamed":      func(x *shardIndex) { x.Files[1].File = "../x.safetensors" },
		"format":        func(x *shardIndex) { x.Format = "other" },
	} {
		x := good
		x.Files = []shardFile{good.Files[0], {good.Files[1].File, 1, [][2]int{good.Files[1].Ranges[0], good.Files[1].Ranges[1]}}}
		edit(&x)
		_, err := parseShardIndex("d", mustJSON(t, x), params)
		require.ErrorContains(t, err, ckptShardIndex, name)
	}
	// A shard file whose tensors are not the index's ranges.
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ckptShardIndex), mustJSON(t, good), 0o644))
	m := make([]float32, 106)
	require.NoError(t, writeShard(filepath.Join(dir, shardFileName(0, 2)), 0, 2, []loop.MomentShard{{Lo: 0, Hi: 20, M: m[:20], V: m[:20]}}))
	require.NoError(t, writeShard(filepath.Join(dir, shardFileName(1, 2)), 1, 2, []loop.MomentShard{{Lo: 20, Hi: 40, M: m[:20], V: m[:20]}, {Lo: 60, Hi: 106, M: m[:46], V: m[:46]}}))
	all := [][2]int{{0, 106}}
	names, err := shardFilesFor(dir, params, all)
	require.NoError(t, err)
	files, err := readCheckpoint(dir, names...)
	require.NoError(t, err)
	_, err = momentShards(dir, files, params, all)
	require.ErrorContains(t, err, shardFileName(0, 2))
}

// zeroOverrides is hfDPOverrides with 4 prompts × 2 samples per step (whole prompt groups on
// 1, 2 and 4 ranks) and ZeRO-2 in 4 MiB buckets (5 of them, crossing parameters: each rank's
// file holds several ranges).
func zeroOverrides(model, run string, ranks int, extra ...string) []string {
	return hfDPOverrides(model, run, ranks, append([]string{"dataset.rollout_batch_size=4", "worker.actor.global_batch_size=4",
		"worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP", "worker.actor.grad_bucket_mb=4"}, extra...)...)
}

// sameState requires the checkpoints of step in runs a and b to hold the same weights and
// moments bit for bit.
func sameState(t *testing.T, a, b string, step int, msg string) {
	t.Helper()
	require.Equal(t, modelWeights(t, a, step), modelWeights(t, b, step), "%s: weights at step %d", msg, step)
	require.Equal(t, optimizerMoments(t, a, step), optimizerMoments(t, b, step), "%s: moments at step %d", msg, step)
}

// TestModelPathShardedCheckpoint: a ZeRO-2 model_path run writes each rank's moments to its own
// file (no optimizer.safetensors), and a run that changes its number of ranks at every step,
// 1 → 2 (ZeRO-1) → 4 → 2, resuming each time from the shards written at the previous number, writes the
// metrics, weights and moments of an uninterrupted 2-rank run bit for bit (the ordered
// reduction makes the run N-independent, so any difference is the re-split's). At 4 ranks
// rank 1 first fails to write its shard: the run stops with no checkpoint of that step and the
// next one resumes from the previous step. Then step 4's checkpoint loses a shard: it is
// refused by name, and training.fallback_checkpoint resumes from step 3 (4 ranks' shards) on 1
// unsharded rank, which ends as the uninterrupted run.
func TestModelPathShardedCheckpoint(t *testing.T) {
	model := tinyHF(t)
	ref := filepath.Join(t.TempDir(), "ref")
	want := hfLines(t, zeroOverrides(model, ref, 2, "training.steps=5"))
	ck := filepath.Join(ref, "checkpoints", stepDirName(5))
	require.NoFileExists(t, filepath.Join(ck, ckptOptimizer))
	for _, f := range []string{ckptShardIndex, shardFileName(0, 2), shardFileName(1, 2)} {
		require.FileExists(t, filepath.Join(ck, f))
	}

	chain := filepath.Join(t.TempDir(), "chain")
	for i, c := range []struct {
		ranks    int
		strategy string
	}{{1, "SHARD_GRAD_OP"}, {2, "optim"}, {4, "SHARD_GRAD_OP"}, {2, "SHARD_GRAD_OP"}} {
		step, ranks := i+1, c.ranks
		o := zeroOverrides(model, chain, ranks, fmt.Sprintf("training.steps=%d", step), fmt.Sprintf("training.find_last_checkpoint=%v", step > 1),
			"worker.actor.fsdp.sharding_strategy="+c.strategy)
		if ranks == 4 { // rank 1 fails to write its shard: the run stops, the step has no checkpoint
			testShardWrite = func(rank int) error {
				if rank == 1 {
					return errors.New("injected shard failure")
				}
				return nil
			}
			cfg, err := LoadConfig("", o)
			require.NoError(t, err)
			_, err = Run(context.Background(), cfg, io.Discard, io.Discard)
			testShardWrite = nil
			require.ErrorContains(t, err, "optimizer shard of rank 1: injected shard failure")
			require.NoDirExists(t, filepath.Join(chain, "checkpoints", stepDirName(step)))
		}
		runHFTest(t, context.Background(), o)
		sameState(t, ref, chain, step, fmt.Sprintf("%d ranks, %s", ranks, c.strategy))
	}

	// Step 4's checkpoint loses rank 1's shard: refused by name, or the fallback to step 3.
	lost := filepath.Join(chain, "checkpoints", stepDirName(4), shardFileName(1, 2))
	require.NoError(t, os.Remove(lost))
	o := zeroOverrides(model, chain, 1, "training.steps=5", "training.find_last_checkpoint=true", "worker.actor.fsdp.sharding_strategy=NO_SHARD")
	cfg, err := LoadConfig("", o)
	require.NoError(t, err)
	_, err = Run(context.Background(), cfg, io.Discard, io.Discard)
	require.ErrorContains(t, err, lost)
	require.ErrorContains(t, err, "training.fallback_checkpoint=true")
	runHFTest(t, context.Background(), append(o, "training.fallback_checkpoint=true"))
	sameState(t, ref, chain, 5, "4 ranks' shards of step 3 resumed on 1 unsharded rank")
	got, err := ReadMetrics(filepath.Join(chain, "metrics.jsonl"))
	require.NoError(t, err)
	diffs, _ := compareLines(want, got)
	require.Empty(t, diffs)
}

// TestModelPathShardedBucketed: with the bucketed reduction a run depends on N in the last
// bits. A 2-rank ZeRO-2 run stopped after step 1 and resumed at 2 ranks for step 2 is the
// uninterrupted 2-rank run bit for bit; resumed at 4 ranks from its shards it is the 4-rank run from the same
// state: the same bits as resuming at 4 ranks from that checkpoint rewritten with one whole
// optimizer.safetensors (the unsharded format, which no rank splits).
func TestModelPathShardedBucketed(t *testing.T) {
	model := tinyHF(t)
	bk := []string{"worker.actor.grad_reduce=bucketed"}
	tmp := t.TempDir()
	ref, part, four, whole := filepath.Join(tmp, "ref"), filepath.Join(tmp, "part"), filepath.Join(tmp, "four"), filepath.Join(tmp, "whole")
	want := hfLines(t, zeroOverrides(model, ref, 2, append(bk, "training.steps=2")...))
	hfLines(t, zeroOverrides(model, part, 2, append(bk, "training.steps=1")...))
	require.NoError(t, os.CopyFS(four, os.DirFS(part)))
	require.NoError(t, os.CopyFS(whole, os.DirFS(part)))
	toWholeMoments(t, filepath.Join(whole, "checkpoints", stepDirName(1)))
	resume := append(bk, "training.steps=2", "training.find_last_checkpoint=true")

	got := hfLines(t, zeroOverrides(model, part, 2, resume...))
	diffs, _ := compareLines(want, got)
	require.Empty(t, diffs)
	sameState(t, ref, part, 2, "2 → 2 ranks")

	a := hfLines(t, zeroOverrides(model, four, 4, resume...))
	b := hfLines(t, zeroOverrides(model, whole, 4, resume...))
	diffs, _ = compareLines(a, b)
	require.Empty(t, diffs)
	sameState(t, four, whole, 2, "2 → 4 ranks, from the shards and from the whole moments")
	d := weightDiff(modelWeights(t, ref, 2), modelWeights(t, four, 2))
	t.Logf("2 → 4 ranks against 2 throughout: weights after 2 steps %.3g relative L2", d)
	require.Positive(t, d, "bucketed sums depend on N (else this test shows nothing)")
}

// toWholeMoments rewrites the sharded checkpoint dir in the unsharded format: one
// optimizer.safetensors of the whole moments, no index or shards, a new manifest.
func toWholeMoments(t *testing.T, dir string) {
	t.Helper()
	step, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "global_step_"))
	require.NoError(t, err)
	run := filepath.Dir(filepath.Dir(dir))
	ms := optimizerMoments(t, run, step)
	var ts []NamedTensor
	for name, w := range modelWeights(t, run, step) {
		ts = append(ts, NamedTensor{Name: "exp_avg." + name, Shape: w.Shape, Data: ms["exp_avg."+name]},
			NamedTensor{Name: "exp_avg_sq." + name, Shape: w.Shape, Data: ms["exp_avg_sq."+name]})
	}
	data, err := EncodeSafetensors(ts, nil)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, ckptOptimizer), data, 0o644))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name() == ckptShardIndex || e.Name() == ckptManifest || strings.HasPrefix(e.Name(), shardFilePrefix) {
			require.NoError(t, os.Remove(filepath.Join(dir, e.Name())))
		}
	}
	manifest, err := dirManifest(dir)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, ckptManifest), manifest, 0o644))
}
