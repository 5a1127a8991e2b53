package loop_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// splitParams are the tiny model's weights as three parameters (row views of w and g), the
// middle one without weight decay, so buckets and shards cross parameter boundaries.
func splitParams(m *tiny) []loop.Param {
	var ps []loop.Param
	for i, r := range [][2]int{{0, 3}, {3, 5}, {5, 4 * respLen}} {
		ps = append(ps, loop.Param{Name: fmt.Sprint("w", i), Value: tensor.Must(m.w.Rows(r[0], r[1])),
			Grad: tensor.Must(m.g.Rows(r[0], r[1])), Decay: i != 1})
	}
	return ps
}

// mode builds a rank's Gradients and Optimizer.
type mode func(ps []loop.Param, rank, size int) (loop.Gradients, loop.Optimizer, error)

func unsharded(ps []loop.Param, _, _ int) (loop.Gradients, loop.Optimizer, error) {
	g, err := loop.NewHostGradients(ps)
	if err != nil {
		return nil, nil, err
	}
	o, err := loop.NewHostAdamW(ps, 0.9, 0.999, 1e-8, 0.01)
	return g, o, err
}

func bucketed(rc loop.ReduceConfig) mode {
	return func(ps []loop.Param, rank, size int) (loop.Gradients, loop.Optimizer, error) {
		g, err := loop.NewBucketedGradients(ps, rc, rank, size)
		if err != nil {
			return nil, nil, err
		}
		o, err := loop.NewHostAdamW(ps, 0.9, 0.999, 1e-8, 0.01)
		return g, o, err
	}
}

func sharded(stage loop.Sharding, rc loop.ReduceConfig) mode {
	return func(ps []loop.Param, rank, size int) (loop.Gradients, loop.Optimizer, error) {
		o, g, err := loop.NewShardedAdamW(ps, stage, rc, rank, size, 0.9, 0.999, 1e-8, 0.01)
		return g, o, err
	}
}

type run struct {
	metrics [][]map[string]float64 // per rank
	weights [][]float32            // per rank
}

// runRanks takes n steps on size in-process ranks with mode's Gradients and Optimizer.
func runRanks(t *testing.T, size, n int, md mode) run {
	return runPolicy(t, size, n, md, nil)
}

// runPolicy is runRanks with the policy of policy (nil: the tiny model's) over the parameters
// the Gradients get; check, when not nil, sees each rank's Gradients after the steps.
func runPolicy(t *testing.T, size, n int, md mode, policy func(*tiny, []loop.Param) loop.Policy[prompt], check ...func(rank int, g loop.Gradients)) run {
	t.Helper()
	out := run{metrics: make([][]map[string]float64, size), weights: make([][]float32, size)}
	err := collective.Run(context.Background(), size, func(ctx context.Context, c collective.Comm) error {
		s := newSetup()
		p := s.parts(c)
		ps := splitParams(s.model)
		if policy != nil {
			p.Policy = policy(s.model, ps)
		}
		var err error
		if p.Gradients, p.Optimizer, err = md(ps, c.Rank(), c.Size()); err != nil {
			return err
		}
		defer func() {
			for _, f := range check {
				f(c.Rank(), p.Gradients)
			}
		}()
		l, err := loop.New(s.cfg, p)
		if err != nil {
			return err
		}
		out.metrics[c.Rank()] = steps(t, l, n)
		out.weights[c.Rank()] = weights(s.model)
		return nil
	})
	require.NoError(t, err)
	return out
}

// smallBuckets puts the 40 weights in 4 buckets of 11, 11, 11 and 7.
const smallBuckets = 44

