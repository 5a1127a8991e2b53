package collective_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/mtrl-go/mtrl/tensor/collective"
)

// plain hides the in-process group's native all-to-all and reduce-scatter: the fallbacks any
// other Comm gets.
type plain struct{ collective.Comm }

// checkShards runs the sharded reductions on a group of size ranks and checks each rank's
// results: the reduce-scatter against the float64 sum, the ordered reduce-scatter bit for bit
// against OrderedSum of every micro-batch gradient (7 of them, split over the ranks), and the
// shards' all-gather.
func checkShards(t *testing.T, size int, run func(fn func(ctx context.Context, c collective.Comm) error) error) {
	t.Helper()
	const n, grads = 37, 7
	var global []float32
	for g := range grads {
		global = append(global, values(g, n)...)
	}
	whole, _, err := collective.OrderedSum(context.Background(), nil, append([]float32(nil), global...), n)
	if err != nil {
		t.Fatal(err)
	}
	err = run(func(ctx context.Context, c collective.Comm) error {
		lo, hi := collective.Shard(n, c.Rank(), c.Size())
		shard := make([]float32, hi-lo)
		if _, err := collective.ReduceScatterFloat32(ctx, c, values(c.Rank(), n), shard); err != nil {
			return err
		}
		full := make([]float32, n)
		copy(full[lo:hi], shard)
		if _, err := collective.AllGatherShards(ctx, c, shard, full); err != nil {
			return err
		}
		for i, x := range full {
			var want float64
			for r := range size {
				want += float64(values(r, n)[i])
			}
			// A float32 sum of size terms is within (size−1)·2^-24 of the float64 sum's
			// magnitude (each addition rounds once; the values share a sign).
			if d := math.Abs(float64(x) - want); d > float64(size-1)*0x1p-24*math.Abs(want) {
				return fmt.Errorf("reduce-scatter + all-gather element %d: %v, float64 sum %v", i, x, want)
			}
		}
		ref := make([]float32, n)
		if _, err := collective.ReduceScatterFloat32(ctx, plain{c}, values(c.Rank(), n), ref[lo:hi]); err != nil {
			return err
		}
		for i, x := range shard { // the fallback sums in rank order too
			if math.Float32bits(x) != math.Float32bits(ref[lo+i]) {
				return fmt.Errorf("reduce-scatter element %d: native %v, fallback %v", lo+i, x, ref[lo+i])
			}
		}
		glo, ghi := collective.Shard(grads, c.Rank(), c.Size())
		for _, cc := range []collective.Comm{c, plain{c}} {
			got, _, err := collective.OrderedReduceScatter(ctx, cc, global[glo*n:ghi*n], n)
			if err != nil {
				return err
			}
			if len(got) != hi-lo {
				return fmt.Errorf("ordered reduce-scatter gave %d values, want %d", len(got), hi-lo)
			}
			for i, x := range got {
				if math.Float32bits(x) != math.Float32bits(whole[lo+i]) {
					return fmt.Errorf("ordered reduce-scatter element %d: %v, OrderedSum %v (bit for bit)", lo+i, x, whole[lo+i])
				}
			}
			full := make([]float32, n)
			if _, err := collective.AllGatherShards(ctx, cc, got, full); err != nil {
				return err
			}
			for i := range full {
				if math.Float32bits(full[i]) != math.Float32bits(whole[i]) {
					return fmt.Errorf("gathered shards element %d: %v, want %v", i, full[i], whole[i])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestShards(t *testing.T) {
	for _, size := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			checkShards(t, size, func(fn func(context.Context, collective.Comm) error) error {
				return collective.Run(context.Background(), size, fn)
			})
		})
	}
}

// TestAllToAll: every rank sends rank q a piece of length rank+q; native and fallback agree
// and count the bytes they received.
func TestAllToAll(t *testing.T) {
	const size = 3
	err := collective.Run(context.Background(), size, func(ctx context.Context, c collective.Comm) error {
		send := make([][]byte, size)
		for q := range send {
			for range c.Rank() + q {
				send[q] = append(send[q], byte(10*c.Rank()+q))
			}
		}
		var got [2]int64
		for k, cc := range []collective.Comm{c, plain{c}} {
			recv, received, err := collective.AllToAll(ctx, cc, send)
			if err != nil {
				return err
			}
			for q, p := range recv {
				if len(p) != q+c.Rank() {
					return fmt.Errorf("from rank %d: %d bytes, want %d", q, len(p), q+c.Rank())
				}
				for _, b := range p {
					if b != byte(10*q+c.Rank()) {
						return fmt.Errorf("from rank %d: byte %d", q, b)
					}
				}
			}
			got[k] = received
		}
		if want := int64(size*c.Rank() + size*(size-1)/2 - 2*c.Rank()); got[0] != want || got[1] <= got[0] {
			return fmt.Errorf("received %d bytes natively (want %d), %d through the fallback", got[0], want, got[1])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestShardsBadInput(t *testing.T) {
	err := collective.Run(context.Background(), 2, func(ctx context.Context, c collective.Comm) error {
		if _, err := collective.ReduceScatterFloat32(ctx, c, make([]float32, 5), make([]float32, 5)); err == nil {
			return errors.New("reduce-scatter into a whole-length shard: no error")
		}
		if _, err := collective.AllGatherShards(ctx, c, make([]float32, 1), make([]float32, 5)); err == nil {
			return errors.New("all-gather of a short shard: no error")
		}
		if _, _, err := collective.OrderedReduceScatter(ctx, c, make([]float32, 5), 2); err == nil {
			return errors.New("ordered reduce-scatter of 5 values in 2-value gradients: no error")
		}
		if _, _, err := collective.AllToAll(ctx, c, make([][]byte, 3)); err == nil {
			return errors.New("all-to-all of 3 pieces for 2 ranks: no error")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = collective.Run(context.Background(), 2, func(ctx context.Context, c collective.Comm) error {
		_, err := collective.ReduceScatterFloat32(ctx, c, make([]float32, 4+c.Rank()), make([]float32, 2))
		if c.Rank() == 1 && err == nil {
			return errors.New("no error")
		}
		return err
	})
	if err == nil {
		t.Fatal("ranks with different lengths: no error")
	}
}

// A reduce-scatter leaves each rank the sum of its shard; the all-gather of the shards gives
// every rank the whole sum: an all-reduce in 2·(N−1)/N of the values per rank.
func ExampleReduceScatterFloat32() {
	sums := make([][]float32, 2)
	err := collective.Run(context.Background(), 2, func(ctx context.Context, c collective.Comm) error {
		grad := []float32{1, 2, 3, float32(c.Rank())} // this rank's gradient
		lo, hi := collective.Shard(len(grad), c.Rank(), c.Size())
		shard := make([]float32, hi-lo)
		if _, err := collective.ReduceScatterFloat32(ctx, c, grad, shard); err != nil {
			return err
		}
		_, err := collective.AllGatherShards(ctx, c, shard, grad)
		sums[c.Rank()] = grad
		return err
	})
	fmt.Println(sums, err)
	// Output: [[2 4 6 1] [2 4 6 1]] <nil>
}
