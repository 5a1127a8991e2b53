package vlm

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// Float is the element type of the model's kernels: float32 in production, float64 in the
// gradient checks.
type Float interface{ float32 | float64 }

// gemm computes c = op(a)·op(b) + beta·c on row-major slices: op(a) is [m,k] (a is [k,m] when
// ta), op(b) is [k,n] (b is [n,k] when tb), c is [m,n]. gonum's gemm splits the output into
// blocks and runs the whole k loop of a block on one goroutine, so results are deterministic.
func gemm[F Float](ta, tb bool, m, n, k int, a, b []F, beta F, c []F) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		for i := range c[:m*n] {
			c[i] *= beta
		}
		return
	}
	tA, lda := blas.NoTrans, k
	if ta {
		tA, lda = blas.Trans, m
	}
	tB, ldb := blas.NoTrans, n
	if tb {
		tB, ldb = blas.Trans, k
	}
	switch cc := any(c).(type) {
	case []float32:
		if hasKernel {
			sgemmFast(ta, tb, m, n, k, any(a).([]float32), any(b).([]float32), float32(beta), cc)
			return
		}
		gonum.Implementation{}.Sgemm(tA, tB, m, n, k, 1, any(a).([]float32), lda, any(b).([]float32), ldb, float32(beta), cc, n)
	case []float64:
		gonum.Implementation{}.Dgemm(tA, tB, m, n, k, 1, any(a).([]float64), lda, any(b).([]float64), ldb, float64(beta), cc, n)
	}
}

// gemmBias computes c = a·b + bias (a [m,k], b [k,n], bias [n]). With the float32 kernel it starts c
// at the bias and accumulates (the kernel adds its sum to c once: the same bits as adding the
// bias after, without a second pass over c).
func gemmBias[F Float](m, n, k int, a, b, bias, c []F) {
	if hasKernel && isF32[F]() {
		for i := range m {
			copy(c[i*n:(i+1)*n], bias[:n])
		}
		gemm(false, false, m, n, k, a, b, 1, c)
		return
	}
	gemm(false, false, m, n, k, a, b, 0, c)
	addBias(m, n, c, bias)
}
