package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/internal/asmcheck"
)

func TestAsmUpToDate(t *testing.T) { asmcheck.UpToDate(t, "gemm", "gemm") }

// TestMul checks every implementation against the float64 product at shapes with partial row
// groups, partial panels and partial K blocks, with a row stride wider than K, overwriting and
// accumulating. The bound is the worst-case error of a float32 sum of k+1 terms:
// (2k+2)·2⁻²⁴·Σ|a||w|.
func TestMul(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, name := range Impls() {
		for _, s := range [][3]int{{1, 1, 1}, {5, 63, 127}, {6, 64, 128}, {7, 65, 129}, {13, 150, 300}, {2, 16, 0}, {32, 896, 257}} {
			m, n, k := s[0], s[1], s[2]
			t.Run(fmt.Sprintf("%s/%dx%dx%d", name, m, n, k), func(t *testing.T) {
				defer Use(name)()
				lda, ldc := k+3, n+5
				a, w, c0 := make([]float32, m*lda), make([]float32, n*k), make([]float32, m*ldc)
				for _, v := range [][]float32{a, w, c0} {
					for i := range v {
						v[i] = float32(r.NormFloat64())
					}
				}
				p := Pack(n, k, func(i int) float32 { return w[i] })
				for _, acc := range []bool{false, true} {
					c := append([]float32(nil), c0...)
					Mul(m, a, lda, p, c, ldc, acc)
					for i := range m {
						for j := range ldc {
							got := c[i*ldc+j]
							if j >= n { // outside the product: untouched
								if got != c0[i*ldc+j] {
									t.Fatalf("acc=%v: c[%d,%d] (past N) changed", acc, i, j)
								}
								continue
							}
							var want, bound float64
							if acc {
								want, bound = float64(c0[i*ldc+j]), math.Abs(float64(c0[i*ldc+j]))
							}
							for pp := range k {
								x := float64(a[i*lda+pp]) * float64(w[j*k+pp])
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
