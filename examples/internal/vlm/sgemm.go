package vlm

import "github.com/mtrl-go/mtrl/internal/parallel"

// sgemmFast computes c = op(a)·op(b) + beta·c like gemm for float32 with the AVX2 4×16
// micro-kernel, or 4×32 on AVX-512 (the same fused multiply-adds in the same order, so the same
// bits). Transposed operands are first copied into row-major scratch. Each element of c is
// computed by one goroutine with a fixed summation order, so results are deterministic.
func sgemmFast(ta, tb bool, m, n, k int, a, b []float32, beta float32, c []float32) {
	c = c[:m*n]
	switch beta {
	case 0:
		clear(c)
	case 1:
	default:
		for i := range c {
			c[i] *= beta
		}
	}
	if k == 0 {
		return
	}
	if ta {
		at := make([]float32, m*k)
		transpose(k, m, a, at)
		a = at
	}
	if tb {
		bt := make([]float32, k*n)
		transpose(n, k, b, bt)
		b = bt
	}
	const kc = 256
	nb := n / 16 * 16
	mb := m / 4 * 4
	block := func(i0, i1, j0, j1 int) { // rows [i0,i1) (multiple of 4 long), 16-col blocks in [j0,j1)
		for p0 := 0; p0 < k; p0 += kc {
			kk := min(kc, k-p0)
			j := j0
			if hasKernel512 { // 32-column blocks on AVX-512, then at most one of 16
				for ; j+32 <= j1; j += 32 {
					for i := i0; i < i1; i += 4 {
						kern4x32(kk, &a[i*k+p0], k, &b[p0*n+j], n, &c[i*n+j], n)
					}
				}
			}
			for ; j < j1; j += 16 {
				for i := i0; i < i1; i += 4 {
					kern4x16(kk, &a[i*k+p0], k, &b[p0*n+j], n, &c[i*n+j], n)
				}
			}
		}
	}
	if m >= 128 {
		const mc = 64
		parallel.For((mb+mc-1)/mc, 1, func(lo, hi int) {
			for ch := lo; ch < hi; ch++ {
				block(ch*mc, min((ch+1)*mc, mb), 0, nb)
			}
		})
	} else {
		parallel.For(nb/16, 1, func(lo, hi int) {
			block(0, mb, lo*16, hi*16)
		})
	}
	// edges: columns [nb, n) of all rows and rows [mb, m) of the first nb columns
	edge := func(i, j0, j1 int) {
		ar := a[i*k : (i+1)*k]
		cr := c[i*n : (i+1)*n]
		for j := j0; j < j1; j++ {
			var s float32
			for p, av := range ar {
				s += av * b[p*n+j]
			}
			cr[j] += s
		}
	}
	if nb < n {
		parallel.For(m, parallel.Grain((n-nb)*k, 1<<15), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				edge(i, nb, n)
			}
		})
	}
	for i := mb; i < m; i++ {
		edge(i, 0, nb)
	}
}

// transpose writes src [r, c] into dst [c, r].
func transpose(r, c int, src, dst []float32) {
	const t = 32
	for i0 := 0; i0 < r; i0 += t {
		for j0 := 0; j0 < c; j0 += t {
			for i := i0; i < min(i0+t, r); i++ {
				for j := j0; j < min(j0+t, c); j++ {
					dst[j*r+i] = src[i*c+j]
				}
			}
		}
	}
}
