package nnref

import "github.com/mtrl-go/mtrl/internal/parallel"

// Gemm computes c = op(a)·op(b), or c += op(a)·op(b) when acc, on row-major slices: op(a) is
// [m,k] (a is stored [k,m] when ta), op(b) is [k,n] (b is stored [n,k] when tb), c is [m,n].
// Each element is one sum over k in ascending order in F (whatever the loop order, the same
// bits), added to c after the sum.
func Gemm[F Float](ta, tb bool, m, n, k int, a, b []F, acc bool, c []F) {
	parallel.For(m, parallel.Grain(n*max(k, 1), 1<<15), func(lo, hi int) {
		gemmRows(ta, tb, lo, hi, m, n, k, a, b, acc, c)
	})
}

// gemmRows is Gemm for the output rows [lo, hi) on the calling goroutine.
func gemmRows[F Float](ta, tb bool, lo, hi, m, n, k int, a, b []F, acc bool, c []F) {
	row := make([]F, n)
	for i := lo; i < hi; i++ {
		if tb && !ta { // rows of a and b are both contiguous: one dot product per element
			for j := range row {
				row[j] = Dot(a[i*k:i*k+k], b[j*k:j*k+k])
			}
		} else {
			clear(row)
			for p := 0; p < k; p++ {
				aip := a[i*k+p]
				if ta {
					aip = a[p*m+i]
				}
				if tb {
					for j := range row {
						row[j] += F(aip * b[j*k+p])
					}
					continue
				}
				for j, bv := range b[p*n : p*n+n] {
					row[j] += F(aip * bv)
				}
			}
		}
		ci := c[i*n : i*n+n]
		if !acc {
			copy(ci, row)
			continue
		}
		for j := range ci {
			ci[j] += row[j]
		}
	}
}

// Dot is the sum of x[i]*y[i] in ascending order in F: the same bits as one element of Gemm.
func Dot[F Float](x, y []F) F {
	var s F
	for i, v := range x {
		s += F(v * y[i])
	}
	return s
}

// Linear computes y = x·wᵀ + bias for x [m,k], w [n,k] (a Hugging Face nn.Linear weight:
// out × in) and bias [n] (nil for none). The bias is added after the sum.
func Linear[F Float](m, n, k int, x, w, bias, y []F) {
	Gemm(false, true, m, n, k, x, w, false, y)
	if bias != nil {
		AddBias(m, n, y, bias)
	}
}

// AddBias adds bias [n] to every row of y [m, n].
func AddBias[F Float](m, n int, y, bias []F) {
	parallel.For(m, parallel.Grain(n, 1<<15), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			yi := y[i*n : i*n+n]
			for j := range yi {
				yi[j] += bias[j]
			}
		}
	})
}

// LinearBackward computes, from dy [m,n], dx = dy·w [m,k] (overwritten), dw = dyᵀ·x [n,k] and
// dbias = the column sums of dy [n] (overwritten, or added to when acc). Nil outputs are
// skipped.
func LinearBackward[F Float](m, n, k int, x, w, dy []F, dx, dw, dbias []F, acc bool) {
	if dx != nil {
		Gemm(false, false, m, k, n, dy, w, false, dx)
	}
	if dw != nil {
		Gemm(true, false, n, k, m, dy, x, acc, dw)
	}
	if dbias != nil {
		ColSum(m, n, dy, acc, dbias)
	}
}

// ColSum writes (or adds, acc) the column sums of x [m,n] into dst [n], each summed over rows
// in ascending order; columns run in parallel.
func ColSum[F Float](m, n int, x []F, acc bool, dst []F) {
	parallel.For(n, 256, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			var s F
			for i := range m {
				s += x[i*n+j]
			}
			if acc {
				s += dst[j]
			}
			dst[j] = s
		}
	})
}
