//go:build cuda && nccl

package cuda_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
)

// devices opens devices 0..n-1, or skips (fails under MTRL_REQUIRE_CUDA=1) when there are fewer.
func devices(t *testing.T, n int) []*cuda.Backend {
	t.Helper()
	bs := make([]*cuda.Backend, n)
	for r := range bs {
		b, err := cuda.New(r)
		if err != nil {
			if os.Getenv("MTRL_REQUIRE_CUDA") == "1" {
				t.Fatalf("MTRL_REQUIRE_CUDA=1 and cuda.New(%d): %v (scripts/cuda-emu sets CUEMU_DEVICES=4)", r, err)
			}
			t.Skipf("SKIP: needs %d CUDA devices: %v", n, err)
		}
		t.Cleanup(func() { _ = b.Close() })
		bs[r] = b
	}
	return bs
}

// ncclValues are rank r's inputs: magnitudes over 2^±20, so float32 sums in another order
// round differently.
func ncclValues(r, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.Ldexp(1+float64((i*13+r*5)%17)/17, (i*7+r*11)%41-20)) * float32(1-2*((i+r)%3%2))
	}
	return v
}

// sameOrClose compares the NCCL result with the host one: bit for bit on the emulator's
// stand-in (rank order, as the host), within the rank-order-free bound of a sum of size
// terms (size·2⁻²⁴·Σ|x|) on real NCCL, whose rings add in another order.
func sameOrClose(what string, got, want, absSum []float32, size int) error {
	for i := range want {
		if cuda.NCCLLinked() || absSum == nil {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				return fmt.Errorf("%s: element %d is %v, host %v", what, i, got[i], want[i])
			}
		} else if d := math.Abs(float64(got[i] - want[i])); d > float64(size)*0x1p-24*float64(absSum[i]) {
			return fmt.Errorf("%s: element %d is %v, host %v", what, i, got[i], want[i])
		}
	}
	return nil
}

func download(t *tensor.Tensor) ([]float32, error) {
	h, err := tensor.To(tensor.CPU(), t)
	if err != nil {
		return nil, err
	}
	return h.Float32s()
}

// TestNCCLCollectives: NCCL's all-reduce (sum, max, min), reduce-scatter, all-gather and
// broadcast of device tensors (views at an offset included) on 2 and 4 devices give the
// results of collective.HostTensors on the same values in host memory; on the emulator (one
// goroutine and device per rank, as the trainer runs them) bit for bit. A tensor on another
// backend is an error before any collective is issued; on the emulator, ranks that disagree on
// the count get NCCL's invalid usage, and the communicator goes on working.
func TestNCCLCollectives(t *testing.T) {
	for _, size := range []int{2, 4} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			bs := devices(t, size)
			const n = 1031
			err := collective.Run(context.Background(), size, func(ctx context.Context, c collective.Comm) error {
				r := c.Rank()
				b := bs[r]
				nc, err := cuda.BootstrapNCCL(ctx, b, c)
				if err != nil {
					return err
				}
				defer nc.Close()
				host, err := collective.NewHostTensors(c)
				if err != nil {
					return err
				}
				var ts collective.Tensors = nc
				if ts.Rank() != r || ts.Size() != size {
					return fmt.Errorf("rank %d of %d, want %d of %d", ts.Rank(), ts.Size(), r, size)
				}
				// dev is a [rows] view at row 3 of a device tensor holding vals.
				dev := func(vals []float32) (*tensor.Tensor, error) {
					whole, err := tensor.To(b, tensor.Must(tensor.FromFloat32(append(make([]float32, 3), vals...), 3+len(vals))))
					if err != nil {
						return nil, err
					}
					return whole.Rows(3, 3+len(vals))
				}
				absSum := make([]float32, size*n)
				for q := range size {
					for i, x := range ncclValues(q, size*n) {
						absSum[i] += float32(math.Abs(float64(x)))
					}
				}
				for _, op := range []collective.Op{collective.Sum, collective.Max, collective.Min} {
					h := tensor.Must(tensor.FromFloat32(ncclValues(r, n), n))
					d, err := dev(ncclValues(r, n))
					if err != nil {
						return err
					}
					if err := host.AllReduce(ctx, h, op); err != nil {
						return err
					}
					if err := ts.AllReduce(ctx, d, op); err != nil {
						return err
					}
					hv, _ := h.Float32s()
					dv, err := download(d)
					if err != nil {
						return err
					}
					bound := absSum[:n]
					if op != collective.Sum {
						bound = nil
					}
					if err := sameOrClose(fmt.Sprintf("rank %d all-reduce %v", r, op), dv, hv, bound, size); err != nil {
						return err
					}
				}
				// Reduce-scatter: the host's chunk r of the sum of size·n values.
				hsrc := tensor.Must(tensor.FromFloat32(ncclValues(r, size*n), size*n))
				hdst := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, n))
				if err := host.ReduceScatter(ctx, hdst, hsrc); err != nil {
					return err
				}
				dsrc, err := dev(ncclValues(r, size*n))
				if err != nil {
					return err
				}
				ddst, err := dev(make([]float32, n))
				if err != nil {
					return err
				}
				if err := ts.ReduceScatter(ctx, ddst, dsrc); err != nil {
					return err
				}
				hv, _ := hdst.Float32s()
				dv, err := download(ddst)
				if err != nil {
					return err
				}
				if err := sameOrClose(fmt.Sprintf("rank %d reduce-scatter", r), dv, hv, absSum[r*n:(r+1)*n], size); err != nil {
					return err
				}
				// All-gather and broadcast move bits.
				all, err := dev(make([]float32, size*n))
				if err != nil {
					return err
				}
				mine, err := dev(ncclValues(r, n))
				if err != nil {
					return err
				}
				if err := ts.AllGather(ctx, all, mine); err != nil {
					return err
				}
				hall := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, size*n))
				if err := host.AllGather(ctx, hall, tensor.Must(tensor.FromFloat32(ncclValues(r, n), n))); err != nil {
					return err
				}
				hv, _ = hall.Float32s()
				if dv, err = download(all); err != nil {
					return err
				}
				if err := sameOrClose(fmt.Sprintf("rank %d all-gather", r), dv, hv, nil, size); err != nil {
					return err
				}
				root := size - 1
				bc, err := dev(ncclValues(r, n))
				if err != nil {
					return err
				}
				if err := ts.Broadcast(ctx, bc, root); err != nil {
					return err
				}
				if dv, err = download(bc); err != nil {
					return err
				}
				if err := sameOrClose(fmt.Sprintf("rank %d broadcast", r), dv, ncclValues(root, n), nil, size); err != nil {
					return err
				}
				// A host tensor is not the communicator's: an error on every rank, nothing issued.
				if err := ts.AllReduce(ctx, h0(n), collective.Sum); !errors.Is(err, tensor.ErrBackend) {
					return fmt.Errorf("all-reduce of a host tensor: %v", err)
				}
				if !cuda.NCCLLinked() {
					return nil // real NCCL hangs on disagreeing ranks
				}
				short, err := dev(ncclValues(r, n-r))
				if err != nil {
					return err
				}
				if err := ts.AllReduce(ctx, short, collective.Sum); err == nil || !strings.Contains(err.Error(), "invalid usage") {
					return fmt.Errorf("ranks disagreeing on the count: %v", err)
				}
				again, err := dev(ncclValues(r, n))
				if err != nil {
					return err
				}
				return ts.AllReduce(ctx, again, collective.Max)
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func h0(n int) *tensor.Tensor { return tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, n)) }
