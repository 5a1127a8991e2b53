package collective

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
)

// Sharded reductions: the pieces of an all-reduce that scales. A gradient of n values is split
// into Size contiguous shards (Shard(n, rank, size)); ReduceScatterFloat32 leaves each rank the
// sum of its shard, AllGatherShards puts the shards back together. Together they move
// 2·(Size−1)/Size·n values per rank, as a ring all-reduce does, instead of the Size·n of an
// all-gather of every gradient. Each element is reduced once, on the rank that owns it, so the
// replicas that gather the shards hold the same bits whatever order the reduction took.

// groupOf is c's size and this rank (1 and 0 for a nil Comm: this rank alone).
func groupOf(ctx context.Context, c Comm) (size, rank int, err error) {
	if c == nil {
		return 1, 0, nil
	}
	if err := checkCall(ctx, c); err != nil {
		return 0, 0, err
	}
	if c.Size() < 1 || c.Rank() < 0 || c.Rank() >= c.Size() {
		return 0, 0, fmt.Errorf("collective: rank %d of a group of %d", c.Rank(), c.Size())
	}
	return c.Size(), c.Rank(), nil
}

// allToAller is a Comm that sends each rank its own piece natively.
type allToAller interface {
	allToAll(ctx context.Context, send [][]byte) ([][]byte, error)
}

// reduceScatterer is a Comm with a native float32 sum reduce-scatter into Shard's layout.
type reduceScatterer interface {
	reduceScatterFloat32(ctx context.Context, buf, shard []float32) error
}

// AllToAll sends send[r] (any length) to rank r and returns recv, recv[q] being what rank q
// sent this rank (recv[Rank] is send[Rank]), and the bytes received from the other ranks. The
// in-process group and MPI (MPI_Alltoallv) move only the pieces; another Comm falls back to an
// all-gather of every rank's pieces, Size times the bytes. With a nil Comm send is one piece.
func AllToAll(ctx context.Context, c Comm, send [][]byte) (recv [][]byte, received int64, err error) {
	size, rank, err := groupOf(ctx, c)
	if err != nil {
		return nil, 0, err
	}
	if len(send) != size {
		return nil, 0, fmt.Errorf("collective: all-to-all of %d pieces for %d ranks", len(send), size)
	}
	if size == 1 {
		return [][]byte{send[0]}, 0, nil
	}
	a, ok := c.(allToAller)
	if !ok {
		return allToAllByGather(ctx, c, send)
	}
	if recv, err = a.allToAll(ctx, send); err != nil {
		return nil, 0, err
	}
	for q, p := range recv {
		if q != rank {
			received += int64(len(p))
		}
	}
	return recv, received, nil
}

// allToAllByGather gathers every rank's pieces, each preceded by its length, and keeps this
// rank's.
func allToAllByGather(ctx context.Context, c Comm, send [][]byte) (recv [][]byte, received int64, err error) {
	var blob []byte
	for _, p := range send {
		blob = binary.LittleEndian.AppendUint64(blob, uint64(len(p)))
		blob = append(blob, p...)
	}
	all, err := AllGatherBytes(ctx, c, blob)
	if err != nil {
		return nil, 0, err
	}
	recv = make([][]byte, len(all))
	for q, b := range all {
		if q != c.Rank() {
			received += int64(len(b))
		}
		for r := range c.Size() {
			if len(b) < 8 || binary.LittleEndian.Uint64(b) > uint64(len(b)-8) {
				return nil, 0, fmt.Errorf("collective: all-to-all: rank %d sent a malformed piece list", q)
			}
			n := int(binary.LittleEndian.Uint64(b))
			if r == c.Rank() {
				recv[q] = b[8 : 8+n]
			}
			b = b[8+n:]
		}
	}
	return recv, received, nil
}

// ReduceScatterFloat32 sums buf (the same length on every rank) over the ranks and writes this
// rank's shard of the sum, elements Shard(len(buf), Rank, Size), into shard (of that length).
// In process and through the fallback the sum runs in rank order; under MPI it is
// MPI_Reduce_scatter, in MPI's order. It returns the bytes received: (Size−1)·len(shard)·4
// for the native implementations (what a direct or ring reduce-scatter receives).
func ReduceScatterFloat32(ctx context.Context, c Comm, buf, shard []float32) (received int64, err error) {
	size, rank, err := groupOf(ctx, c)
	if err != nil {
		return 0, err
	}
	lo, hi := Shard(len(buf), rank, size)
	if len(shard) != hi-lo {
		return 0, fmt.Errorf("collective: reduce-scatter of %d values over %d ranks: rank %d's shard holds %d, want %d", len(buf), size, rank, len(shard), hi-lo)
	}
	if size == 1 {
		copy(shard, buf)
		return 0, nil
	}
	if r, ok := c.(reduceScatterer); ok {
		if err := r.reduceScatterFloat32(ctx, buf, shard); err != nil {
			return 0, err
		}
		return int64(size-1) * int64(len(shard)) * 4, nil
	}
	send := make([][]byte, size)
	for q := range send {
		qlo, qhi := Shard(len(buf), q, size)
		send[q] = Float32Bytes(buf[qlo:qhi])
	}
	recv, received, err := AllToAll(ctx, c, send)
	if err != nil {
		return 0, err
	}
	parts := make([][]float32, size)
	for q, p := range recv {
		if len(p) != 4*len(shard) {
			return 0, fmt.Errorf("%w: reduce-scatter: rank %d sent %d bytes for a shard of %d values", ErrMismatch, q, len(p), len(shard))
		}
		parts[q] = make([]float32, len(shard))
		BytesFloat32(parts[q], p)
	}
	reduceInto(shard, parts, Sum)
	return received, nil
}

