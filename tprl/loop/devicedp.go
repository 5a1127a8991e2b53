package loop

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
)

// Data parallelism of parameters on a device, one device per rank: the gradients are
// reduced, and with ZeRO the optimizer's pieces gathered, on device buffers through a
// collective.Tensors (cuda.NCCL; collective.HostTensors stages through the host), never
// through host copies of the gradients. The host Comm the loop passes carries only counts,
// an 8-byte norm and barriers. The same code runs on the CPU backend with HostTensors.

// DeviceReduceConfig says how DeviceReduce sums over micro-batches and ranks.
type DeviceReduceConfig struct {
	// Ordered keeps each micro-batch's gradient apart, all-gathers them and adds them in the
	// global micro-batch order (rank 0's first), so the sum, and every weight after it, is the
	// same bits at any number of ranks. Otherwise the micro-batches accumulate in the
	// parameters' gradients and each bucket is all-reduced (or reduce-scattered, ShardOnly):
	// 2(N−1)/N gradients of traffic, results that depend on N in the last bits.
	Ordered bool
	// BucketBytes cuts the flattened gradient into buckets of this many float32 bytes (0:
	// DefaultBucketBytes); each is one collective, and with ZeRO each rank owns an equal
	// 1/N of every bucket (NCCL's reduce-scatter chunks).
	BucketBytes int
	// ShardOnly (ZeRO-2 with the unordered reduction) reduce-scatters each bucket: this rank
	// receives only its pieces of the sum, which DeviceShardedAdamW reads.
	ShardOnly bool
}

// DeviceReduce is the Gradients of parameters on a device (any backend) at rank `rank` of
// `size`: BucketedGradients' reduction, run where the gradients live.
type DeviceReduce struct {
	params []Param
	b      tensor.Backend
	coll   collective.Tensors
	cfg    DeviceReduceConfig
	l      devLayout
	// Ordered: the collected micro-batch gradients, flattened, in order.
	pending []*tensor.Tensor
	// Unordered: the micro-batches collected since the last reduction; flat is the padded
	// flattened gradient the collectives reduce in place, shard (ShardOnly) this rank's
	// pieces of the reduced sum (valid until the optimizer's step).
	collected int
	flat      *tensor.Tensor
	shard     *tensor.Tensor
}

// devLayout is the flattened parameters cut into buckets; bucket k is padded to size·c_k
// values (c_k = ⌈len/size⌉) in the padded layout, and rank r owns values [r·c_k, (r+1)·c_k)
// of it that are real.
type devLayout struct {
	offs       []int // per parameter: its flattened offset
	n, bucket  int
	rank, size int
}

type devBucket struct {
	lo, hi int // flattened values
	c      int // chunk: values per rank
	padded int // offset in the padded layout
	shard  int // offset of this rank's chunk in the shard buffer
}

func newDevLayout(ps []Param, bucketBytes, rank, size int) (devLayout, error) {
	if bucketBytes < 0 {
		return devLayout{}, fmt.Errorf("loop: bucket of %d bytes, want >= 0", bucketBytes)
	}
	if size < 1 || rank < 0 || rank >= size {
		return devLayout{}, fmt.Errorf("loop: rank %d of %d ranks", rank, size)
	}
	if bucketBytes == 0 {
		bucketBytes = DefaultBucketBytes
	}
	l := devLayout{rank: rank, size: size, bucket: max(1, bucketBytes/4)}
	for _, p := range ps {
		l.offs = append(l.offs, l.n)
		l.n += p.Value.Len()
	}
	return l, nil
}

func (l devLayout) buckets() []devBucket {
	var out []devBucket
	padded, shard := 0, 0
	for lo := 0; lo < l.n; lo += l.bucket {
		hi := min(lo+l.bucket, l.n)
		c := (hi - lo + l.size - 1) / l.size
		out = append(out, devBucket{lo: lo, hi: hi, c: c, padded: padded, shard: shard})
		padded += l.size * c
		shard += c
	}
	return out
}

// piece is rank r's share of bucket b in flattened values (possibly empty).
func (b devBucket) piece(r int) (lo, hi int) {
	return min(b.hi, b.lo+r*b.c), min(b.hi, b.lo+(r+1)*b.c)
}

func (l devLayout) padded() int {
	bs := l.buckets()
	if len(bs) == 0 {
		return 0
	}
	last := bs[len(bs)-1]
	return last.padded + l.size*last.c
}

