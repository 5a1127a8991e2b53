package collective

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"math"

	"github.com/mtrl-go/mtrl/tensor"
)

// Shard is rank's contiguous share [lo, hi) of n rows split over size ranks: the shards are in
// rank order, so concatenating them gives the rows in order. Out-of-range arguments (n < 0, no
// ranks, a rank outside [0, size)) give the empty share 0, 0.
func Shard(n, rank, size int) (lo, hi int) {
	if n < 0 || size <= 0 || rank < 0 || rank >= size || n > math.MaxInt/size {
		return 0, 0
	}
	return rank * n / size, (rank + 1) * n / size
}

// AllGatherValues gathers every rank's local values (its shard of a row-ordered slice) into
// the whole slice, in rank order, on every rank. Values travel gob-encoded, so T must be
// gob-encodable. With a nil Comm or one rank it returns local.
func AllGatherValues[T any](ctx context.Context, c Comm, local []T) ([]T, error) {
	if c == nil || c.Size() == 1 {
		return local, nil
	}
	if ctx == nil {
		return nil, checkCall(ctx, c)
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(local); err != nil {
		return nil, fmt.Errorf("collective: gather values: %w", err)
	}
	parts, err := AllGatherBytes(ctx, c, buf.Bytes())
	if err != nil {
		return nil, err
	}
	var out []T
	for r, p := range parts {
		var v []T
		if err := gob.NewDecoder(bytes.NewReader(p)).Decode(&v); err != nil {
			return nil, fmt.Errorf("collective: gather values: rank %d: %w", r, err)
		}
		out = append(out, v...)
	}
	return out, nil
}

// AllGatherRows fills the rows of x (float32 [B, ...]) outside this rank's shard [lo, hi) from
// the other ranks, whose shards are the contiguous rank-ordered split of B (Shard). A tensor
// that is not in host memory goes through the host: only this rank's rows come down and only
// the other ranks' go up. With a nil Comm or one rank it does nothing.
func AllGatherRows(ctx context.Context, c Comm, lo, hi int, x *tensor.Tensor) error {
	const op = "collective.AllGatherRows"
	if err := tensor.CheckTensor(op, "x", x); err != nil {
		return err
	}
	if err := tensor.CheckDType(op, "x", x, tensor.Float32); err != nil {
		return err
	}
	if x.Rank() < 1 || lo < 0 || hi < lo || hi > x.Dim(0) {
		return tensor.Errorf(tensor.ErrShape, op, "lo, hi", "[%d, %d) is not a row range of x %v", lo, hi, x.Shape())
	}
	if c == nil || c.Size() == 1 || x.Len() == 0 { // every rank holds x's shape
		return nil
	}
	if err := checkCall(ctx, c); err != nil {
		return err
	}
	if !x.IsHost() {
		return gatherDeviceRows(ctx, c, lo, hi, x)
	}
	v, err := x.Float32s()
	if err != nil {
		return err
	}
	per := len(v) / x.Dim(0)
	all, err := AllGatherBytes(ctx, c, Float32Bytes(v[lo*per:hi*per]))
	if err != nil {
		return err
	}
	off := 0
	for _, p := range all {
		if off+len(p)/4 > len(v) {
			return fmt.Errorf("collective: gather rows: more than the %d values of x from the ranks", len(v))
		}
		BytesFloat32(v[off:off+len(p)/4], p)
		off += len(p) / 4
	}
	if off != len(v) {
		return fmt.Errorf("collective: gather rows: %d values from the ranks, want %d", off, len(v))
	}
	return nil
}

func gatherDeviceRows(ctx context.Context, c Comm, lo, hi int, x *tensor.Tensor) error {
	h, err := tensor.New(tensor.CPU(), tensor.Float32, x.Shape()...)
	if err != nil {
		return err
	}
	if hi > lo {
		if err := copyRows(h, x, lo, hi); err != nil {
			return err
		}
	}
	if err := AllGatherRows(ctx, c, lo, hi, h); err != nil {
		return err
	}
	for _, r := range [][2]int{{0, lo}, {hi, x.Dim(0)}} {
		if r[1] > r[0] {
			if err := copyRows(x, h, r[0], r[1]); err != nil {
				return err
			}
		}
	}
	return nil
}

func copyRows(dst, src *tensor.Tensor, lo, hi int) error {
	d, err := dst.Rows(lo, hi)
	if err != nil {
		return err
	}
	s, err := src.Rows(lo, hi)
	if err != nil {
		return err
	}
	return tensor.CopyInto(d, s)
}

// OrderedSum returns the sum of every rank's gradients of its micro-batches, added in the global
// micro-batch order: local holds this rank's micro-batch gradients of per values each,
// concatenated in its order; the sum runs over rank 0's first, then rank 1's, and so on, left to
// right, which is the order of one device running every micro-batch. A micro-batch's gradient
// does not depend on the number of ranks, so the sum does not either, bit for bit; the price is
// an all-gather of every micro-batch's gradient instead of a ring all-reduce of one (received
// reports the bytes this rank received). With a nil Comm the ranks are this one. local is
// overwritten (the sum is built in its first gradient when there is one rank).
func OrderedSum(ctx context.Context, c Comm, local []float32, per int) (sum []float32, received int64, err error) {
	if c != nil && ctx == nil {
		return nil, 0, checkCall(ctx, c)
	}
	if per <= 0 || len(local) == 0 || len(local)%per != 0 {
		return nil, 0, fmt.Errorf("collective: ordered sum: %d local values are not a positive number of %d-value gradients", len(local), per)
	}
	all := local // every micro-batch's gradient in the global order
	if c != nil && c.Size() > 1 {
		parts, err := AllGatherBytes(ctx, c, Float32Bytes(local))
		if err != nil {
			return nil, 0, fmt.Errorf("collective: ordered sum: %w", err)
		}
		all = nil
		for r, p := range parts {
			if len(p)%(4*per) != 0 {
				return nil, 0, fmt.Errorf("collective: ordered sum: rank %d sent %d bytes, not whole %d-value gradients", r, len(p), per)
			}
			v := make([]float32, len(p)/4)
			BytesFloat32(v, p)
			all = append(all, v...)
			received += int64(len(p))
		}
	}
	sum = orderedSumOf(all[:per], all, per, 0, per)
	return sum, received, nil
}
