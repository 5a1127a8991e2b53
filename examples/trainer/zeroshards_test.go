package main

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
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
