package vlm

import (
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// TestGemmMatchesGonum checks the float32 matrix product (micro-kernel path where the CPU has
// it) against gonum's Sgemm for all transpose combinations and edge sizes.
func TestGemmMatchesGonum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, sz := range [][3]int{{1, 1, 1}, {4, 16, 3}, {5, 17, 9}, {130, 100, 64}, {64, 192, 600}, {7, 33, 0}} {
		m, n, k := sz[0], sz[1], sz[2]
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for _, beta := range []float32{0, 1, 0.5} {
					a, b := make([]float32, m*k), make([]float32, k*n)
					c := make([]float32, m*n)
					for i := range a {
						a[i] = float32(rng.NormFloat64())
					}
					for i := range b {
						b[i] = float32(rng.NormFloat64())
					}
					for i := range c {
						c[i] = float32(rng.NormFloat64())
					}
					want := append([]float32(nil), c...)
					if k > 0 {
						tA, lda, tB, ldb := blas.NoTrans, max(k, 1), blas.NoTrans, max(n, 1)
						if ta {
							tA, lda = blas.Trans, max(m, 1)
						}
						if tb {
							tB, ldb = blas.Trans, max(k, 1)
						}
						gonum.Implementation{}.Sgemm(tA, tB, m, n, k, 1, a, lda, b, ldb, beta, want, n)
					} else {
						for i := range want {
							want[i] *= beta
						}
					}
					gemm(ta, tb, m, n, k, a, b, beta, c)
					for i := range c {
						if math.Abs(float64(c[i]-want[i])) > 1e-4*(1+math.Abs(float64(want[i])))*math.Sqrt(float64(k+1)) {
							t.Fatalf("m=%d n=%d k=%d ta=%v tb=%v beta=%v: c[%d]=%v want %v", m, n, k, ta, tb, beta, i, c[i], want[i])
						}
					}
				}
			}
		}
	}
}
