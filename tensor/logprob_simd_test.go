package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"

	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/internal/hostops"
)

func simdOnly(t testing.TB) []dispatch.Impl[lpSIMD] {
	out := lpImpls.SIMD()
	if len(out) == 0 {
		t.Skip("no SIMD implementation in this build or on this CPU (pure Go only)")
	}
	return out
}

func randLogits(r *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * scale)
	}
	return x
}

// TestLogProbKernelsVsGo checks the block kernels against the scalar loops they replace, on
// every length up to a few vectors past the unrolled step, both dtypes, with and without a
// temperature, and with -Inf (masked) entries.
func TestLogProbKernelsVsGo(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, im := range simdOnly(t) {
		k := im.Kernels
		for n := 0; n <= 4*k.lanes*4+3; n++ {
			for _, bf := range []bool{false, true} {
				nn := r.IntN(n + 1) // the next block: a length up to n
				x := randLogits(r, n+nn, 3)
				if n > 5 {
					x[n/3] = float32(math.Inf(-1))
				}
				rows := logitRows{v: n + nn, f32: x}
				if bf {
					rows = logitRows{v: n + nn, b16: make([]BF16, n+nn)}
					for i, v := range x {
						rows.b16[i] = BF16FromFloat32(v)
						x[i] = rows.b16[i].Float32()
					}
				}
				want, wantNext := float32(math.Inf(-1)), float32(math.Inf(-1))
				for _, v := range x[:n] {
					want = max(want, v)
				}
				for _, v := range x[n:] {
					wantNext = max(wantNext, v)
				}
				if got := k.blockMax(rows, 0, 0, n); got != want {
					t.Fatalf("%s bf16=%v n=%d: max %v, want %v", im.Name, bf, n, got, want)
				}
				if n == 0 {
					continue
				}
				for _, temp := range []float32{1, 0.7} {
					m := want / temp
					var ws, wt float64
					for _, v := range x[:n] {
						u := float64(floorExpArg(v/temp - m))
						ws += math.Exp(u)
						wt += math.Exp(u) * u
					}
					s, tt, nm := k.fold(rows, 0, 0, n, n+nn, m, temp, temp != 1)
					if math.Abs(float64(s)-ws) > 1e-6*ws || math.Abs(float64(tt)-wt) > 1e-6*math.Abs(wt)+1e-30*float64(n) {
						t.Fatalf("%s bf16=%v n=%d temp=%v: fold (%v, %v), want (%v, %v)", im.Name, bf, n, temp, s, tt, ws, wt)
					}
					if nm != wantNext {
						t.Fatalf("%s bf16=%v n=%d next=%d: next max %v, want %v", im.Name, bf, n, nn, nm, wantNext)
					}
				}
			}
		}
	}
}

// TestLogProbKernelsSpecial: NaN anywhere in a row gives NaN, also in an all -Inf block; NaN
// logits in the backward give quiet NaN bfloat16 gradients; exp over the whole reduced range.
func TestLogProbKernelsSpecial(t *testing.T) {
	for _, im := range simdOnly(t) {
		k := im.Kernels
		for _, v := range []int{5, 64, 100, simdBlock + 77} {
			for pos := 0; pos < v; pos += max(1, v/7) {
				x := make([]float32, v)
				for i := range x {
					x[i] = float32(math.Inf(-1))
				}
				if v > 64 {
					x[v-1] = 1 // a later block is finite
				}
				x[pos] = float32(math.NaN())
				_, s, _ := rowStatsSIMD(k, logitRows{v: v, f32: x}, 0, 1)
				if !math.IsNaN(s) {
					t.Fatalf("%s v=%d NaN at %d: s = %v, want NaN", im.Name, v, pos, s)
				}
			}
		}
		// exp accuracy against math.Exp over [-87, 0.34] through the fold of single values.
		worst, worstGo := 0.0, 0.0
		for u := -87.0; u <= 0.34; u += 0.0013 {
			x := make([]float32, k.lanes)
			for i := range x {
				x[i] = float32(u)
			}
			s, _, _ := k.fold32(x, nil, 0, 1)
			got := float64(s / float32(k.lanes)) // equal lanes: the reduction is exact
			want := math.Exp(float64(float32(u)))
			if rel := math.Abs(got-want) / want; rel > worst {
				worst = rel
			}
			if rel := math.Abs(float64(hostops.ExpNonPosTable(float32(u)))-want) / want; rel > worstGo {
				worstGo = rel
			}
		}
		if worst > 3e-7 { // a few float32 ulp (one ulp is 6e-8 to 1.2e-7 relative)
			t.Fatalf("%s: exp relative error %.3g", im.Name, worst)
		}
		t.Logf("%s: worst exp relative error %.3g (hostops.ExpNonPosTable: %.3g)", im.Name, worst, worstGo)
		// Backward with NaN logits: NaN gradients, quiet in bfloat16.
		x := randLogits(rand.New(rand.NewPCG(1, 2)), 3*k.lanes, 1)
		x[5] = float32(math.NaN())
		out16 := make([]BF16, len(x))
		k.backwardRow(nil, out16, logitRows{v: len(x), f32: x}, 0, 1, -3, 0.5, 0.25, 2, 1, false)
		if g := out16[5].Float32(); !math.IsNaN(float64(g)) {
			t.Fatalf("%s: bf16 gradient of a NaN logit is %v", im.Name, g)
		}
	}
}

