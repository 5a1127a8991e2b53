package gemm

import "fmt"

// Tile computes, on the calling goroutine, c = a·b (c += a·b when acc) for mr <= MR rows of a
// (k columns, row stride lda), b of k rows and n columns (row stride ldb) and c of mr rows and n
// columns (row stride ldc). Unlike Mul it takes b as it lies in memory, unpacked: attention
// multiplies rows of Q, K and V and small tiles that are reused from L1, where packing would cost
// as much as the product. The columns go in calls of the active micro-kernel's width; a narrower
// rest goes to the AVX2 kernels (16 columns) when the active ones are wider, and what is left
// (fewer than 16 columns) to the pure-Go tile. No element of b past column n is read. The sums
// over k run in ascending order, so the result does not depend on how the caller splits rows.
func Tile(mr, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc, n int, acc bool) {
	if mr < 1 || mr > MR || k < 0 || n < 0 {
		panic(fmt.Sprintf("gemm.Tile: mr = %d, k = %d, n = %d", mr, k, n))
	}
	if n == 0 {
		return
	}
	if len(c) < (mr-1)*ldc+n {
		panic(fmt.Sprintf("gemm.Tile: c has %d elements, want %d", len(c), (mr-1)*ldc+n))
	}
	if k == 0 {
		if !acc {
			for i := range mr {
				clear(c[i*ldc : i*ldc+n])
			}
		}
		return
	}
	if len(a) < (mr-1)*lda+k || len(b) < (k-1)*ldb+n {
		panic(fmt.Sprintf("gemm.Tile: a has %d elements (want %d), b %d (want %d)", len(a), (mr-1)*lda+k, len(b), (k-1)*ldb+n))
	}
	j := 0
	if ks := impls.Active(); ks != nil {
		for ; j+ks.width <= n; j += ks.width {
			ks.tile[mr](k, &a[0], lda, &b[j], ldb, &c[j], ldc, acc)
		}
		if nw := narrowKernels; nw != nil && nw != ks {
			for ; j+nw.width <= n; j += nw.width {
				nw.tile[mr](k, &a[0], lda, &b[j], ldb, &c[j], ldc, acc)
			}
		}
	}
	for ; j < n; j += Panel {
		tileGo(mr, min(Panel, n-j), k, &a[0], lda, &b[j], ldb, &c[j], ldc, acc)
	}
}

// narrowKernels are the 16-column AVX2 kernels when this CPU runs them (Tile's rest columns).
var narrowKernels = func() *kernels {
	for _, im := range impls.SIMD() {
		if im.Kernels.width == 16 {
			return im.Kernels
		}
	}
	return nil
}()
