//go:build cuda

// GPU tests. The test binary is for GPU machines only: gorgonia.org/cu exits the process at
// init without a driver (see the package doc). With a driver, a missing device index skips
// visibly, or fails when MTRL_REQUIRE_CUDA=1. MTRL_CUDA_DEVICE selects the device (default 0).
package cuda_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/backendtest"
	"github.com/mtrl-go/mtrl/tensor/tensortest"
	"github.com/mtrl-go/mtrl/tprl/conformance"
)

func device(t testing.TB) *cuda.Backend {
	t.Helper()
	n := 0
	if s := os.Getenv("MTRL_CUDA_DEVICE"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	b, err := cuda.New(n)
	if err != nil {
		if os.Getenv("MTRL_REQUIRE_CUDA") == "1" {
			t.Fatalf("MTRL_REQUIRE_CUDA=1 and cuda.New(%d): %v", n, err)
		}
		t.Skipf("SKIP: no CUDA device %d: %v", n, err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// TestConformance runs every kernel family's conformance suite on the device, bit for bit
// against the pure-Go reference where no libm exp is involved (see packages conformance and
// backendtest).
// MTRL_CUDA_SMALL=1 keeps to the two smaller token shapes (slow emulated runs).
func TestConformance(t *testing.T) {
	cfg := backendtest.Config{Bitwise: true}
	if os.Getenv("MTRL_CUDA_SMALL") == "1" {
		cfg.Shapes = [][2]int{{3, 33}, {64, 1024}}
	}
	conformance.Run(t, device(t), cfg)
}

// TestDeviceName: the backend reports the driver's name for its device.
func TestDeviceName(t *testing.T) {
	b := device(t)
	if b.DeviceName() == "" {
		t.Fatal("DeviceName is empty")
	}
	t.Logf("%s is %q", b.Name(), b.DeviceName())
}

func TestDeviceErrors(t *testing.T) {
	b := device(t)
	if _, err := b.Alloc(1 << 60); !errors.Is(err, tensor.ErrDevice) {
		t.Fatalf("Alloc(1<<60) = %v, want an ErrDevice error", err)
	}
	x := up(t, b, []float32{1, 2, 3, 4}, 2, 2)
	lp := tensor.Must(tensor.New(b, tensor.Float32, 2))
	ys := upI(t, b, []int32{0, 7}, 2)
	err := tensor.LogProbs(lp, x, ys, 1)
	if !errors.Is(err, tensor.ErrParam) {
		t.Fatalf("target out of range: %v, want ErrParam", err)
	}
	if err := x.Release(); err != nil {
		t.Fatal(err)
	}
	if err := x.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if _, err := tensor.To(tensor.CPU(), x); err == nil {
		t.Fatal("reading released storage succeeded")
	}
	c, err := cuda.New(0)
	if err != nil {
		t.Fatal(err)
	}
	y := tensor.Must(tensor.New(c, tensor.Float32, 4))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := tensor.To(tensor.CPU(), y); !errors.Is(err, tensor.ErrClosed) {
		t.Fatalf("use after Close: %v, want ErrClosed", err)
	}
	if err := y.Release(); err != nil {
		t.Fatalf("Release after Close: %v", err)
	}
	if _, err := cuda.New(1 << 20); !errors.Is(err, tensor.ErrDevice) {
		t.Fatalf("New(1<<20): %v", err)
	}
}

// Short names for the suite's helpers, used by the tests and benchmarks here.
var (
	up     = backendtest.Upload
	upI    = backendtest.UploadInt32
	host   = backendtest.Host
	randn  = backendtest.Randn
	mask01 = backendtest.Mask01
)

// BenchmarkLogProbEntropy is the fused forward at the GPU benchmark shapes
// (docs/conventions.md#benchmark-shapes).
func BenchmarkLogProbEntropy(b *testing.B) {
	be := device(b)
	b.Logf("device %s", be.Name())
	tensortest.BenchLogProbEntropy(b, be, [2]int{8192, 151936}, [2]int{256, 151936})
}

// BenchmarkLogProbEntropyBackward is the fused backward at the GPU shapes.
func BenchmarkLogProbEntropyBackward(b *testing.B) {
	be := device(b)
	b.Logf("device %s", be.Name())
	tensortest.BenchLogProbEntropyBackward(b, be, [2]int{8192, 151936})
}

var tokenShapes = [][2]int{{512, 2048}, {2048, 2048}}

// BenchmarkTokenOps times the per-token ops on [512, 2048] and on 4M tokens.
func BenchmarkTokenOps(b *testing.B) {
	be := device(b)
	b.Logf("device %s", be.Name())
	tensortest.BenchMaskedWhiten(b, be, tokenShapes...)
	tensortest.BenchTopPMask(b, be, tokenShapes...)
	for _, s := range tokenShapes {
		rows, cols := s[0], s[1]
		n := rows * cols
		r := rand.New(rand.NewPCG(1, 2))
		lp, ref := up(b, be, randn(r, n, 1), rows, cols), up(b, be, randn(r, n, 1), rows, cols)
		m := up(b, be, mask01(r, n, 0.8), rows, cols)
		dst := tensor.Must(tensor.New(be, tensor.Float32, rows, cols))
		bench := func(name string, bytes int, f func() error) {
			b.Run(fmt.Sprintf("%s/%s/shape=%dx%d", name, be.Name(), rows, cols), func(b *testing.B) {
				b.SetBytes(int64(bytes))
				for b.Loop() {
					if err := f(); err != nil {
						b.Fatal(err)
					}
					if err := be.Sync(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
		bench("LowVarKL", 12*n, func() error { return divergence.Penalty(dst, lp, ref, divergence.LowVarKL) })
		bench("LowVarKLBackward", 16*n, func() error {
			return divergence.PenaltyBackward(dst, divergence.PenaltyGrad{LogProbs: lp, Ref: ref, DPenalty: m, Kind: divergence.LowVarKL})
		})
		bench("PerceptionScore", 12*n, func() error { return divergence.PerceptionScore(dst, lp, ref) })
		bench("MaskedMean", 8*n, func() error { _, err := tensor.MaskedMean(lp, m); return err })
	}
}