// OrderedReduceScatter is OrderedSum's values in this rank's shard only: local holds this
// rank's micro-batch gradients of per values each, concatenated; every rank receives the
// shard-sized slices of every gradient that fall in its shard (an all-to-all) and adds them in
// the global micro-batch order. The shard is bit for bit elements Shard(per, Rank, Size) of
// OrderedSum's result, so it does not depend on the number of ranks either; each rank receives
// (gradients of the others)·per/Size values instead of OrderedSum's (gradients of the
// others)·per. local is not modified.
func OrderedReduceScatter(ctx context.Context, c Comm, local []float32, per int) (shard []float32, received int64, err error) {
	size, rank, err := groupOf(ctx, c)
	if err != nil {
		return nil, 0, err
	}
	if per <= 0 || len(local) == 0 || len(local)%per != 0 {
		return nil, 0, fmt.Errorf("collective: ordered reduce-scatter: %d local values are not a positive number of %d-value gradients", len(local), per)
	}
	lo, hi := Shard(per, rank, size)
	if size == 1 {
		return orderedSumOf(make([]float32, per), local, per, 0, per), 0, nil
	}
	send := make([][]byte, size)
	for q := range send {
		qlo, qhi := Shard(per, q, size)
		b := make([]byte, 0, 4*(qhi-qlo)*(len(local)/per))
		for off := 0; off < len(local); off += per {
			b = append(b, Float32Bytes(local[off+qlo:off+qhi])...)
		}
		send[q] = b
	}
	recv, received, err := AllToAll(ctx, c, send)
	if err != nil {
		return nil, 0, fmt.Errorf("collective: ordered reduce-scatter: %w", err)
	}
	var all []float32 // every gradient's slice in the global order
	for q, p := range recv {
		if hi > lo && len(p)%(4*(hi-lo)) != 0 || hi == lo && len(p) != 0 {
			return nil, 0, fmt.Errorf("%w: ordered reduce-scatter: rank %d sent %d bytes, not whole %d-value slices", ErrMismatch, q, len(p), hi-lo)
		}
		v := make([]float32, len(p)/4)
		BytesFloat32(v, p)
		all = append(all, v...)
	}
	if hi == lo {
		return []float32{}, received, nil
	}
	return orderedSumOf(make([]float32, hi-lo), all, hi-lo, 0, hi-lo), received, nil
}

// orderedSumOf writes into sum (hi−lo values; it may be all[lo:hi] itself) elements [lo, hi)
// of the per-value gradients concatenated in all, added left to right: the arithmetic of
// OrderedSum and OrderedReduceScatter. It returns sum.
func orderedSumOf(sum, all []float32, per, lo, hi int) []float32 {
	copy(sum, all[lo:hi])
	for off := per; off < len(all); off += per {
		for i, x := range all[off+lo : off+hi] {
			sum[i] += x
		}
	}
	return sum
}

// AllGatherShards writes every rank's shard (Shard(len(full), rank, Size)) into full; this
// rank's is shard. It moves the shards padded to the longest, ⌈len(full)/Size⌉ values, through
// AllGather and returns the bytes received from the other ranks.
func AllGatherShards(ctx context.Context, c Comm, shard, full []float32) (received int64, err error) {
	size, rank, err := groupOf(ctx, c)
	if err != nil {
		return 0, err
	}
	n := len(full)
	lo, hi := Shard(n, rank, size)
	if len(shard) != hi-lo {
		return 0, fmt.Errorf("collective: all-gather of %d values over %d ranks: rank %d's shard holds %d, want %d", n, size, rank, len(shard), hi-lo)
	}
	if size == 1 {
		copy(full, shard)
		return 0, nil
	}
	longest := (n + size - 1) / size
	if longest > math.MaxInt/(4*size) {
		return 0, fmt.Errorf("collective: all-gather of %d values over %d ranks is too large", n, size)
	}
	send := make([]byte, 4*longest)
	copy(send, Float32Bytes(shard))
	all := make([]byte, len(send)*size)
	if err := c.AllGather(ctx, send, all); err != nil {
		return 0, err
	}
	for q := range size {
		qlo, qhi := Shard(n, q, size)
		BytesFloat32(full[qlo:qhi], all[q*len(send):])
	}
	return int64(size-1) * int64(len(send)), nil
}