// span is one parameter's part of a flattened range: values [lo, hi) of parameter i.
type span struct{ i, lo, hi int }

// spans are the parameters' parts of the flattened range [lo, hi), in order.
func (l devLayout) spans(lo, hi int) []span {
	var out []span
	for i, off := range l.offs {
		end := l.n
		if i+1 < len(l.offs) {
			end = l.offs[i+1]
		}
		if a, b := max(lo, off), min(hi, end); a < b {
			out = append(out, span{i, a - off, b - off})
		}
	}
	return out
}

// flatView is values [lo, hi) of t in row-major order.
func flatView(t *tensor.Tensor, lo, hi int) (*tensor.Tensor, error) {
	f, err := t.Reshape(t.Len())
	if err != nil {
		return nil, err
	}
	return f.Rows(lo, hi)
}

// NewDeviceReduce returns the Gradients of ps (float32, all on one backend) for rank `rank` of
// `size`, reducing through coll (nil only when size is 1).
func NewDeviceReduce(ps []Param, coll collective.Tensors, cfg DeviceReduceConfig, rank, size int) (*DeviceReduce, error) {
	if len(ps) == 0 {
		return nil, fmt.Errorf("loop: no parameters to train")
	}
	for _, p := range ps {
		if p.Value == nil || p.Grad == nil || p.Value.Backend() != ps[0].Value.Backend() || p.Grad.Backend() != ps[0].Value.Backend() ||
			p.Value.DType() != tensor.Float32 || p.Grad.DType() != tensor.Float32 || p.Value.Len() != p.Grad.Len() {
			return nil, fmt.Errorf("loop: parameter %s: want float32 values and gradients of one length on %s", p.Name, ps[0].Value.Backend().Name())
		}
	}
	if size > 1 && (coll == nil || coll.Size() != size || coll.Rank() != rank) {
		return nil, fmt.Errorf("loop: rank %d of %d needs tensor collectives of that rank and size", rank, size)
	}
	l, err := newDevLayout(ps, cfg.BucketBytes, rank, size)
	if err != nil {
		return nil, err
	}
	return &DeviceReduce{params: ps, b: ps[0].Value.Backend(), coll: coll, cfg: cfg, l: l}, nil
}

// Collect implements Gradients: Ordered moves the micro-batch's gradient into a flat
// buffer of its own and zeroes the parameters'; otherwise the next backward adds to them.
func (g *DeviceReduce) Collect() error {
	g.collected++
	if !g.cfg.Ordered {
		return nil
	}
	flat, err := tensor.New(g.b, tensor.Float32, g.l.n)
	if err != nil {
		return err
	}
	if err := g.copyFlat(flat, 0, g.l.n, false, false); err != nil {
		_ = flat.Release()
		return err
	}
	g.pending = append(g.pending, flat)
	for _, p := range g.params {
		if err := zeroTensor(p.Grad); err != nil {
			return err
		}
	}
	return nil
}

// copyFlat copies the parameters' flattened values [lo, hi) (their gradients', or with values
// their weights') into buf, contiguous from 0, or with back from buf into them.
func (g *DeviceReduce) copyFlat(buf *tensor.Tensor, lo, hi int, values, back bool) error {
	at := 0
	for _, s := range g.l.spans(lo, hi) {
		t := g.params[s.i].Grad
		if values {
			t = g.params[s.i].Value
		}
		v, err := flatView(t, s.lo, s.hi)
		if err != nil {
			return err
		}
		r, err := buf.Rows(at, at+s.hi-s.lo)
		if err != nil {
			return err
		}
		if back {
			err = tensor.CopyInto(v, r)
		} else {
			err = tensor.CopyInto(r, v)
		}
		if err != nil {
			return err
		}
		at += s.hi - s.lo
	}
	return nil
}

// abort tears the device communicator down after a failed collective (cuda.NCCL.Abort), so
// no other rank waits for this one.
func abort(coll collective.Tensors) {
	if a, ok := coll.(interface{ Abort() error }); ok {
		_ = a.Abort()
	}
}

// counts all-gathers every rank's number of collected micro-batches over the host Comm: a
// barrier before the device collectives, so that a rank that failed earlier releases the
// others instead of leaving them in NCCL.
func counts(ctx context.Context, comm collective.Comm, k int) ([]int, error) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(k))
	parts, err := collective.AllGatherBytes(ctx, comm, b[:])
	if err != nil {
		return nil, err
	}
	out := make([]int, len(parts))
	for r, p := range parts {
		if len(p) != 8 {
			return nil, fmt.Errorf("loop: rank %d sent %d bytes for its micro-batch count", r, len(p))
		}
		out[r] = int(binary.LittleEndian.Uint64(p))
	}
	return out, nil
}

