package loop

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/mtrl-go/mtrl/tensor/collective"
)

// GroupOptimizer is an Optimizer whose step is a collective of the ranks (ShardedAdamW): the
// loop calls StepGroup on every rank, with its Comm, instead of Step.
type GroupOptimizer interface {
	Optimizer
	// StepGroup is Step on every rank of comm together; received is the bytes this rank
	// received from the others.
	StepGroup(ctx context.Context, comm collective.Comm, lr, maxNorm float64) (norm float64, received int64, err error)
}

// Sharding is ShardedAdamW's ZeRO stage.
type Sharding int

const (
	// ShardOptimizer (ZeRO-1): each rank keeps the AdamW moments of its shard; the reduced
	// gradient is whole on every rank.
	ShardOptimizer Sharding = 1
	// ShardGradients (ZeRO-2): the reduced gradient too is only reduce-scattered, so each rank
	// receives only its shard of it (FSDP's SHARD_GRAD_OP).
	ShardGradients Sharding = 2
)

func (s Sharding) String() string {
	switch s {
	case ShardOptimizer:
		return "zero1"
	case ShardGradients:
		return "zero2"
	}
	return fmt.Sprintf("Sharding(%d)", int(s))
}

// ShardedAdamW is AdamW with its moments sharded over the ranks (ZeRO-1/2): each rank keeps
// the moments of its pieces of the flattened parameters (the rank's share of every bucket of
// its BucketedGradients), clips with the global norm, updates its pieces, and all-gathers the
// updated pieces so every replica holds the whole parameters again. Its moments take 2/N of
// HostAdamW's memory; the parameter all-gather adds (N−1)/N parameters received per rank.
//
// With ReduceConfig.Ordered the global norm is the one sum of squares HostAdamW computes,
// passed from rank to rank in the flattened order (one 8-byte broadcast per bucket and rank;
// ZeRO-1 computes it locally), so the weights are HostAdamW's with HostGradients bit for bit.
// Otherwise each rank's partial sum is all-reduced.
type ShardedAdamW struct {
	// AdamW holds the moments of this rank's pieces (one slice per piece of a parameter, in
	// the flattened order) and the step count.
	*AdamW
	layout  flatLayout
	stage   Sharding
	ordered bool
	decay   []bool // per piece
}

// NewShardedAdamW returns the optimizer of rank `rank` of `size` over params (float32 host
// tensors) and the Gradients it works with: give both to the loop (Parts.Optimizer,
// Parts.Gradients), whose Comm must be of that rank and size.
func NewShardedAdamW(params []Param, stage Sharding, rc ReduceConfig, rank, size int, beta1, beta2, eps, weightDecay float64) (*ShardedAdamW, *BucketedGradients, error) {
	if stage != ShardOptimizer && stage != ShardGradients {
		return nil, nil, fmt.Errorf("loop: sharding stage %v, want ShardOptimizer or ShardGradients", stage)
	}
	if err := checkParams(params, true); err != nil {
		return nil, nil, err
	}
	g, err := NewBucketedGradients(params, rc, rank, size)
	if err != nil {
		return nil, nil, err
	}
	g.shardOnly = stage == ShardGradients
	o := &ShardedAdamW{layout: g.layout, stage: stage, ordered: rc.Ordered}
	ws, _, err := paramSlices(params)
	if err != nil {
		return nil, nil, err
	}
	var sizes []int
	for _, r := range o.layout.owned() {
		parts, index := o.layout.slices(ws, r[0], r[1])
		for k, p := range parts {
			sizes = append(sizes, len(p))
			o.decay = append(o.decay, params[index[k]].Decay)
		}
	}
	o.AdamW = NewAdamW(sizes, beta1, beta2, eps, weightDecay)
	return o, g, nil
}

// Steps is the number of steps taken.
func (o *ShardedAdamW) Steps() int { return o.T }

// Step implements Optimizer for one rank; with several, the loop calls StepGroup.
func (o *ShardedAdamW) Step(lr, maxNorm float64) (float64, error) {
	if o.layout.size != 1 {
		return 0, fmt.Errorf("loop: ShardedAdamW of %d ranks steps through StepGroup", o.layout.size)
	}
	norm, _, err := o.StepGroup(context.Background(), nil, lr, maxNorm)
	return norm, err
}

// StepGroup implements GroupOptimizer.
func (o *ShardedAdamW) StepGroup(ctx context.Context, comm collective.Comm, lr, maxNorm float64) (norm float64, received int64, err error) {
	l := o.layout
	if size, rank := commShape(comm); size != l.size || rank != l.rank {
		return 0, 0, fmt.Errorf("loop: optimizer laid out for rank %d of %d, stepped by rank %d of %d", l.rank, l.size, rank, size)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ws, gs, err := paramSlices(l.params)
	if err != nil {
		return 0, 0, err
	}
	defer zero(gs)
	var wp, gp [][]float32 // this rank's pieces
	for _, r := range l.owned() {
		w, _ := l.slices(ws, r[0], r[1])
		g, _ := l.slices(gs, r[0], r[1])
		wp, gp = append(wp, w...), append(gp, g...)
	}
	if norm, err = o.globalNorm(ctx, comm, gs); err != nil {
		return 0, 0, err
	}
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return norm, 0, nil
	}
	clipTo(gp, norm, maxNorm)
	if err := o.Update(wp, gp, o.decay, lr); err != nil {
		return 0, 0, err
	}
	buf := make([]float32, min(l.bucket, l.n))
	for _, b := range l.buckets() {
		lo, hi := l.piece(b, l.rank)
		shard := make([]float32, hi-lo)
		l.read(shard, ws, lo, hi)
		recv, err := collective.AllGatherShards(ctx, comm, shard, buf[:b[1]-b[0]])
		if err != nil {
			return 0, 0, err
		}
		received += recv
		l.write(ws, buf[:b[1]-b[0]], b[0], b[1])
	}
	return norm, received, nil
}