// TestOrderedModesBitIdentical: the ordered bucketed reduction, and ZeRO-1 and ZeRO-2 with it,
// take the steps of one rank with HostGradients and HostAdamW bit for bit, on 1, 2 and 4 ranks:
// metrics and weights.
func TestOrderedModesBitIdentical(t *testing.T) {
	want := runRanks(t, 1, 3, unsharded)
	rc := loop.ReduceConfig{Ordered: true, BucketBytes: smallBuckets}
	for name, md := range map[string]mode{"bucketed": bucketed(rc), "zero1": sharded(loop.ShardOptimizer, rc),
		"zero2": sharded(loop.ShardGradients, rc), "zero2-one-bucket": sharded(loop.ShardGradients, loop.ReduceConfig{Ordered: true})} {
		for _, size := range []int{1, 2, 4} {
			t.Run(fmt.Sprint(name, "/", size), func(t *testing.T) {
				got := runRanks(t, size, 3, md)
				for r := range size {
					require.Equal(t, want.weights[0], got.weights[r], "rank %d weights", r)
					assert.Equal(t, want.metrics[0], got.metrics[r], "rank %d metrics", r)
				}
			})
		}
	}
}

// TestBucketedSum: the bucketed reduce-scatter + all-gather of 1, 2 and 4 ranks' micro-batch
// gradients equals the float64 sum within the float32 rounding of the additions (each
// element's error at most (terms−1)·2^-24 · Σ|terms|), and every rank holds the same bits.
func TestBucketedSum(t *testing.T) {
	const n, micro = 40, 3 // micro-batches per rank
	for _, size := range []int{1, 2, 4} {
		grads := make([][]float32, size*micro) // every rank's micro-batch gradients
		r := rand.New(rand.NewPCG(1, uint64(size)))
		for i := range grads {
			grads[i] = make([]float32, n)
			for j := range grads[i] {
				grads[i][j] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(6)-3)))
			}
		}
		got := make([][]float32, size)
		var recv [4]int64
		err := collective.Run(context.Background(), size, func(ctx context.Context, c collective.Comm) error {
			s := newSetup()
			ps := splitParams(s.model)
			g, err := loop.NewBucketedGradients(ps, loop.ReduceConfig{BucketBytes: smallBuckets}, c.Rank(), c.Size())
			if err != nil {
				return err
			}
			gv, _ := s.model.g.Float32s()
			for m := range micro {
				for j, x := range grads[c.Rank()*micro+m] {
					gv[j] += x // a backward adds to the gradient
				}
				if err := g.Collect(); err != nil {
					return err
				}
			}
			if recv[c.Rank()], err = g.Reduce(ctx, c, 0.5); err != nil {
				return err
			}
			got[c.Rank()] = append([]float32(nil), gv...)
			return nil
		})
		require.NoError(t, err)
		terms := float64(size * micro)
		for j := range n {
			var sum, abs float64
			for _, gr := range grads {
				sum, abs = sum+float64(gr[j]), abs+math.Abs(float64(gr[j]))
			}
			assert.InDelta(t, 0.5*sum, got[0][j], 0.5*(terms-1)*0x1p-24*abs+1e-45, "size %d element %d", size, j)
			for rk := 1; rk < size; rk++ {
				require.Equal(t, math.Float32bits(got[0][j]), math.Float32bits(got[rk][j]), "size %d rank %d element %d", size, rk, j)
			}
		}
		// Per bucket of b values a rank receives (N−1)·⌈b/N⌉ in the reduce-scatter (its piece
		// from each other rank) and (N−1)·⌈b/N⌉ in the padded all-gather.
		if size > 1 {
			var want int64
			for lo := 0; lo < n; lo += smallBuckets / 4 {
				b := min(smallBuckets/4, n-lo)
				plo, phi := collective.Shard(b, 0, size)
				want += int64(size-1) * 4 * int64(phi-plo+(b+size-1)/size)
			}
			assert.Equal(t, want, recv[0], "size %d: bytes received by rank 0", size)
		}
	}
}