// Reduce implements Gradients. It returns the bytes this rank received from the others:
// for the all-gather what crosses to it, for NCCL's all-reduce and reduce-scatter the ring
// algorithm's 2(N−1)/N and (N−1)/N of the buffer (what NCCL moves; the stand-in copies more).
func (g *DeviceReduce) Reduce(ctx context.Context, comm collective.Comm, scale float32) (received int64, err error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if size, rank := commShape(comm); size != g.l.size || rank != g.l.rank {
		return 0, fmt.Errorf("loop: gradients laid out for rank %d of %d, reduced by rank %d of %d", g.l.rank, g.l.size, rank, size)
	}
	k := g.collected
	g.collected = 0
	if k == 0 {
		return 0, fmt.Errorf("loop: Reduce before any micro-batch was collected")
	}
	ks := []int{k}
	if g.l.size > 1 {
		if ks, err = counts(ctx, comm, k); err != nil {
			return 0, err
		}
	}
	if g.cfg.Ordered {
		return g.reduceOrdered(ctx, ks, scale)
	}
	if g.l.size == 1 {
		return 0, g.scale(scale)
	}
	defer func() {
		if err != nil {
			abort(g.coll)
		}
	}()
	if g.flat == nil {
		if g.flat, err = tensor.New(g.b, tensor.Float32, g.l.padded()); err != nil {
			return 0, err
		}
		if g.cfg.ShardOnly {
			bs := g.l.buckets()
			last := bs[len(bs)-1]
			if g.shard, err = tensor.New(g.b, tensor.Float32, last.shard+last.c); err != nil {
				return 0, err
			}
		}
	}
	n := int64(g.l.size)
	for _, b := range g.l.buckets() {
		buf, err := g.flat.Rows(b.padded, b.padded+g.l.size*b.c)
		if err != nil {
			return 0, err
		}
		if err := g.copyFlat(buf, b.lo, b.hi, false, false); err != nil {
			return 0, err
		}
		if g.cfg.ShardOnly {
			dst, err := g.shard.Rows(b.shard, b.shard+b.c)
			if err == nil {
				err = g.coll.ReduceScatter(ctx, dst, buf)
			}
			if err == nil && scale != 1 {
				err = tensor.Axpby(dst, dst, scale, 0)
			}
			if err != nil {
				return 0, err
			}
			received += (n - 1) * int64(b.c) * 4
			continue
		}
		if err := g.coll.AllReduce(ctx, buf, collective.Sum); err != nil {
			return 0, err
		}
		received += 2 * (n - 1) * int64(b.c) * 4
		if scale != 1 {
			if err := tensor.Axpby(buf, buf, scale, 0); err != nil {
				return 0, err
			}
		}
		if err := g.copyFlat(buf, b.lo, b.hi, false, true); err != nil {
			return 0, err
		}
	}
	return received, nil
}

// scale multiplies the parameters' gradients by s in place.
func (g *DeviceReduce) scale(s float32) error {
	if s == 1 {
		return nil
	}
	for _, p := range g.params {
		if err := tensor.Axpby(p.Grad, p.Grad, s, 0); err != nil {
			return err
		}
	}
	return nil
}

