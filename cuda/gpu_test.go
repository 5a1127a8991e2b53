//go:build cuda

// GPU tests. The test binary is for GPU machines only: gorgonia.org/cu exits the process at
// init without a driver (see the package doc). With a driver, a missing device index skips
// visibly, or fails when MTRL_REQUIRE_CUDA=1. MTRL_CUDA_DEVICE selects the device (default 0).
package cuda_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/tensortest"
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

func TestConformance(t *testing.T) { tensortest.Run(t, device(t)) }

func TestDeviceErrors(t *testing.T) {
	b := device(t)
	if _, err := b.Alloc(1 << 60); !errors.Is(err, tensor.ErrDevice) {
		t.Fatalf("Alloc(1<<60) = %v, want an ErrDevice error", err)
	}
	x := up(t, b, []float32{1, 2, 3, 4}, 2, 2)
	lp := tensor.Must(tensor.New(b, tensor.Float32, 2))
	ys := upI(t, b, []int32{0, 7}, 2)
	err := tensor.LogProbEntropy(lp, nil, x, ys, 1)
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

func up(t testing.TB, b tensor.Backend, v []float32, shape ...int) *tensor.Tensor {
	t.Helper()
	d, err := tensor.To(b, tensor.Must(tensor.FromFloat32(v, shape...)))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func upI(t testing.TB, b tensor.Backend, v []int32, shape ...int) *tensor.Tensor {
	t.Helper()
	d, err := tensor.To(b, tensor.Must(tensor.FromInt32(v, shape...)))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func host(t testing.TB, d *tensor.Tensor) []float32 {
	t.Helper()
	h, err := tensor.To(tensor.CPU(), d)
	if err != nil {
		t.Fatal(err)
	}
	if h.DType() == tensor.Int32 {
		is, _ := h.Int32s()
		out := make([]float32, len(is))
		for i, v := range is {
			out[i] = float32(v)
		}
		return out
	}
	if h.DType() == tensor.BFloat16 {
		bs, _ := h.BF16s()
		out := make([]float32, len(bs))
		for i, v := range bs {
			out[i] = v.Float32()
		}
		return out
	}
	v, err := h.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func randn(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * scale)
	}
	return v
}

func mask01(r *rand.Rand, n int, p float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		if r.Float64() < p {
			v[i] = 1
		}
	}
	return v
}

func near(t *testing.T, name string, got, want []float32, rtol, atol float64) {
	t.Helper()
	bad := 0
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		ok := math.Abs(g-w) <= atol+rtol*math.Abs(w) || (math.IsNaN(g) && math.IsNaN(w)) || g == w
		if !ok {
			if bad < 3 {
				t.Errorf("%s[%d] = %v, cpu %v", name, i, got[i], want[i])
			}
			bad++
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d of %d differ", name, bad, len(want))
	}
}

func same(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// op runs one op family on backend be with inputs in (host data) and returns its outputs on
// the host.
type op struct {
	name       string
	rtol, atol float64
	run        func(t *testing.T, be tensor.Backend) [][]float32
}

// crossOps are the device ops at realistic sizes, on random inputs (fixed seeds).
func crossOps(rows, cols int) []op {
	r := rand.New(rand.NewPCG(uint64(rows), uint64(cols)))
	n := rows * cols
	lp, ref := randn(r, n, 2), randn(r, n, 2)
	for i := range lp {
		lp[i] = -float32(math.Abs(float64(lp[i])))
		ref[i] = -float32(math.Abs(float64(ref[i])))
	}
	scores, m := randn(r, n, 1), mask01(r, n, 0.8)
	for i := 0; i < n; i += 97 { // ties and NaN for the selection
		scores[i] = 0.5
	}
	scores[3] = float32(math.NaN())
	var ops []op
	// Kernels without exp match the pure-Go kernels bit for bit; those with expf (low_var_kl,
	// full, the perception score) use the device's expf, within 2 ulp of the host's exp.
	tol := func(kind divergence.Kind) float64 {
		if kind == divergence.LowVarKL || kind == divergence.Full {
			return 1e-6
		}
		return 0
	}
	for _, kind := range []divergence.Kind{divergence.KL, divergence.Abs, divergence.MSE, divergence.LowVarKL} {
		ops = append(ops, op{"Penalty/" + kind.String(), tol(kind), tol(kind), func(t *testing.T, be tensor.Backend) [][]float32 {
			d := tensor.Must(tensor.New(be, tensor.Float32, rows, cols))
			if err := divergence.Penalty(d, up(t, be, lp, rows, cols), up(t, be, ref, rows, cols), kind); err != nil {
				t.Fatal(err)
			}
			return [][]float32{host(t, d)}
		}})
	}
	for _, kind := range []divergence.Kind{divergence.KL, divergence.Abs, divergence.MSE, divergence.LowVarKL, divergence.Full} {
		ops = append(ops, op{"PenaltyGrad/" + kind.String(), tol(kind), tol(kind), func(t *testing.T, be tensor.Backend) [][]float32 {
			d := tensor.Must(tensor.New(be, tensor.Float32, rows, cols))
			if err := divergence.PenaltyGrad(d, up(t, be, lp, rows, cols), up(t, be, ref, rows, cols), kind); err != nil {
				t.Fatal(err)
			}
			return [][]float32{host(t, d)}
		}})
	}
	ops = append(ops,
		op{"Penalty/full", 1e-5, 1e-5, func(t *testing.T, be tensor.Backend) [][]float32 {
			d := tensor.Must(tensor.New(be, tensor.Float32, rows))
			if err := divergence.Penalty(d, up(t, be, lp, rows, cols), up(t, be, ref, rows, cols), divergence.Full); err != nil {
				t.Fatal(err)
			}
			return [][]float32{host(t, d)}
		}},
		op{"PerceptionScore", 1e-6, 1e-6, func(t *testing.T, be tensor.Backend) [][]float32 {
			d := tensor.Must(tensor.New(be, tensor.Float32, rows, cols))
			if err := divergence.PerceptionScore(d, up(t, be, lp, rows, cols), up(t, be, ref, rows, cols)); err != nil {
				t.Fatal(err)
			}
			return [][]float32{host(t, d)}
		}},
		op{"Rewards", 0, 0, func(t *testing.T, be tensor.Backend) [][]float32 {
			d := tensor.Must(tensor.New(be, tensor.Float32, rows, cols))
			if err := divergence.Rewards(d, up(t, be, scores, rows, cols), up(t, be, lp, rows, cols), up(t, be, ref, rows, cols), 0.05); err != nil {
				t.Fatal(err)
			}
			return [][]float32{host(t, d)}
		}},
		op{"MaskedMean", 0, 0, func(t *testing.T, be tensor.Backend) [][]float32 {
			s, c, err := tensor.MaskedSum(up(t, be, lp, rows, cols), up(t, be, m, rows, cols))
			if err != nil {
				t.Fatal(err)
			}
			mean, err := tensor.MaskedMean(up(t, be, lp, rows, cols), up(t, be, m, rows, cols))
			if err != nil {
				t.Fatal(err)
			}
			return [][]float32{{float32(s), float32(c), mean}}
		}},
		op{"TopPMask", 0, 0, func(t *testing.T, be tensor.Backend) [][]float32 {
			d := tensor.Must(tensor.New(be, tensor.Float32, rows, cols))
			k := tensor.Must(tensor.New(be, tensor.Int32, rows))
			if err := tensor.TopPMask(d, k, up(t, be, scores, rows, cols), up(t, be, m, rows, cols), 0.4); err != nil {
				t.Fatal(err)
			}
			return [][]float32{host(t, d), host(t, k)}
		}},
	)
	return ops
}

// TestCrossCheck compares every device op with the CPU backend's pure-Go reference kernels on
// random inputs at realistic sizes, and runs each twice on the device (the results must be
// bitwise equal). The device kernels mirror the pure-Go kernels' float32 arithmetic and sum in
// float64 like them; the CPU backend's SIMD kernels differ from both in the last bits (their own
// tests bound that), which cancellation can amplify past any relative tolerance.
func TestCrossCheck(t *testing.T) {
	b := device(t)
	defer dispatch.ForceGo()()
	shapes := [][2]int{{3, 33}, {64, 1024}, {512, 2048}}
	switch {
	case os.Getenv("MTRL_CUDA_SMALL") == "1": // slow emulated runs (AddressSanitizer, reverse order)
		shapes = shapes[:2]
	case !testing.Short():
		shapes = append(shapes, [2]int{2048, 2048}) // 4M tokens
	}
	for _, s := range shapes {
		for _, o := range append(crossOps(s[0], s[1]), lossOps(s[0], s[1])...) {
			t.Run(fmt.Sprintf("%s/shape=%dx%d", o.name, s[0], s[1]), func(t *testing.T) {
				want := o.run(t, tensor.CPU())
				got := o.run(t, b)
				again := o.run(t, b)
				for i := range want {
					near(t, o.name, got[i], want[i], o.rtol, o.atol)
					if !same(got[i], again[i]) {
						t.Errorf("%s output %d: two device runs differ", o.name, i)
					}
				}
			})
		}
	}
}

// TestLogProbCrossCheck compares the fused log-prob/entropy forward and backward with the CPU
// backend at vocabulary scale (few rows, so the rows are split across blocks, and many rows),
// and checks determinism.
func TestLogProbCrossCheck(t *testing.T) {
	b := device(t)
	shapes := [][2]int{{2, 151936}, {64, 32000}}
	if !testing.Short() {
		shapes = append(shapes, [2]int{512, 151936})
	}
	type dtypes struct{ logits, grad tensor.DType }
	for _, dt := range []dtypes{{tensor.Float32, tensor.Float32}, {tensor.BFloat16, tensor.BFloat16},
		{tensor.BFloat16, tensor.Float32}, {tensor.Float32, tensor.BFloat16}} {
		for _, s := range shapes {
			t.Run(fmt.Sprintf("dtype=%v/grad=%v/shape=%dx%d", dt.logits, dt.grad, s[0], s[1]), func(t *testing.T) {
				n, v := s[0], s[1]
				r := rand.New(rand.NewPCG(7, uint64(n)))
				x := randn(r, n*v, 3)
				var h *tensor.Tensor
				if dt.logits == tensor.BFloat16 {
					bf := make([]tensor.BF16, len(x))
					for i := range x {
						bf[i] = tensor.BF16FromFloat32(x[i])
					}
					h = tensor.Must(tensor.FromBF16(bf, n, v))
				} else {
					h = tensor.Must(tensor.FromFloat32(x, n, v))
				}
				ys := make([]int32, n)
				for i := range ys {
					ys[i] = int32(r.IntN(v))
				}
				gl, ge := randn(r, n, 1), randn(r, n, 1)
				run := func(be tensor.Backend) (lp, ent, dl []float32) {
					logits, err := tensor.To(be, h)
					if err != nil {
						t.Fatal(err)
					}
					y := upI(t, be, ys, n)
					l, e := tensor.Must(tensor.New(be, tensor.Float32, n)), tensor.Must(tensor.New(be, tensor.Float32, n))
					if err := tensor.LogProbEntropy(l, e, logits, y, 0.9); err != nil {
						t.Fatal(err)
					}
					d := tensor.Must(tensor.New(be, dt.grad, n, v))
					if err := tensor.LogProbEntropyBackward(d, logits, y, l, e, up(t, be, gl, n), up(t, be, ge, n), 0.9); err != nil {
						t.Fatal(err)
					}
					return host(t, l), host(t, e), host(t, d)
				}
				lp, ent, dl := run(tensor.CPU())
				glp, gent, gdl := run(b)
				near(t, "logp", glp, lp, 1e-5, 1e-4)
				near(t, "entropy", gent, ent, 1e-5, 1e-4)
				rtol, atol := 1e-4, 1e-7
				if dt.grad == tensor.BFloat16 {
					rtol, atol = 8e-3, 1e-7
				}
				near(t, "dlogits", gdl, dl, rtol, atol)
				alp, aent, adl := run(b)
				if !same(glp, alp) || !same(gent, aent) || !same(gdl, adl) {
					t.Error("two device runs differ")
				}
			})
		}
	}
}

// BenchmarkLogProbEntropy is the fused forward at the GPU shapes of DESIGN.md §8.
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
		bench("LowVarKLGrad", 12*n, func() error { return divergence.PenaltyGrad(dst, lp, ref, divergence.LowVarKL) })
		bench("PerceptionScore", 12*n, func() error { return divergence.PerceptionScore(dst, lp, ref) })
		bench("MaskedMean", 8*n, func() error { _, err := tensor.MaskedMean(lp, m); return err })
	}
}
