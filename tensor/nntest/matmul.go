package nntest

import (
	"fmt"
	"math"
	"testing"

	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/tensor"
)

// gemmBound fails t when an element of got differs from the float64 product want by more than
// the worst-case error of a float32 sum of k products, 2k·2⁻²⁴·Σ|a||b| (abs is that sum).
func gemmBound(t *testing.T, name string, got []float32, want, abs []float64, k int) {
	t.Helper()
	for i, w := range want {
		if d := math.Abs(float64(got[i]) - w); !(d <= float64(2*k+2)*0x1p-24*abs[i]) {
			t.Fatalf("%s[%d] = %.9g, want %.9g (|difference| %g, bound %g)", name, i, got[i], w, d, float64(2*k+2)*0x1p-24*abs[i])
		}
	}
}

func absOf(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = math.Abs(x)
	}
	return out
}

// MatMul checks MatMul against the float64 product for every transpose, float32 and bfloat16
// inputs, a shared and a batched right-hand side, and accumulation.
func MatMul(t *testing.T, b tensor.Backend) {
	for _, c := range []struct {
		batch, m, n, k   int
		ta, tb, bBatched bool
		bf16a, bf16b     bool
	}{
		{1, 33, 70, 129, false, false, false, false, false},
		{1, 33, 70, 129, false, true, false, true, true},
		{3, 17, 9, 65, true, false, true, false, true},
		{2, 5, 40, 31, true, true, true, true, false},
		{4, 1, 96, 200, false, true, false, false, false}, // decode-shaped rows, shared weight
	} {
		t.Run(fmt.Sprintf("%dx%dx%dx%d/ta=%v/tb=%v/batchedB=%v/bf16=%v,%v", c.batch, c.m, c.n, c.k, c.ta, c.tb, c.bBatched, c.bf16a, c.bf16b), func(t *testing.T) {
			e := newEnv(t, b, uint64(c.m*c.n+c.k))
			nbB := 1
			if c.bBatched {
				nbB = c.batch
			}
			av, bv := e.randn(c.batch*c.m*c.k, 1, c.bf16a), e.randn(nbB*c.k*c.n, 1, c.bf16b)
			c0 := e.randn(c.batch*c.m*c.n, 1, false)
			aShape := []int{c.batch, c.m, c.k}
			if c.ta {
				aShape = []int{c.batch, c.k, c.m}
			}
			bShape := []int{c.k, c.n}
			if c.tb {
				bShape = []int{c.n, c.k}
			}
			if c.bBatched {
				bShape = append([]int{c.batch}, bShape...)
			}
			o := tensor.MatMulOptions{TransA: c.ta, TransB: c.tb}
			run := func(acc bool) []float32 {
				a, bb := e.put(av, c.bf16a, aShape...), e.put(bv, c.bf16b, bShape...)
				out := e.f32(append([]float32(nil), c0...), c.batch, c.m, c.n)
				o.Accumulate = acc
				e.ok(tensor.MatMul(out, a, bb, o))
				return e.host(out)
			}
			a64, b64 := f64(av), f64(bv)
			want, abs := make([]float64, len(c0)), make([]float64, len(c0))
			for i := range c.batch {
				bi, bAbs := b64, absOf(b64)
				if c.bBatched {
					bi = b64[i*c.k*c.n : (i+1)*c.k*c.n]
					bAbs = absOf(bi)
				}
				ai := a64[i*c.m*c.k : (i+1)*c.m*c.k]
				nnref.Gemm(c.ta, c.tb, c.m, c.n, c.k, ai, bi, false, want[i*c.m*c.n:(i+1)*c.m*c.n])
				nnref.Gemm(c.ta, c.tb, c.m, c.n, c.k, absOf(ai), bAbs, false, abs[i*c.m*c.n:(i+1)*c.m*c.n])
			}
			got := twice(t, func() [][]float32 { return [][]float32{run(false), run(true)} })
			gemmBound(t, "c", got[0], want, abs, c.k)
			for i := range want {
				want[i] += float64(c0[i])
				abs[i] += math.Abs(float64(c0[i]))
			}
			gemmBound(t, "c+=", got[1], want, abs, c.k+1)
		})
	}
}
