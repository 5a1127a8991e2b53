package loop

import (
	"context"
	"fmt"

	"github.com/mtrl-go/mtrl/tensor/collective"
)

// DefaultBucketBytes is the reduction's bucket when ReduceConfig.BucketBytes is 0: PyTorch
// DDP's 25 MiB.
const DefaultBucketBytes = 25 << 20

// ReduceConfig says how BucketedGradients sums over micro-batches and ranks.
type ReduceConfig struct {
	// Ordered keeps each micro-batch's gradient apart and adds them in the global micro-batch
	// order (collective.OrderedReduceScatter): HostGradients' bits, whatever the number of
	// ranks. Otherwise the micro-batches accumulate in the policy's gradients and the ranks'
	// sums are reduce-scattered (MPI_Reduce_scatter under MPI): one gradient of memory and
	// 2·(N−1)/N gradients of traffic per rank, with results that depend on N in the last bits
	// (every replica still holds the same bits).
	Ordered bool
	// BucketBytes cuts the flattened gradient into buckets of this many float32 bytes (0:
	// DefaultBucketBytes), each reduced on its own and split evenly over the ranks, as FSDP
	// splits each unit's flat parameter: the reduction's temporaries are one bucket.
	BucketBytes int
}

// flatLayout is the parameters flattened in order, cut into buckets, each bucket split over
// the ranks by collective.Shard: rank r owns the r-th piece of every bucket.
type flatLayout struct {
	params     []Param
	sizes      []int
	n, bucket  int
	rank, size int
}

func newFlatLayout(params []Param, rc ReduceConfig, rank, size int) (flatLayout, error) {
	if rc.BucketBytes < 0 {
		return flatLayout{}, fmt.Errorf("loop: ReduceConfig.BucketBytes is %d, want >= 0", rc.BucketBytes)
	}
	if size < 1 || rank < 0 || rank >= size {
		return flatLayout{}, fmt.Errorf("loop: rank %d of %d ranks", rank, size)
	}
	l := flatLayout{params: params, rank: rank, size: size, bucket: max(1, rc.BucketBytes/4)}
	if rc.BucketBytes == 0 {
		l.bucket = DefaultBucketBytes / 4
	}
	for _, p := range params {
		l.sizes = append(l.sizes, p.Grad.Len())
		l.n += p.Grad.Len()
	}
	return l, nil
}

// buckets are the flattened ranges [lo, hi) reduced together.
func (l flatLayout) buckets() [][2]int {
	var out [][2]int
	for lo := 0; lo < l.n; lo += l.bucket {
		out = append(out, [2]int{lo, min(lo+l.bucket, l.n)})
	}
	return out
}

// piece is rank's share of bucket b (flattened indices).
func (l flatLayout) piece(b [2]int, rank int) (lo, hi int) {
	lo, hi = collective.Shard(b[1]-b[0], rank, l.size)
	return b[0] + lo, b[0] + hi
}

// owned are this rank's flattened ranges, in order.
func (l flatLayout) owned() [][2]int {
	var out [][2]int
	for _, b := range l.buckets() {
		if lo, hi := l.piece(b, l.rank); hi > lo {
			out = append(out, [2]int{lo, hi})
		}
	}
	return out
}

// slices returns, for the flattened range [lo, hi), the sub-slices of xs (one per parameter)
// that hold it, in order, with the parameter index of each.
func (l flatLayout) slices(xs [][]float32, lo, hi int) (parts [][]float32, index []int) {
	off := 0
	for i, x := range xs {
		a, b := max(lo, off), min(hi, off+len(x))
		if a < b {
			parts, index = append(parts, x[a-off:b-off]), append(index, i)
		}
		off += len(x)
	}
	return parts, index
}

// read copies the flattened range [lo, hi) of xs into dst; write copies src into it.
func (l flatLayout) read(dst []float32, xs [][]float32, lo, hi int) {
	parts, _ := l.slices(xs, lo, hi)
	at := 0
	for _, p := range parts {
		at += copy(dst[at:], p)
	}
}

func (l flatLayout) write(xs [][]float32, src []float32, lo, hi int) {
	parts, _ := l.slices(xs, lo, hi)
	at := 0
	for _, p := range parts {
		at += copy(p, src[at:])
	}
}

// BucketedGradients is the Gradients of host parameters whose reduction scales with the
// number of ranks: per bucket of the flattened gradient, a reduce-scatter, the scaling, and an
// all-gather of the shards (2·(N−1)/N gradients received per rank, against OrderedSum's
// (micro-batches of the other ranks) gradients). With ReduceConfig.Ordered its result is
// HostGradients' bit for bit; otherwise it depends on N in the last bits.
//
// The reduction runs after the mini-batch's last backward, or, with a policy that reports
// final gradients (FinalGradients), during it: see Overlap. Either way each bucket is reduced
// the same way, so the results are the same bits.
type BucketedGradients struct {
	layout flatLayout
	rc     ReduceConfig
	// shardOnly (ZeRO-2, ShardedAdamW's) skips the all-gather: Reduce leaves this rank's
	// pieces of the sum and zero elsewhere.
	shardOnly  bool
	pending    []float32 // Ordered: the collected micro-batch gradients, concatenated
	collected  int
	ov         *overlap // the reduction running next to the last backward, if any
	overlapped int      // buckets the last reduction started early
}

