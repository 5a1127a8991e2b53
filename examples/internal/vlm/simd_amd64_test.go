//go:build !noasm

package vlm

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestKern4x32SameBits: the AVX-512 GEMM blocks give kern4x16's bits (each element the same
// fused multiply-adds in the same order), at the model's widths and an odd one.
func TestKern4x32SameBits(t *testing.T) {
	if !hasKernel512 {
		t.Skip("no AVX-512")
	}
	rng := rand.New(rand.NewPCG(4, 4))
	for _, sh := range [][3]int{{236, 192, 64}, {96, 73, 64}, {64, 128, 300}, {130, 64, 128}} {
		m, n, k := sh[0], sh[1], sh[2]
		a, b := make([]float32, m*k), make([]float32, k*n)
		for i := range a {
			a[i] = float32(rng.NormFloat64())
		}
		for i := range b {
			b[i] = float32(rng.NormFloat64())
		}
		c512, c256 := make([]float32, m*n), make([]float32, m*n)
		sgemmFast(false, false, m, n, k, a, b, 0, c512)
		hasKernel512 = false
		sgemmFast(false, false, m, n, k, a, b, 0, c256)
		hasKernel512 = true
		for i := range c512 {
			if math.Float32bits(c512[i]) != math.Float32bits(c256[i]) {
				t.Fatalf("%v [%d]: avx512 %v, avx2 %v", sh, i, c512[i], c256[i])
			}
		}
	}
}