// TestBucketedRanksAgree: the unordered bucketed reduction (the scaling one) keeps every
// replica bit-identical and stays within 1e-5 of one rank's weights after 3 steps; ZeRO-2 with
// it too.
func TestBucketedRanksAgree(t *testing.T) {
	want := runRanks(t, 1, 3, unsharded)
	rc := loop.ReduceConfig{BucketBytes: smallBuckets}
	for name, md := range map[string]mode{"bucketed": bucketed(rc), "zero2": sharded(loop.ShardGradients, rc)} {
		for _, size := range []int{2, 4} {
			got := runRanks(t, size, 3, md)
			for r := range size {
				require.Equal(t, got.weights[0], got.weights[r], "%s: %d ranks: rank %d weights", name, size, r)
			}
			for j, w := range want.weights[0] {
				assert.InDelta(t, w, got.weights[0][j], 1e-5, "%s: %d ranks: weight %d", name, size, j)
			}
		}
	}
}

// TestShardedResumeAtAnotherN: ZeRO-2 at 2 ranks for 2 steps, its moments saved as the ranks'
// shards; resumed at 4 ranks (ZeRO-2) and at 1 rank (HostAdamW, the shards joined) the last 2
// steps are those of the run that went on, bit for bit.
func TestShardedResumeAtAnotherN(t *testing.T) {
	rc := loop.ReduceConfig{Ordered: true, BucketBytes: smallBuckets}
	want := runRanks(t, 1, 4, unsharded)

	var shards []loop.MomentShard
	var state loop.State
	var w []float32
	var adamT, epoch, pos int
	err := collective.Run(context.Background(), 2, func(ctx context.Context, c collective.Comm) error {
		s := newSetup()
		p := s.parts(c)
		o, g, err := loop.NewShardedAdamW(splitParams(s.model), loop.ShardGradients, rc, c.Rank(), 2, 0.9, 0.999, 1e-8, 0.01)
		if err != nil {
			return err
		}
		p.Gradients, p.Optimizer = g, o
		l, err := loop.New(s.cfg, p)
		if err != nil {
			return err
		}
		steps(t, l, 2)
		mine, err := collective.AllGatherValues(ctx, c, o.Moments())
		if c.Rank() == 0 {
			shards, state, w, adamT = mine, l.State(), weights(s.model), o.T
			epoch, pos = s.data.Position()
		}
		return err
	})
	require.NoError(t, err)

	resume := func(t *testing.T, s *setup, c collective.Comm, rank, size int) *loop.Loop[prompt] {
		bw, _ := s.model.w.Float32s()
		copy(bw, w)
		require.NoError(t, s.data.Seek(epoch, pos))
		p := s.parts(c)
		ps := splitParams(s.model)
		if size == 1 {
			o, err := loop.NewHostAdamW(ps, 0.9, 0.999, 1e-8, 0.01)
			require.NoError(t, err)
			full, _, err := loop.NewShardedAdamW(ps, loop.ShardGradients, rc, 0, 1, 0.9, 0.999, 1e-8, 0.01)
			require.NoError(t, err)
			require.NoError(t, full.SetMoments(shards))
			var m loop.MomentShard // one rank owns every bucket: join them, split per parameter
			for _, b := range full.Moments() {
				m.M, m.V = append(m.M, b.M...), append(m.V, b.V...)
			}
			for i, at := 0, 0; i < len(o.M); i++ {
				copy(o.M[i], m.M[at:])
				at += copy(o.V[i], m.V[at:])
			}
			o.T = adamT
			p.Optimizer = o
		} else {
			o, g, err := loop.NewShardedAdamW(ps, loop.ShardGradients, rc, rank, size, 0.9, 0.999, 1e-8, 0.01)
			require.NoError(t, err)
			require.NoError(t, o.SetMoments(shards))
			o.T = adamT
			p.Gradients, p.Optimizer = g, o
		}
		l, err := loop.New(s.cfg, p)
		require.NoError(t, err)
		require.NoError(t, l.Restore(state))
		return l
	}
	one := newSetup()
	assert.Equal(t, want.metrics[0][2:], steps(t, resume(t, one, nil, 0, 1), 2), "resumed at 1 rank")
	assert.Equal(t, want.weights[0], weights(one.model), "resumed at 1 rank")

	got := make([][]float32, 4)
	err = collective.Run(context.Background(), 4, func(ctx context.Context, c collective.Comm) error {
		s := newSetup()
		m := steps(t, resume(t, s, c, c.Rank(), 4), 2)
		assert.Equal(t, want.metrics[0][2:], m, "resumed at 4 ranks: rank %d", c.Rank())
		got[c.Rank()] = weights(s.model)
		return nil
	})
	require.NoError(t, err)
	for r := range got {
		assert.Equal(t, want.weights[0], got[r], "resumed at 4 ranks: rank %d", r)
	}
}