// reduceOrdered all-gathers every rank's micro-batch gradients (ks[r] of rank r; ranks with
// fewer send padding, skipped) and adds them left to right in the global order.
func (g *DeviceReduce) reduceOrdered(ctx context.Context, ks []int, scale float32) (received int64, err error) {
	pending := g.pending
	g.pending = nil
	var tmp []*tensor.Tensor
	defer func() {
		for _, t := range append(tmp, pending...) {
			_ = t.Release()
		}
	}()
	n := g.l.n
	slot := func(all *tensor.Tensor, i int) (*tensor.Tensor, error) { return all.Rows(i*n, (i+1)*n) }
	var order []*tensor.Tensor // the global order
	if g.l.size == 1 {
		order = pending
	} else {
		kmax := slices.Max(ks)
		local, err := tensor.New(g.b, tensor.Float32, kmax*n)
		if err != nil {
			return 0, err
		}
		tmp = append(tmp, local)
		for j, p := range pending {
			s, err := slot(local, j)
			if err == nil {
				err = tensor.CopyInto(s, p)
			}
			if err != nil {
				return 0, err
			}
		}
		all, err := tensor.New(g.b, tensor.Float32, g.l.size*kmax*n)
		if err != nil {
			return 0, err
		}
		tmp = append(tmp, all)
		if err := g.coll.AllGather(ctx, all, local); err != nil {
			abort(g.coll)
			return 0, err
		}
		for r, k := range ks {
			for j := range k {
				s, err := slot(all, r*kmax+j)
				if err != nil {
					return 0, err
				}
				order = append(order, s)
			}
			if r != g.l.rank {
				received += int64(kmax * n * 4)
			}
		}
	}
	if len(order) == 0 {
		return 0, fmt.Errorf("loop: no micro-batch gradient to reduce")
	}
	sum := order[0] // summed in place: a buffer of this reduction's own
	for _, x := range order[1:] {
		if err := tensor.Axpby(sum, x, 1, 1); err != nil {
			return 0, err
		}
	}
	if scale != 1 {
		if err := tensor.Axpby(sum, sum, scale, 0); err != nil {
			return 0, err
		}
	}
	return received, g.copyFlat(sum, 0, n, false, true)
}

// DeviceShardedAdamW is AdamW with its moments sharded over the ranks (ZeRO-1/2) for
// parameters on a device: rank r keeps the moments of the r-th 1/N of every bucket of its DeviceReduce's
// layout, clips with the global norm, takes torch's AdamW step (tensor.AdamWStep) on its
// pieces where they live, and all-gathers the updated pieces so every replica holds the whole
// parameters again. When the reduced gradient is whole on every rank (ZeRO-1, or the ordered
// reduction) the norm is tensor.GradNorm's of it and the weights are DeviceAdamW's bit for
// bit; with ShardOnly (ZeRO-2, unordered) each rank's partial sum of squares is all-reduced.
type DeviceShardedAdamW struct {
	// AdamW holds the hyper-parameters and the step count (its M and V are empty: the moments
	// are on the device; Moments downloads them).
	*AdamW
	g     *DeviceReduce
	stage Sharding
	parts []devPart
	m, v  *tensor.Tensor // this rank's moments, its pieces in the flattened order
	pflat *tensor.Tensor // the padded parameters the all-gather writes (size > 1)
	send  *tensor.Tensor // one chunk: this rank's updated piece of a bucket
	// Stepped, when set, runs after each step taken, as DeviceAdamW's.
	Stepped func() error
}

// devPart is one parameter's part of one of this rank's pieces.
type devPart struct {
	span
	bucket int // index in buckets()
	at     int // offset in m and v
	shard  int // offset in the DeviceReduce's shard buffer (ShardOnly)
}

// NewDeviceShardedAdamW returns the optimizer over g's parameters for ZeRO stage (ShardOptimizer
// or ShardGradients) with torch's AdamW hyper-parameters. Give both to the loop. With stage
// ShardGradients, g should reduce-scatter (ShardOnly) unless it is ordered; with
// ShardOptimizer it must not.
func NewDeviceShardedAdamW(g *DeviceReduce, stage Sharding, beta1, beta2, eps, weightDecay float64) (*DeviceShardedAdamW, error) {
	if stage != ShardOptimizer && stage != ShardGradients {
		return nil, fmt.Errorf("loop: sharding stage %v, want ShardOptimizer or ShardGradients", stage)
	}
	if g.cfg.ShardOnly && stage != ShardGradients {
		return nil, fmt.Errorf("loop: a reduce-scattered gradient (ShardOnly) needs ShardGradients")
	}
	o := &DeviceShardedAdamW{AdamW: NewAdamW(nil, beta1, beta2, eps, weightDecay), g: g, stage: stage}
	at := 0
	for k, b := range g.l.buckets() {
		lo, hi := b.piece(g.l.rank)
		shardAt := b.shard
		for _, s := range g.l.spans(lo, hi) {
			o.parts = append(o.parts, devPart{span: s, bucket: k, at: at, shard: shardAt})
			at += s.hi - s.lo
			shardAt += s.hi - s.lo
		}
	}
	var err error
	if o.m, err = tensor.New(g.b, tensor.Float32, max(1, at)); err != nil {
		return nil, err
	}
	if o.v, err = tensor.New(g.b, tensor.Float32, max(1, at)); err != nil {
		_ = o.m.Release()
		return nil, err
	}
	return o, nil
}