// TestLogProbSIMDDeterminism: bit-identical results for any GOMAXPROCS and across runs.
func TestLogProbSIMDDeterminism(t *testing.T) {
	simdOnly(t)
	r := rand.New(rand.NewPCG(7, 7))
	n, v := 9, 3*simdBlock+45
	x := randLogits(r, n*v, 4)
	ys := make([]int32, n)
	for i := range ys {
		ys[i] = int32(r.IntN(v))
	}
	logits, _ := FromFloat32(x, n, v)
	tg, _ := FromInt32(ys, n)
	run := func(procs int) ([]float32, []float32, []float32) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		lp, ent := Must(New(CPU(), Float32, n)), Must(New(CPU(), Float32, n))
		if err := LogProbEntropy(lp, ent, logits, tg, 0.9); err != nil {
			t.Fatal(err)
		}
		dl := Must(New(CPU(), Float32, n, v))
		if err := LogProbEntropyBackward(dl, LogProbGrad{
			Logits: logits, Targets: tg, LogProbs: lp, Entropy: ent, DLogProbs: lp, DEntropy: ent,
			Temperature: 0.9,
		}); err != nil {
			t.Fatal(err)
		}
		a, _ := lp.Float32s()
		b, _ := ent.Float32s()
		c, _ := dl.Float32s()
		return a, b, c
	}
	a1, b1, c1 := run(1)
	for _, p := range []int{2, 3, 8} {
		a, b, c := run(p)
		for _, pair := range [][2][]float32{{a1, a}, {b1, b}, {c1, c}} {
			for i := range pair[0] {
				if math.Float32bits(pair[0][i]) != math.Float32bits(pair[1][i]) {
					t.Fatalf("GOMAXPROCS=%d: element %d differs: %v vs %v", p, i, pair[0][i], pair[1][i])
				}
			}
		}
	}
}

// BenchmarkLogProbKernels times the block kernels on L1-resident data, one core: the compute
// ceiling of each implementation (elements per ns ≈ GB/s / 4 for float32).
func BenchmarkLogProbKernels(b *testing.B) {
	x := randLogits(rand.New(rand.NewPCG(1, 1)), simdBlock, 3)
	x16 := make([]BF16, len(x))
	for i, v := range x {
		x16[i] = BF16FromFloat32(v)
	}
	out := make([]float32, len(x))
	for _, im := range lpImpls.Impls() {
		k := im.Kernels
		for _, bf := range []bool{false, true} {
			rows := logitRows{v: len(x), f32: x}
			es := 4
			if bf {
				rows, es = logitRows{v: len(x), b16: x16}, 2
			}
			var scratch [vocabBlock]float32
			dt := map[bool]string{false: "float32", true: "bfloat16"}[bf]
			b.Run(fmt.Sprintf("impl=%s/op=max/dtype=%s", im.Name, dt), func(b *testing.B) {
				b.SetBytes(int64(len(x) * es))
				for b.Loop() {
					if k != nil {
						k.blockMax(rows, 0, 0, len(x))
					} else {
						for lo := 0; lo < len(x); lo += vocabBlock {
							if bf {
								widenMax(scratch[:], x16[lo:lo+vocabBlock])
							} else {
								blockMax(x[lo : lo+vocabBlock])
							}
						}
					}
				}
			})
			b.Run(fmt.Sprintf("impl=%s/op=fold/dtype=%s", im.Name, dt), func(b *testing.B) {
				b.SetBytes(int64(len(x) * es))
				for b.Loop() {
					if k != nil {
						k.fold(rows, 0, 0, len(x), len(x), 10, 1, false)
					} else {
						var acc [4]float32
						for lo := 0; lo < len(x); lo += vocabBlock {
							foldBlock(&acc, rows.block(0, lo, lo+vocabBlock, scratch[:]), 10)
						}
					}
				}
			})
			if k != nil && !bf {
				b.Run(fmt.Sprintf("impl=%s/op=backward/dtype=%s", im.Name, dt), func(b *testing.B) {
					b.SetBytes(int64(len(x) * 8))
					for b.Loop() {
						k.backwardRow(out, nil, rows, 0, 3, -5, 0.5, 0.5, 3, 1, false)
					}
				})
			}
		}
	}
}

