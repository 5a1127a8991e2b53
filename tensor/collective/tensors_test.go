package collective_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
)

// TestHostTensors: the tensor collectives over an in-process group of 3 agree with the
// slice collectives they wrap and with a rank-order reference, on views too; bad shapes and
// dtypes are errors on every rank.
func TestHostTensors(t *testing.T) {
	const size, n = 3, 5
	err := collective.Run(context.Background(), size, func(ctx context.Context, c collective.Comm) error {
		h, err := collective.NewHostTensors(c)
		if err != nil {
			return err
		}
		r := h.Rank()
		// All-reduce of a view (rows 1..3 of a [4, n] tensor): the other rows stay.
		whole := tensor.Must(tensor.FromFloat32(values(r, 4*n), 4, n))
		view := tensor.Must(whole.Rows(1, 3))
		if err := h.AllReduce(ctx, view, collective.Sum); err != nil {
			return err
		}
		got, _ := whole.Float32s()
		for i, x := range got {
			want := values(r, 4*n)[i]
			if i >= n && i < 3*n {
				want = 0
				for q := range size {
					want += values(q, 4*n)[i]
				}
			}
			if math.Float32bits(x) != math.Float32bits(want) {
				return fmt.Errorf("all-reduce element %d: %v, want %v", i, x, want)
			}
		}
		// Reduce-scatter: chunk r of the rank-order sum.
		src := tensor.Must(tensor.FromFloat32(values(r, size*n), size*n))
		dst := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, n))
		if err := h.ReduceScatter(ctx, dst, src); err != nil {
			return err
		}
		d, _ := dst.Float32s()
		for i, x := range d {
			want := values(0, size*n)[r*n+i]
			for q := 1; q < size; q++ {
				want += values(q, size*n)[r*n+i]
			}
			if math.Float32bits(x) != math.Float32bits(want) {
				return fmt.Errorf("reduce-scatter element %d: %v, want %v", i, x, want)
			}
		}
		// All-gather and broadcast move any dtype.
		ids := tensor.Must(tensor.FromInt32([]int32{int32(10 * r), int32(10*r + 1)}, 2))
		all := tensor.Must(tensor.New(tensor.CPU(), tensor.Int32, 2*size))
		if err := h.AllGather(ctx, all, ids); err != nil {
			return err
		}
		a, _ := all.Int32s()
		for q := range size {
			if a[2*q] != int32(10*q) || a[2*q+1] != int32(10*q+1) {
				return fmt.Errorf("all-gather: %v", a)
			}
		}
		b := tensor.Must(tensor.FromUint8([]uint8{uint8(r), 7}, 2))
		if err := h.Broadcast(ctx, b, 2); err != nil {
			return err
		}
		if v, _ := b.Uint8s(); v[0] != 2 || v[1] != 7 {
			return fmt.Errorf("broadcast: %v", v)
		}
		// Errors, the same on every rank (so no rank waits for the others).
		if err := h.ReduceScatter(ctx, dst, tensor.Must(tensor.FromFloat32(make([]float32, n), n))); !errors.Is(err, tensor.ErrShape) {
			return fmt.Errorf("reduce-scatter of a short src: %v", err)
		}
		if err := h.AllReduce(ctx, ids, collective.Sum); !errors.Is(err, tensor.ErrDType) {
			return fmt.Errorf("all-reduce of int32: %v", err)
		}
		if err := h.Broadcast(ctx, b, size); !errors.Is(err, tensor.ErrParam) {
			return fmt.Errorf("broadcast from rank %d: %v", size, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := collective.NewHostTensors(nil); err == nil {
		t.Error("NewHostTensors(nil) gave no error")
	}
}

// ExampleHostTensors reduce-scatters two ranks' gradients (each rank keeps the sum of its
// half) and all-gathers the halves, through the Tensors interface that cuda.NCCL implements
// on device tensors too.
func ExampleHostTensors() {
	out := make([]string, 2)
	err := collective.Run(context.Background(), 2, func(ctx context.Context, c collective.Comm) error {
		var ts collective.Tensors
		ts, err := collective.NewHostTensors(c)
		if err != nil {
			return err
		}
		r := float32(ts.Rank())
		grad := tensor.Must(tensor.FromFloat32([]float32{1 + r, 2 + r, 3 + r, 4 + r}, 4))
		half := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 2))
		if err := ts.ReduceScatter(ctx, half, grad); err != nil {
			return err
		}
		if err := ts.AllGather(ctx, grad, half); err != nil {
			return err
		}
		h, _ := half.Float32s()
		g, _ := grad.Float32s()
		out[ts.Rank()] = fmt.Sprintf("rank %d: half %v, whole %v", ts.Rank(), h, g)
		return nil
	})
	fmt.Println(out[0])
	fmt.Println(out[1], err)
	// Output:
	// rank 0: half [3 5], whole [3 5 7 9]
	// rank 1: half [7 9], whole [3 5 7 9] <nil>
}