// globalNorm is the L2 norm of the whole reduced gradient.
func (o *ShardedAdamW) globalNorm(ctx context.Context, comm collective.Comm, gs [][]float32) (float64, error) {
	l := o.layout
	if o.stage == ShardOptimizer || l.size == 1 { // the whole gradient is here
		return math.Sqrt(sumSquares(0, gs)), nil
	}
	if !o.ordered {
		var part float64
		for _, r := range l.owned() {
			p, _ := l.slices(gs, r[0], r[1])
			part = sumSquares(part, p)
		}
		v := []float64{part}
		if err := comm.AllReduceFloat64(ctx, v, collective.Sum); err != nil {
			return 0, err
		}
		return math.Sqrt(v[0]), nil
	}
	// HostAdamW's sum, element by element in the flattened order: each piece's owner
	// continues it and passes it on.
	var acc float64
	var b8 [8]byte
	for _, b := range l.buckets() {
		for q := range l.size {
			lo, hi := l.piece(b, q)
			if hi == lo {
				continue
			}
			if q == l.rank {
				p, _ := l.slices(gs, lo, hi)
				acc = sumSquares(acc, p)
				binary.LittleEndian.PutUint64(b8[:], math.Float64bits(acc))
			}
			if err := comm.Broadcast(ctx, b8[:], q); err != nil {
				return 0, err
			}
			acc = math.Float64frombits(binary.LittleEndian.Uint64(b8[:]))
		}
	}
	return math.Sqrt(acc), nil
}

// MomentShard is AdamW's moments of the flattened parameters [Lo, Hi): a rank's share, and a
// checkpoint's unit (rank-independent: shards written by N ranks load at any other N).
type MomentShard struct {
	Lo, Hi int
	M, V   []float32
}

// Moments returns copies of this rank's moments, one shard per owned range.
func (o *ShardedAdamW) Moments() []MomentShard {
	var out []MomentShard
	k := 0
	for _, r := range o.layout.owned() {
		s := MomentShard{Lo: r[0], Hi: r[1]}
		for n := 0; n < r[1]-r[0]; k++ {
			s.M, s.V = append(s.M, o.M[k]...), append(s.V, o.V[k]...)
			n += len(o.M[k])
		}
		out = append(out, s)
	}
	return out
}

// SetMoments sets this rank's moments from shards written by any number of ranks (or one
// whole-range shard of an unsharded AdamW): they must not overlap and must cover every value
// this rank owns. The step count is not touched.
func (o *ShardedAdamW) SetMoments(shards []MomentShard) error {
	byLo := slices.Clone(shards)
	slices.SortFunc(byLo, func(a, b MomentShard) int { return a.Lo - b.Lo })
	for i, s := range byLo {
		if s.Lo < 0 || s.Hi > o.layout.n || s.Hi < s.Lo || len(s.M) != s.Hi-s.Lo || len(s.V) != s.Hi-s.Lo {
			return fmt.Errorf("loop: moment shard [%d, %d) with %d and %d values, of %d parameters", s.Lo, s.Hi, len(s.M), len(s.V), o.layout.n)
		}
		if i > 0 && s.Lo < byLo[i-1].Hi && s.Hi > s.Lo {
			return fmt.Errorf("loop: moment shards [%d, %d) and [%d, %d) overlap", byLo[i-1].Lo, byLo[i-1].Hi, s.Lo, s.Hi)
		}
	}
	m := make([]float32, 0)
	v := make([]float32, 0)
	k := 0
	for _, r := range o.layout.owned() {
		m, v = m[:0], v[:0]
		for at := r[0]; at < r[1]; {
			s, ok := shardAt(shards, at)
			if !ok {
				return fmt.Errorf("loop: no moment shard holds parameter value %d", at)
			}
			end := min(r[1], s.Hi)
			m, v = append(m, s.M[at-s.Lo:end-s.Lo]...), append(v, s.V[at-s.Lo:end-s.Lo]...)
			at = end
		}
		for n := 0; n < len(m); k++ {
			copy(o.M[k], m[n:])
			copy(o.V[k], v[n:])
			n += len(o.M[k])
		}
	}
	return nil
}

func shardAt(shards []MomentShard, at int) (MomentShard, bool) {
	for _, s := range shards {
		if at >= s.Lo && at < s.Hi {
			return s, true
		}
	}
	return MomentShard{}, false
}

// FlatMoments is an unsharded AdamW's moments as one whole-range shard (for SetMoments, or a
// checkpoint written in the sharded layout).
func FlatMoments(o *AdamW) MomentShard {
	var s MomentShard
	for i := range o.M {
		s.M, s.V = append(s.M, o.M[i]...), append(s.V, o.V[i]...)
	}
	s.Hi = len(s.M)
	return s
}