// TestLogProbSIMDVsGo compares every SIMD implementation with the pure-Go one on the full ops
// (forward and backward, float32 and bfloat16, temperature 1 and 0.8) and logs the largest
// differences: they are rounding-level, not bit-identical (lane count, block size, FMA).
func TestLogProbSIMDVsGo(t *testing.T) {
	impls := simdOnly(t)
	r := rand.New(rand.NewPCG(5, 5))
	n, v := 6, 2*simdBlock+1000
	if testing.Short() {
		v = simdBlock + 37
	}
	x := randLogits(r, n*v, 4)
	ys := make([]int32, n)
	for i := range ys {
		ys[i] = int32(r.IntN(v))
	}
	tg, _ := FromInt32(ys, n)
	run := func(impl string, dt DType, temp float32) (lp, ent, dl []float32) {
		defer lpImpls.Use(impl)()
		var logits *Tensor
		if dt == Float32 {
			logits, _ = FromFloat32(x, n, v)
		} else {
			b := make([]BF16, len(x))
			for i, f := range x {
				b[i] = BF16FromFloat32(f)
			}
			logits, _ = FromBF16(b, n, v)
		}
		l, e := Must(New(CPU(), Float32, n)), Must(New(CPU(), Float32, n))
		if err := LogProbEntropy(l, e, logits, tg, temp); err != nil {
			t.Fatal(err)
		}
		d := Must(New(CPU(), Float32, n, v))
		if err := LogProbEntropyBackward(d, LogProbGrad{
			Logits: logits, Targets: tg, LogProbs: l, Entropy: e, DLogProbs: l, DEntropy: e,
			Temperature: temp,
		}); err != nil {
			t.Fatal(err)
		}
		lp, _ = l.Float32s()
		ent, _ = e.Float32s()
		dl, _ = d.Float32s()
		return lp, ent, dl
	}
	for _, im := range impls {
		for _, dt := range []DType{Float32, BFloat16} {
			for _, temp := range []float32{1, 0.8} {
				lp0, ent0, dl0 := run(dispatch.GoName, dt, temp)
				lp1, ent1, dl1 := run(im.Name, dt, temp)
				worst := func(a, b []float32, floor float64) float64 {
					w := 0.0
					for j := range a {
						d := math.Abs(float64(a[j])-float64(b[j])) / max(math.Abs(float64(a[j])), floor)
						w = max(w, d)
					}
					return w
				}
				wl, we, wd := worst(lp0, lp1, 1), worst(ent0, ent1, 1), worst(dl0, dl1, 1e-3)
				t.Logf("%s %v T=%v: max rel diff vs go: logp %.2g entropy %.2g dlogits %.2g", im.Name, dt, temp, wl, we, wd)
				if wl > 1e-5 || we > 1e-5 || wd > 1e-4 {
					t.Errorf("%s %v T=%v: SIMD and Go differ beyond rounding", im.Name, dt, temp)
				}
			}
		}
	}
}

// TestLogProbBackwardNT: the non-temporal-store kernels (used for large float32 dlogits) write
// the same bits as the ordinary ones.
func TestLogProbBackwardNT(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, im := range simdOnly(t) {
		k := im.Kernels
		for _, v := range []int{k.lanes, 5*k.lanes + 3, 3000} {
			for _, bf := range []bool{false, true} {
				x := randLogits(r, v, 3)
				rows := logitRows{v: v, f32: x}
				if bf {
					rows = logitRows{v: v, b16: make([]BF16, v)}
					for i, f := range x {
						rows.b16[i] = BF16FromFloat32(f)
					}
				}
				buf := make([]float32, v+64)
				off := 0
				for uintptr(unsafe.Pointer(&buf[off]))%64 != 0 {
					off++
				}
				nt, plain := buf[off:off+v], make([]float32, v)
				for _, temp := range []float32{1, 0.7} {
					k.backwardRow(nt, nil, rows, 0, v/2, -4, 0.3, -0.2, 2.5, temp, true)
					k.backwardRow(plain, nil, rows, 0, v/2, -4, 0.3, -0.2, 2.5, temp, false)
					for j := range nt {
						if math.Float32bits(nt[j]) != math.Float32bits(plain[j]) {
							t.Fatalf("%s v=%d bf16=%v T=%v: element %d: nt %v, plain %v", im.Name, v, bf, temp, j, nt[j], plain[j])
						}
					}
				}
			}
		}
	}
}
