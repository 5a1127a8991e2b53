package loop_test

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl/loop"
	"github.com/stretchr/testify/require"
)

// The device data-parallel reduction and ZeRO optimizer run on any backend; here on the CPU
// with collective.HostTensors (the emulator's NCCL gives HostTensors' bits, cuda's
// TestNCCLCollectives; the trainer's TestDeviceModelPathDataParallel runs them on emulated
// devices).

// dpSizes are three parameters; 6-value buckets cross them.
var dpSizes = []int{7, 13, 5}

const dpBucketBytes = 6 * 4

func dpParams(t *testing.T, seed uint64) []loop.Param {
	rng := rand.New(rand.NewPCG(seed, 1))
	var ps []loop.Param
	for i, n := range dpSizes {
		w := make([]float32, n)
		for j := range w {
			w[j] = float32(rng.NormFloat64())
		}
		ps = append(ps, loop.Param{Name: string(rune('a' + i)), Value: tensor.Must(tensor.FromFloat32(w, n)),
			Grad: tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, n)), Decay: i != 1})
	}
	return ps
}

// microGrads are m micro-batch gradients (flattened) with magnitudes over 6 decades, so that
// the order of the float32 sums shows in the last bits.
func microGrads(m, step int) [][]float32 {
	rng := rand.New(rand.NewPCG(uint64(step), 2))
	n := 0
	for _, s := range dpSizes {
		n += s
	}
	out := make([][]float32, m)
	for i := range out {
		out[i] = make([]float32, n)
		for j := range out[i] {
			out[i][j] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(6)-3)))
		}
	}
	return out
}

// addGrad is a backward: p.Grad += g (flattened over ps).
func addGrad(t *testing.T, ps []loop.Param, g []float32, scale float32) {
	off := 0
	for _, p := range ps {
		v, err := p.Grad.Float32s()
		require.NoError(t, err)
		for j := range v {
			v[j] += scale * g[off+j]
		}
		off += len(v)
	}
}

func flatOf(t *testing.T, ts func(loop.Param) *tensor.Tensor, ps []loop.Param) []float32 {
	var out []float32
	for _, p := range ps {
		v, err := ts(p).Float32s()
		require.NoError(t, err)
		out = append(out, v...)
	}
	return out
}

func grads(p loop.Param) *tensor.Tensor  { return p.Grad }
func values(p loop.Param) *tensor.Tensor { return p.Value }