// Steps is the number of steps taken.
func (o *DeviceShardedAdamW) Steps() int { return o.T }

// Step implements Optimizer for one rank; with several, the loop calls StepGroup.
func (o *DeviceShardedAdamW) Step(lr, maxNorm float64) (float64, error) {
	if o.g.l.size != 1 {
		return 0, fmt.Errorf("loop: DeviceShardedAdamW of %d ranks steps through StepGroup", o.g.l.size)
	}
	norm, _, err := o.StepGroup(context.Background(), nil, lr, maxNorm)
	return norm, err
}

// grad is the view of a part's reduced gradient.
func (o *DeviceShardedAdamW) grad(p devPart) (*tensor.Tensor, error) {
	if o.g.cfg.ShardOnly && o.g.l.size > 1 {
		return o.g.shard.Rows(p.shard, p.shard+p.hi-p.lo)
	}
	return flatView(o.g.params[p.i].Grad, p.lo, p.hi)
}

// StepGroup implements GroupOptimizer: the norm, clipping, this rank's AdamW step and the
// parameter all-gather. The gradients are zero afterwards either way.
func (o *DeviceShardedAdamW) StepGroup(ctx context.Context, comm collective.Comm, lr, maxNorm float64) (norm float64, received int64, err error) {
	g, l := o.g, o.g.l
	if size, rank := commShape(comm); size != l.size || rank != l.rank {
		return 0, 0, fmt.Errorf("loop: optimizer laid out for rank %d of %d, stepped by rank %d of %d", l.rank, l.size, rank, size)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	defer func() {
		for _, p := range g.params {
			if zerr := zeroTensor(p.Grad); err == nil {
				err = zerr
			}
		}
	}()
	grads := make([]*tensor.Tensor, len(o.parts))
	for k, p := range o.parts {
		if grads[k], err = o.grad(p); err != nil {
			return 0, 0, err
		}
	}
	if g.cfg.ShardOnly && l.size > 1 {
		part, err := tensor.GradNorm(grads)
		if err != nil {
			return 0, 0, err
		}
		v := []float64{part * part}
		if err := comm.AllReduceFloat64(ctx, v, collective.Sum); err != nil {
			return 0, 0, err
		}
		norm = math.Sqrt(v[0])
	} else {
		whole := make([]*tensor.Tensor, len(g.params))
		for i, p := range g.params {
			whole[i] = p.Grad
		}
		if norm, err = tensor.GradNorm(whole); err != nil { // DeviceAdamW's norm, bit for bit
			return 0, 0, err
		}
	}
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return norm, 0, nil // every rank sees the same norm: none steps
	}
	if maxNorm > 0 {
		// tensor.ClipGradNorm's factor and multiply.
		if c := float32(math.Min(1, maxNorm/(norm+1e-6))); c != 1 {
			for _, x := range grads {
				if err := tensor.Axpby(x, x, c, 0); err != nil {
					return 0, 0, err
				}
			}
		}
	}
	o.T++
	for k, p := range o.parts {
		w, err := flatView(g.params[p.i].Value, p.lo, p.hi)
		if err != nil {
			return 0, 0, err
		}
		m, err := o.m.Rows(p.at, p.at+p.hi-p.lo)
		if err != nil {
			return 0, 0, err
		}
		v, err := o.v.Rows(p.at, p.at+p.hi-p.lo)
		if err != nil {
			return 0, 0, err
		}
		cfg := tensor.AdamWConfig{LR: lr, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps}
		if g.params[p.i].Decay {
			cfg.WeightDecay = o.WeightDecay
		}
		if err := tensor.AdamWStep(tensor.AdamWParams{Param: w, Grad: grads[k], ExpAvg: m, ExpAvgSq: v}, o.T, cfg); err != nil {
			return 0, 0, err
		}
	}
	if l.size > 1 {
		if received, err = o.gatherParams(ctx, comm); err != nil {
			return 0, 0, err
		}
	}
	if o.Stepped != nil {
		err = o.Stepped()
	}
	return norm, received, err
}

