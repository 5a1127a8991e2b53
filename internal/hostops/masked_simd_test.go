package hostops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

var edgeSizes = []int{0, 1, 15, 16, 17, 31, 32, 33, 1023, 1025}

func maskedInputs(r *rand.Rand, n int, specials bool) (v, m []float32) {
	v, m = make([]float32, n), make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64()*3 + 1)
		if r.Float64() < 0.8 {
			m[i] = 1
		} else if r.IntN(4) == 0 {
			m[i] = 0.5
		}
		if specials && r.IntN(50) == 0 {
			v[i] = []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}[r.IntN(3)]
			m[i] = 0 // masked out: must not propagate
		}
	}
	return v, m
}

func sameF32(a, b float32) bool { return a == b || (a != a && b != b) }

// TestMaskedSIMDVsGo compares the vector kernels with the pure-Go loops on edge sizes: sums
// agree to float64 rounding, the float32 mean, variance and whitened values are equal (or
// within an ulp), NaN/Inf under a zero mask do not propagate and an unmasked NaN does.
func TestMaskedSIMDVsGo(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, im := range maskedImpls.SIMD() {
		name := im.Name
		for _, n := range edgeSizes {
			for _, specials := range []bool{false, true} {
				v, m := maskedInputs(r, n, specials)
				if specials && n > 3 {
					v[n/2], m[n/2] = float32(math.NaN()), 1
				}
				ws, wc := maskedSumGo(v, m)
				wm, wv := func() (float32, float32) {
					defer UseMaskedImpl("go")()
					return maskedMoments(v, m, true)
				}()
				ww := make([]float32, n)
				func() { defer UseMaskedImpl("go")(); MaskedWhiten(ww, v, m) }()

				restore := UseMaskedImpl(name)
				gs, gc := MaskedSum(v, m)
				gm, gv := maskedMoments(v, m, true)
				gw := make([]float32, n)
				MaskedWhiten(gw, v, m)
				gw2 := make([]float32, n)
				MaskedWhiten(gw2, v, m)
				restore()

				tag := fmt.Sprintf("%s n=%d specials=%v", name, n, specials)
				if !(math.Abs(gs-ws) <= 1e-12*(1+math.Abs(ws))) && !(math.IsNaN(gs) && math.IsNaN(ws)) || gc != wc {
					t.Fatalf("%s: sum (%v, %v), want (%v, %v)", tag, gs, gc, ws, wc)
				}
				if !sameF32(gm, wm) || !sameF32(gv, wv) {
					t.Fatalf("%s: moments (%v, %v), want (%v, %v)", tag, gm, gv, wm, wv)
				}
				for i := range ww {
					if !sameF32(gw[i], ww[i]) || math.Float32bits(gw[i]) != math.Float32bits(gw2[i]) {
						t.Fatalf("%s: whiten[%d] = %v (again %v), want %v", tag, i, gw[i], gw2[i], ww[i])
					}
				}
			}
		}
	}
}

// TestMaskedSIMDGOMAXPROCS checks the chunked reductions give the same bits on one core and all.
func TestMaskedSIMDGOMAXPROCS(t *testing.T) {
	if testing.Short() {
		t.Skip("large input")
	}
	v, m := maskedInputs(rand.New(rand.NewPCG(3, 4)), 3*maskedChunk+7, false)
	old := runtime.GOMAXPROCS(1)
	s1, c1 := MaskedSum(v, m)
	v1 := MaskedVar(v, m, true)
	runtime.GOMAXPROCS(old)
	s2, c2 := MaskedSum(v, m)
	v2 := MaskedVar(v, m, true)
	if s1 != s2 || c1 != c2 || v1 != v2 {
		t.Fatalf("GOMAXPROCS=1 (%v, %v, %v) != GOMAXPROCS=%d (%v, %v, %v)", s1, c1, v1, old, s2, c2, v2)
	}
}

// BenchmarkMaskedWhiten times MaskedWhiten per implementation (impl=avx512|avx2|go).
func BenchmarkMaskedWhiten(b *testing.B) {
	for _, name := range MaskedImpls() {
		for _, sh := range [][2]int{{64, 1024}, {512, 2048}} {
			b.Run(fmt.Sprintf("cpu/impl=%s/shape=%dx%d", name, sh[0], sh[1]), func(b *testing.B) {
				defer UseMaskedImpl(name)()
				n := sh[0] * sh[1]
				v, m := maskedInputs(rand.New(rand.NewPCG(5, 6)), n, false)
				dst := make([]float32, n)
				b.SetBytes(int64(3 * 4 * n))
				for b.Loop() {
					MaskedWhiten(dst, v, m)
				}
				b.ReportMetric(float64(b.N)*float64(n)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}