// NewBucketedGradients returns the Gradients of params (float32 host tensors; only Grad is
// read) for rank `rank` of `size` (the Comm the loop is given must match).
func NewBucketedGradients(params []Param, rc ReduceConfig, rank, size int) (*BucketedGradients, error) {
	if err := checkParams(params, false); err != nil {
		return nil, err
	}
	l, err := newFlatLayout(params, rc, rank, size)
	if err != nil {
		return nil, err
	}
	return &BucketedGradients{layout: l, rc: rc}, nil
}

// Collect implements Gradients. Without Ordered the micro-batches' gradients simply
// accumulate in the policy's (a Pass's Backward adds to them); during an overlapped reduction
// the last micro-batch's stays there too (the reduction reads it in place).
func (g *BucketedGradients) Collect() (err error) {
	g.collected++
	if g.rc.Ordered && g.ov == nil {
		g.pending, err = takeGrads(g.pending, g.layout.params)
	}
	return err
}

// Reduce implements Gradients.
func (g *BucketedGradients) Reduce(ctx context.Context, comm collective.Comm, scale float32) (received int64, err error) {
	if o := g.ov; o != nil {
		g.ov, g.overlapped = nil, o.started
		collected := g.collected
		g.pending, g.collected = nil, 0
		if scale != o.r.scale || collected <= o.r.k {
			_, _ = o.finish(true)
			return 0, fmt.Errorf("loop: Reduce (scale %g) after Overlap (scale %g) with no micro-batch collected since", scale, o.r.scale)
		}
		return o.finish(false)
	}
	g.overlapped = 0
	r, err := g.newRound(comm, scale, false)
	g.pending, g.collected = nil, 0
	if err != nil {
		return 0, err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	for _, b := range g.layout.buckets() {
		recv, err := r.bucket(ctx, b)
		if err != nil {
			return 0, err
		}
		received += recv
	}
	return received, nil
}

// round is one reduction of the collected micro-batches, bucket by bucket.
type round struct {
	g     *BucketedGradients
	comm  collective.Comm
	scale float32
	gs    [][]float32 // the policy's gradients
	// Ordered: the k micro-batch gradients collected apart, and live: the last one is still
	// in gs (an overlapped reduction).
	pending    []float32
	k          int
	live       bool
	buf, local []float32
}

func (g *BucketedGradients) newRound(comm collective.Comm, scale float32, live bool) (*round, error) {
	l := g.layout
	if size, rank := commShape(comm); size != l.size || rank != l.rank {
		return nil, fmt.Errorf("loop: gradients laid out for rank %d of %d, reduced by rank %d of %d", l.rank, l.size, rank, size)
	}
	if !live && g.collected == 0 {
		return nil, fmt.Errorf("loop: Reduce before any micro-batch was collected")
	}
	gs, err := gradSlices(l.params)
	if err != nil {
		return nil, err
	}
	return &round{g: g, comm: comm, scale: scale, gs: gs, pending: g.pending, k: g.collected,
		live: live && g.rc.Ordered, buf: make([]float32, min(l.bucket, l.n))}, nil
}

// bucket reduces the flattened range b over the micro-batches and ranks and writes scale × the
// sum (ZeRO-2: this rank's piece of it, zero elsewhere) into the policy's gradients.
func (r *round) bucket(ctx context.Context, b [2]int) (received int64, err error) {
	g, l := r.g, r.g.layout
	n := b[1] - b[0]
	lo, hi := l.piece(b, l.rank)
	buf := r.buf[:n]
	var shard []float32
	if g.rc.Ordered {
		r.local = r.local[:0]
		for m := range r.k {
			r.local = append(r.local, r.pending[m*l.n+b[0]:m*l.n+b[1]]...)
		}
		if r.live {
			parts, _ := l.slices(r.gs, b[0], b[1])
			for _, p := range parts {
				r.local = append(r.local, p...)
			}
		}
		shard, received, err = collective.OrderedReduceScatter(ctx, r.comm, r.local, n)
	} else {
		l.read(buf, r.gs, b[0], b[1])
		shard = make([]float32, hi-lo)
		received, err = collective.ReduceScatterFloat32(ctx, r.comm, buf, shard)
	}
	if err != nil {
		return 0, err
	}
	if r.scale != 1 {
		for i := range shard {
			shard[i] *= r.scale
		}
	}
	if g.shardOnly {
		clear(buf)
		copy(buf[lo-b[0]:], shard)
	} else {
		recv, err := collective.AllGatherShards(ctx, r.comm, shard, buf)
		if err != nil {
			return 0, err
		}
		received += recv
	}
	l.write(r.gs, buf, b[0], b[1])
	return received, nil
}

func commShape(c collective.Comm) (size, rank int) {
	if c == nil {
		return 1, 0
	}
	return c.Size(), c.Rank()
}