// dpRun runs `steps` optimizer steps of 8 micro-batches each over `world` ranks (rank r: a
// contiguous 8/world of them, its loss scaled by world as the trainer's token scaling does) and
// returns every rank's weights.
func dpRun(t *testing.T, world, steps int, cfg loop.DeviceReduceConfig, stage loop.Sharding, maxNorm float64) [][]float32 {
	t.Helper()
	out := make([][]float32, world)
	err := collective.Run(context.Background(), world, func(ctx context.Context, comm collective.Comm) error {
		r := comm.Rank()
		ps := dpParams(t, 1)
		coll, err := collective.NewHostTensors(comm)
		require.NoError(t, err)
		g, err := loop.NewDeviceReduce(ps, coll, cfg, r, world)
		require.NoError(t, err)
		var opt loop.Optimizer
		if stage != 0 {
			z, err := loop.NewDeviceShardedAdamW(g, stage, 0.9, 0.999, 1e-8, 0.1)
			require.NoError(t, err)
			opt = z
		} else {
			o, err := loop.NewDeviceAdamW(ps, 0.9, 0.999, 1e-8, 0.1)
			require.NoError(t, err)
			opt = o
		}
		for step := range steps {
			mbs := microGrads(8, step)
			for _, mb := range mbs[r*8/world : (r+1)*8/world] {
				addGrad(t, ps, mb, float32(world))
				require.NoError(t, g.Collect())
			}
			if _, err := g.Reduce(ctx, comm, 1/float32(world)); err != nil {
				return err
			}
			if z, ok := opt.(loop.GroupOptimizer); ok {
				_, _, err = z.StepGroup(ctx, comm, 1e-2, maxNorm)
			} else {
				_, err = opt.Step(1e-2, maxNorm)
			}
			if err != nil {
				return err
			}
		}
		out[r] = flatOf(t, values, ps)
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestDeviceReduceOrdered: the ordered reduction at 1, 2 and 4 ranks leaves the float32 sum
// of the 8 micro-batch gradients added left to right in the global order (computed here),
// bit for bit, on every rank.
func TestDeviceReduceOrdered(t *testing.T) {
	mbs := microGrads(8, 0)
	want := slices.Clone(mbs[0])
	for _, g := range mbs[1:] {
		for j, x := range g {
			want[j] += x
		}
	}
	for _, world := range []int{1, 2, 4} {
		err := collective.Run(context.Background(), world, func(ctx context.Context, comm collective.Comm) error {
			r := comm.Rank()
			ps := dpParams(t, 1)
			coll, err := collective.NewHostTensors(comm)
			require.NoError(t, err)
			g, err := loop.NewDeviceReduce(ps, coll, loop.DeviceReduceConfig{Ordered: true, BucketBytes: dpBucketBytes}, r, world)
			require.NoError(t, err)
			for _, mb := range mbs[r*8/world : (r+1)*8/world] {
				addGrad(t, ps, mb, float32(world))
				require.NoError(t, g.Collect())
			}
			recv, err := g.Reduce(ctx, comm, 1/float32(world))
			require.NoError(t, err)
			require.Equal(t, int64((world-1)*(8/world)*len(want)*4), recv, "bytes from the others")
			require.Equal(t, want, flatOf(t, grads, ps), "rank %d of %d", r, world)
			return nil
		})
		require.NoError(t, err)
	}
}

// TestDeviceReduceBucketed: micro-batches accumulated in place and all-reduced per bucket
// equal the float64 sum within (terms−1)·2⁻²⁴·Σ|terms| (positive and negative terms), with
// the same bits on every rank.
func TestDeviceReduceBucketed(t *testing.T) {
	mbs := microGrads(8, 0)
	for _, world := range []int{2, 4} {
		got := make([][]float32, world)
		err := collective.Run(context.Background(), world, func(ctx context.Context, comm collective.Comm) error {
			r := comm.Rank()
			ps := dpParams(t, 1)
			coll, err := collective.NewHostTensors(comm)
			require.NoError(t, err)
			g, err := loop.NewDeviceReduce(ps, coll, loop.DeviceReduceConfig{BucketBytes: dpBucketBytes}, r, world)
			require.NoError(t, err)
			for _, mb := range mbs[r*8/world : (r+1)*8/world] {
				addGrad(t, ps, mb, 1)
				require.NoError(t, g.Collect())
			}
			recv, err := g.Reduce(ctx, comm, 1)
			require.NoError(t, err)
			require.Positive(t, recv)
			got[r] = flatOf(t, grads, ps)
			return nil
		})
		require.NoError(t, err)
		for j := range got[0] {
			var sum, abs float64
			for _, g := range mbs {
				sum, abs = sum+float64(g[j]), abs+math.Abs(float64(g[j]))
			}
			require.InDelta(t, sum, float64(got[0][j]), 7*abs/(1<<24), "value %d at %d ranks", j, world)
		}
		for r := 1; r < world; r++ {
			require.Equal(t, got[0], got[r], "rank %d", r)
		}
	}
}

// TestDeviceShardedAdamW: with the ordered reduction, ZeRO-1 and ZeRO-2 at 1, 2 and 4 ranks take
// DeviceAdamW's steps on one rank bit for bit on every rank (clipping active); with the
// unordered reduction, ZeRO-2 (reduce-scatter, partial norms all-reduced) takes NO_SHARD's
// steps at the same N bit for bit without clipping, and within 1e-6 relative with it.
func TestDeviceShardedAdamW(t *testing.T) {
	const steps, clip = 3, 0.5
	ordered := loop.DeviceReduceConfig{Ordered: true, BucketBytes: dpBucketBytes}
	want := dpRun(t, 1, steps, ordered, 0, clip)[0]
	for _, world := range []int{1, 2, 4} {
		for _, stage := range []loop.Sharding{loop.ShardOptimizer, loop.ShardGradients} {
			for r, w := range dpRun(t, world, steps, ordered, stage, clip) {
				require.Equal(t, want, w, "ordered %v at %d ranks: rank %d", stage, world, r)
			}
		}
	}
	bucketed := loop.DeviceReduceConfig{BucketBytes: dpBucketBytes}
	shard := loop.DeviceReduceConfig{BucketBytes: dpBucketBytes, ShardOnly: true}
	for _, world := range []int{2, 4} {
		noShard := dpRun(t, world, steps, bucketed, 0, 0)
		for r, w := range dpRun(t, world, steps, shard, loop.ShardGradients, 0) {
			require.Equal(t, noShard[0], w, "bucketed ZeRO-2 at %d ranks, no clipping: rank %d", world, r)
		}
		noShard = dpRun(t, world, steps, bucketed, 0, clip)
		for r, w := range dpRun(t, world, steps, shard, loop.ShardGradients, clip) {
			for j := range w {
				require.InDelta(t, noShard[0][j], w[j], 1e-6*math.Abs(float64(noShard[0][j]))+1e-9, "bucketed ZeRO-2 at %d ranks, clipped: rank %d value %d", world, r, j)
			}
		}
	}
}

// TestDeviceShardedMoments: moments written by 2 ranks (their 6-value buckets' halves) set
// into 1, 3 and 4 ranks give back the same values, each rank its ranges; a gap is an error.
func TestDeviceShardedMoments(t *testing.T) {
	shardsOf := func(world int, set []loop.MomentShard) [][]loop.MomentShard {
		out := make([][]loop.MomentShard, world)
		for r := range world {
			g, err := loop.NewDeviceReduce(dpParams(t, 1), okTensors{r, world}, loop.DeviceReduceConfig{BucketBytes: dpBucketBytes}, r, world)
			require.NoError(t, err)
			z, err := loop.NewDeviceShardedAdamW(g, loop.ShardGradients, 0.9, 0.999, 1e-8, 0)
			require.NoError(t, err)
			if set == nil { // distinct values: the index and the rank
				var ms []loop.MomentShard
				zs, err := z.Moments()
				require.NoError(t, err)
				for _, s := range zs {
					for j := range s.M {
						s.M[j], s.V[j] = float32(s.Lo+j), float32(-(s.Lo + j))
					}
					ms = append(ms, s)
				}
				require.NoError(t, z.SetMoments(ms))
			} else {
				require.NoError(t, z.SetMoments(set))
			}
			out[r], err = z.Moments()
			require.NoError(t, err)
		}
		return out
	}
	flat := func(per [][]loop.MomentShard) (m, v []float32) {
		var all []loop.MomentShard
		for _, s := range per {
			all = append(all, s...)
		}
		slices.SortFunc(all, func(a, b loop.MomentShard) int { return a.Lo - b.Lo })
		for _, s := range all {
			require.Equal(t, len(m), s.Lo, "the ranks' ranges tile the parameters")
			m, v = append(m, s.M...), append(v, s.V...)
		}
		return m, v
	}
	two := shardsOf(2, nil)
	var written []loop.MomentShard
	for _, s := range two {
		written = append(written, s...)
	}
	m2, v2 := flat(two)
	require.Len(t, m2, 25)
	for _, world := range []int{1, 3, 4} {
		m, v := flat(shardsOf(world, written))
		require.Equal(t, m2, m, "%d ranks", world)
		require.Equal(t, v2, v, "%d ranks", world)
	}
	g, err := loop.NewDeviceReduce(dpParams(t, 1), nil, loop.DeviceReduceConfig{BucketBytes: dpBucketBytes}, 0, 1)
	require.NoError(t, err)
	z, err := loop.NewDeviceShardedAdamW(g, loop.ShardOptimizer, 0.9, 0.999, 1e-8, 0)
	require.NoError(t, err)
	require.ErrorContains(t, z.SetMoments(written[1:]), "no moment shard holds")
	require.ErrorContains(t, z.SetMoments(append(written, written[0])), "overlap")
}

// okTensors is a stand-in rank for layouts that never communicate.
type okTensors struct{ rank, size int }

func (o okTensors) Rank() int                                                         { return o.rank }
func (o okTensors) Size() int                                                         { return o.size }
func (okTensors) AllReduce(context.Context, *tensor.Tensor, collective.Op) error      { return nil }
func (okTensors) ReduceScatter(context.Context, *tensor.Tensor, *tensor.Tensor) error { return nil }
func (okTensors) AllGather(context.Context, *tensor.Tensor, *tensor.Tensor) error     { return nil }
func (okTensors) Broadcast(context.Context, *tensor.Tensor, int) error                { return nil }

// TestDeviceReduceRefuses: mismatched collectives and layouts are errors, not panics.
func TestDeviceReduceRefuses(t *testing.T) {
	ps := dpParams(t, 1)
	_, err := loop.NewDeviceReduce(ps, nil, loop.DeviceReduceConfig{}, 0, 2)
	require.ErrorContains(t, err, "tensor collectives")
	_, err = loop.NewDeviceReduce(ps, okTensors{1, 2}, loop.DeviceReduceConfig{}, 0, 2)
	require.ErrorContains(t, err, "tensor collectives")
	_, err = loop.NewDeviceReduce(nil, nil, loop.DeviceReduceConfig{}, 0, 1)
	require.Error(t, err)
	g, err := loop.NewDeviceReduce(ps, nil, loop.DeviceReduceConfig{ShardOnly: true}, 0, 1)
	require.NoError(t, err)
	_, err = g.Reduce(context.Background(), nil, 1)
	require.ErrorContains(t, err, "before any micro-batch")
	_, err = loop.NewDeviceShardedAdamW(g, loop.ShardOptimizer, 0.9, 0.999, 1e-8, 0)
	require.ErrorContains(t, err, "ShardGradients")
}