func TestShardedRejects(t *testing.T) {
	s := newSetup()
	ps := splitParams(s.model)
	_, _, err := loop.NewShardedAdamW(ps, 3, loop.ReduceConfig{}, 0, 2, 0.9, 0.999, 1e-8, 0)
	assert.ErrorContains(t, err, "sharding stage")
	_, _, err = loop.NewShardedAdamW(ps, loop.ShardGradients, loop.ReduceConfig{}, 2, 2, 0.9, 0.999, 1e-8, 0)
	assert.ErrorContains(t, err, "rank 2 of 2")
	_, err = loop.NewBucketedGradients(ps, loop.ReduceConfig{BucketBytes: -1}, 0, 1)
	assert.ErrorContains(t, err, "BucketBytes")
	o, g, err := loop.NewShardedAdamW(ps, loop.ShardGradients, loop.ReduceConfig{}, 0, 2, 0.9, 0.999, 1e-8, 0)
	require.NoError(t, err)
	_, err = o.Step(1e-3, 1)
	assert.ErrorContains(t, err, "StepGroup")
	_, err = g.Reduce(context.Background(), nil, 1)
	assert.ErrorContains(t, err, "rank 0 of 2")
	assert.ErrorContains(t, o.SetMoments([]loop.MomentShard{{Lo: 0, Hi: 10, M: make([]float32, 10), V: make([]float32, 10)}}), "no moment shard")
	two := []loop.MomentShard{{Lo: 0, Hi: 30, M: make([]float32, 30), V: make([]float32, 30)}, {Lo: 20, Hi: 40, M: make([]float32, 20), V: make([]float32, 20)}}
	assert.ErrorContains(t, o.SetMoments(two), "overlap")
	assert.ErrorContains(t, o.SetMoments([]loop.MomentShard{{Lo: 0, Hi: 41, M: make([]float32, 41), V: make([]float32, 41)}}), "of 40 parameters")
}

// TestShardedNormIsHostNorm: ZeRO-2's ordered global norm is ClipGradNorm's float64 sum of the
// whole gradient bit for bit, on gradients whose squares round differently in another order.
func TestShardedNormIsHostNorm(t *testing.T) {
	grad := make([]float32, 4*respLen*vocab)
	r := rand.New(rand.NewPCG(5, 5))
	for i := range grad {
		grad[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(13)-6)))
	}
	want := loop.ClipGradNorm([][]float32{append([]float32(nil), grad...)}, 0)
	for _, size := range []int{2, 3, 4} {
		err := collective.Run(context.Background(), size, func(ctx context.Context, c collective.Comm) error {
			s := newSetup()
			o, _, err := loop.NewShardedAdamW(splitParams(s.model), loop.ShardGradients,
				loop.ReduceConfig{Ordered: true, BucketBytes: smallBuckets}, c.Rank(), c.Size(), 0.9, 0.999, 1e-8, 0)
			if err != nil {
				return err
			}
			g, _ := s.model.g.Float32s()
			copy(g, grad)
			norm, _, err := o.StepGroup(ctx, c, 0, 0)
			if err == nil && math.Float64bits(norm) != math.Float64bits(want) {
				err = fmt.Errorf("%d ranks: norm %v, ClipGradNorm %v", size, norm, want)
			}
			return err
		})
		require.NoError(t, err)
	}
}
