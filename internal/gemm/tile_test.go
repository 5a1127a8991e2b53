package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestTile checks Tile with every implementation against the float64 product, for every row
// count, widths that need the wide, the narrow and the pure-Go kernels, and slices cut exactly
// to what the strides reach (so a read past column n of b or a write past it in c would be
// caught by the bounds check or the untouched-element check).
func TestTile(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, name := range Impls() {
		for mr := 1; mr <= MR; mr++ {
			for _, kn := range [][2]int{{0, 16}, {1, 1}, {64, 64}, {37, 80}, {64, 95}, {5, 130}} {
				k, n := kn[0], kn[1]
				t.Run(fmt.Sprintf("%s/%d/%dx%d", name, mr, k, n), func(t *testing.T) {
					defer Use(name)()
					lda, ldb, ldc := k+2, n+3, n+7
					a := make([]float32, max(0, (mr-1)*lda+k))
					b := make([]float32, max(0, (k-1)*ldb+n))
					c0 := make([]float32, (mr-1)*ldc+n+7)
					for _, v := range [][]float32{a, b, c0} {
						for i := range v {
							v[i] = float32(r.NormFloat64())
						}
					}
					for _, acc := range []bool{false, true} {
						c := append([]float32(nil), c0...)
						Tile(mr, k, a, lda, b, ldb, c, ldc, n, acc)
						for i := range mr {
							for j := range ldc {
								if i*ldc+j >= len(c) {
									break
								}
								got := c[i*ldc+j]
								if j >= n {
									if got != c0[i*ldc+j] {
										t.Fatalf("acc=%v: c[%d,%d] (past n) changed", acc, i, j)
									}
									continue
								}
								var want, bound float64
								if acc {
									want, bound = float64(c0[i*ldc+j]), math.Abs(float64(c0[i*ldc+j]))
								}
								for p := range k {
									x := float64(a[i*lda+p]) * float64(b[p*ldb+j])
									want += x
									bound += math.Abs(x)
								}
								if d := math.Abs(float64(got) - want); !(d <= float64(2*k+2)*0x1p-24*bound) {
									t.Fatalf("acc=%v: c[%d,%d] = %v, want %v", acc, i, j, got, want)
								}
							}
						}
					}
				})
			}
		}
	}
}