// gatherParams all-gathers every bucket's updated pieces into every rank's parameters.
func (o *DeviceShardedAdamW) gatherParams(ctx context.Context, comm collective.Comm) (received int64, err error) {
	g, l := o.g, o.g.l
	if err := comm.AllReduceFloat64(ctx, []float64{0}, collective.Sum); err != nil { // barrier
		return 0, err
	}
	defer func() {
		if err != nil {
			abort(g.coll)
		}
	}()
	bs := l.buckets()
	if o.pflat == nil {
		cmax := 0
		for _, b := range bs {
			cmax = max(cmax, b.c)
		}
		if o.pflat, err = tensor.New(g.b, tensor.Float32, l.padded()); err != nil {
			return 0, err
		}
		if o.send, err = tensor.New(g.b, tensor.Float32, cmax); err != nil {
			return 0, err
		}
	}
	for _, b := range bs {
		lo, hi := b.piece(l.rank)
		send, err := o.send.Rows(0, b.c)
		if err != nil {
			return 0, err
		}
		if hi > lo {
			if err := g.copyFlat(send, lo, hi, true, false); err != nil {
				return 0, err
			}
		}
		dst, err := o.pflat.Rows(b.padded, b.padded+l.size*b.c)
		if err != nil {
			return 0, err
		}
		if err := g.coll.AllGather(ctx, dst, send); err != nil {
			return 0, err
		}
		received += int64(l.size-1) * int64(b.c) * 4
		if err := g.copyFlat(dst, b.lo, b.hi, true, true); err != nil {
			return 0, err
		}
	}
	return received, nil
}

// Moments returns copies of this rank's moments, one shard per owned range (for a
// checkpoint: rank-independent ranges of the flattened parameters).
func (o *DeviceShardedAdamW) Moments() ([]MomentShard, error) {
	m, err := tensor.HostFloat32s(o.m)
	if err != nil {
		return nil, err
	}
	v, err := tensor.HostFloat32s(o.v)
	if err != nil {
		return nil, err
	}
	var out []MomentShard
	at := 0
	for _, b := range o.g.l.buckets() {
		lo, hi := b.piece(o.g.l.rank)
		if hi > lo {
			out = append(out, MomentShard{Lo: lo, Hi: hi, M: slices.Clone(m[at : at+hi-lo]), V: slices.Clone(v[at : at+hi-lo])})
			at += hi - lo
		}
	}
	return out, nil
}

// SetMoments sets this rank's moments from shards written by any number of ranks (or one
// whole range): they must not overlap and must cover every value this rank owns. The step
// count is not touched.
func (o *DeviceShardedAdamW) SetMoments(shards []MomentShard) error {
	byLo := slices.Clone(shards)
	slices.SortFunc(byLo, func(a, b MomentShard) int { return a.Lo - b.Lo })
	for i, s := range byLo {
		if s.Lo < 0 || s.Hi > o.g.l.n || s.Hi < s.Lo || len(s.M) != s.Hi-s.Lo || len(s.V) != s.Hi-s.Lo {
			return fmt.Errorf("loop: moment shard [%d, %d) with %d and %d values, of %d parameters", s.Lo, s.Hi, len(s.M), len(s.V), o.g.l.n)
		}
		if i > 0 && s.Lo < byLo[i-1].Hi && s.Hi > s.Lo {
			return fmt.Errorf("loop: moment shards [%d, %d) and [%d, %d) overlap", byLo[i-1].Lo, byLo[i-1].Hi, s.Lo, s.Hi)
		}
	}
	var m, v []float32
	for _, b := range o.g.l.buckets() {
		lo, hi := b.piece(o.g.l.rank)
		for at := lo; at < hi; {
			k, ok := slices.BinarySearchFunc(byLo, at, func(s MomentShard, x int) int {
				if s.Hi <= x {
					return -1
				}
				if s.Lo > x {
					return 1
				}
				return 0
			})
			if !ok {
				return fmt.Errorf("loop: no moment shard holds parameter value %d", at)
			}
			s := byLo[k]
			end := min(hi, s.Hi)
			m, v = append(m, s.M[at-s.Lo:end-s.Lo]...), append(v, s.V[at-s.Lo:end-s.Lo]...)
			at = end
		}
	}
	if len(m) == 0 {
		return nil
	}
	for _, c := range []struct {
		dst *tensor.Tensor
		src []float32
	}{{o.m, m}, {o.v, v}} {
		h, err := tensor.FromFloat32(c.src, len(c.src))
		if err != nil {
			return err
		}
		d, err := c.dst.Rows(0, len(c.src))
		if err == nil {
			err = tensor.CopyInto(d, h)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Close releases the device buffers.
func (o *DeviceShardedAdamW) Close() error {
	for _, t := range []*tensor.Tensor{o.m, o.v, o.pflat, o.send, o.g.flat, o.g.shard} {
		_ = t.Release()
	}
	return nil
}
