package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/mtrl-go/mtrl/internal/asmcheck"
	"github.com/mtrl-go/mtrl/internal/cputime"
	"github.com/mtrl-go/mtrl/internal/nnref"
)

// TestLayerNormAsmUpToDate fails when layernorm_amd64.s or its stubs differ from what
// internal/asmgen generates: edit the generator, then run go generate ./tensor.
func TestLayerNormAsmUpToDate(t *testing.T) { asmcheck.UpToDate(t, "layernorm", "tensor") }

// TestLayerNormMatchesReference: every implementation of the host LayerNorm (the AVX-512 and
// AVX2 kernels and the Go loops) equals nnref in float32 bit for bit, forward and backward
// (dx, and dw and db accumulated), and with bfloat16 activations nnref on the widened values
// rounded once; row counts around the 8-row groups, widths around the lanes (7: no vector;
// 50: a tail; 300: a last block of columns not a multiple of the lanes in the backward's
// column pass; 1280: Qwen2-VL's vision width), rows with an offset mean far above their spread
// (where a one-pass variance or a float32 mean would give other bits), and special values
// (zeros, a constant row: var = 0, r = 1/sqrt(eps); huge values whose squares overflow; NaN);
// then LayerNormStats and the backward from its saved statistics, which give the same bits.
func TestLayerNormMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	randv := func(n int, off float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = BF16FromFloat32(float32(off + r.NormFloat64())).Float32() // bfloat16-representable
		}
		return v
	}
	mk := func(v []float32, bf bool, s ...int) *Tensor {
		if bf {
			b := make([]BF16, len(v))
			for i, f := range v {
				b[i] = BF16FromFloat32(f)
			}
			return Must(FromBF16(b, s...))
		}
		return Must(FromFloat32(append([]float32(nil), v...), s...))
	}
	same := func(what string, got *Tensor, want []float32) {
		t.Helper()
		for i, w := range want {
			var g float32
			if got.DType() == BFloat16 {
				b, _ := got.BF16s()
				g, w = b[i].Float32(), BF16FromFloat32(w).Float32()
			} else {
				f, _ := got.Float32s()
				g = f[i]
			}
			if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
				t.Fatalf("%s: [%d] = %v, want %v", what, i, g, w)
			}
		}
	}
	if len(lnImpls.Impls()) < 2 {
		t.Log("no vector LayerNorm kernels in this build or on this CPU: the Go loops only")
	}
	for _, im := range lnImpls.Impls() {
		restore := lnImpls.Use(im.Name)
		for _, bf := range []bool{false, true} {
			for _, d := range []int{7, 16, 50, 300, 1280} {
				for _, rows := range []int{1, 7, 8, 9, 13, 17} {
					x, w, b := randv(rows*d, 0), randv(d, 1), randv(d, 0)
					copy(x[d:], randv(d, 300)) // row 1: mean 300, spread 1
					if rows == 13 {
						x[2*d], x[3*d+1] = 0, float32(math.NaN())
						for j := range d {
							x[4*d+j] = 0.75                                                            // constant row: r = 1/sqrt(eps)
							x[5*d+j] = BF16FromFloat32(float32(3e38 * (1 - 2*float64(j%2)))).Float32() // squares overflow: r = 0
						}
					}
					name := fmt.Sprintf("%s bf16 %v d %d rows %d", im.Name, bf, d, rows)
					const eps = 1e-6
					want := make([]float32, len(x))
					nnref.LayerNorm(rows, d, x, w, b, eps, want)
					y := mk(make([]float32, len(x)), bf, rows, d)
					if err := LayerNorm(y, mk(x, bf, rows, d), Must(FromFloat32(w, d)), Must(FromFloat32(b, d)), eps); err != nil {
						t.Fatal(err)
					}
					same(name+" y", y, want)

					dy, g0 := randv(rows*d, 0), randv(d, 0)
					wdx, wdw, wdb := make([]float32, len(x)), append([]float32(nil), g0...), append([]float32(nil), g0...)
					nnref.LayerNormBackward(rows, d, x, w, dy, eps, wdx, wdw, wdb, true)
					dx := mk(make([]float32, len(x)), bf, rows, d)
					dw, db := Must(FromFloat32(append([]float32(nil), g0...), d)), Must(FromFloat32(append([]float32(nil), g0...), d))
					in := NormGrad{X: mk(x, bf, rows, d), Weight: Must(FromFloat32(w, d)), DY: mk(dy, bf, rows, d), Eps: eps, Accumulate: true}
					if err := LayerNormBackward(dx, dw, db, in); err != nil {
						t.Fatal(err)
					}
					same(name+" dx", dx, wdx)
					same(name+" dw", dw, wdw)
					same(name+" db", db, wdb)

					// The same from the statistics the forward saved.
					mean, rstd := Must(FromFloat32(make([]float32, rows), rows)), Must(FromFloat32(make([]float32, rows), rows))
					y = mk(make([]float32, len(x)), bf, rows, d)
					if err := LayerNormStats(y, mean, rstd, in.X, in.Weight, Must(FromFloat32(b, d)), eps); err != nil {
						t.Fatal(err)
					}
					same(name+" y (stats)", y, want)
					in.Mean, in.Rstd = mean, rstd
					dx, dw, db = mk(make([]float32, len(x)), bf, rows, d), Must(FromFloat32(append([]float32(nil), g0...), d)), Must(FromFloat32(append([]float32(nil), g0...), d))
					if err := LayerNormBackward(dx, dw, db, in); err != nil {
						t.Fatal(err)
					}
					same(name+" dx (stats)", dx, wdx)
					same(name+" dw (stats)", dw, wdw)
					same(name+" db (stats)", db, wdb)
				}
			}
		}
		restore()
	}
}

// TestLayerNormSum8Order: the 8-row sums (sum8, devSq8, lnDot8) equal the reference's chains
// (each row summed in column order) in float64 bit for bit, on values of widely spread
// exponents where another order of the same terms gives other bits (which the float32
// rounding of mean and r in the test above seldom shows), and devSq8 also on values of one
// scale, where a fused multiply-add of the inexact squares would give other bits.
func TestLayerNormSum8Order(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, im := range lnImpls.SIMD() {
		k := im.Kernels
		for _, d := range []int{8, 16, 64, 1280} {
			x := make([]float32, 8*d)
			for i := range x {
				x[i] = BF16FromFloat32(float32(math.Ldexp(r.NormFloat64(), r.IntN(40)-20))).Float32()
			}
			b := make([]BF16, len(x))
			for i, v := range x {
				b[i] = BF16FromFloat32(v)
			}
			mu := [8]float64{0, 1e-3, -2, 1e5, 0.1, 7, -1e-4, 3}
			mu32, rs := [8]float32{1, 0.5, -3, 1e-3, 7, 0.1, 2, -1e5}, [8]float32{1, 0.5, 3, 1e-3, 7, 0.1, 2, 1e5}
			var s, s16, ss, ss16, sg, sg16, sgx, sgx16 [8]float64
			k.sum8F32(x, d, &s)
			k.sum8BF16(bf16Bits(b), d, &s16)
			k.devSq8F32(x, d, &mu, &ss)
			k.devSq8BF16(bf16Bits(b), d, &mu, &ss16)
			w := x[:d]
			k.dot8F32(x, x[len(x)-8*d:], w, &mu32, &rs, d, &sg, &sgx) // dy = x
			k.dot8BF16(bf16Bits(b), bf16Bits(b[len(b)-8*d:]), w, &mu32, &rs, d, &sg16, &sgx16)
			for row := range 8 {
				var ws, wss, wsg, wsgx float64
				for j, v := range x[row*d : (row+1)*d] {
					ws += float64(v)
					dv := float64(v) - mu[row]
					wss += dv * dv
					g := v * w[j]
					wsg += float64(g)
					wsgx += float64(g) * float64((v-mu32[row])*rs[row])
				}
				for _, c := range []struct {
					what      string
					got, got2 float64
					want      float64
				}{{"sum8", s[row], s16[row], ws}, {"devSq8", ss[row], ss16[row], wss}, {"sg", sg[row], sg16[row], wsg}, {"sgx", sgx[row], sgx16[row], wsgx}} {
					if math.Float64bits(c.got) != math.Float64bits(c.want) || math.Float64bits(c.got2) != math.Float64bits(c.want) {
						t.Fatalf("%s d %d row %d %s: %v, %v, want %v", im.Name, d, row, c.what, c.got, c.got2, c.want)
					}
				}
			}
		}
		// devSq8 on short rows of one scale, many times: each square's rounding is then often
		// seen in the sum (a fused multiply-add would change bits here).
		mu := [8]float64{0.1, 1.0 / 3, -0.7, math.Pi, 1e-3, -0.2, math.E, 0.9}
		x := make([]float32, 8*8)
		for trial := range 200 {
			for i := range x {
				x[i] = BF16FromFloat32(float32(r.NormFloat64())).Float32()
			}
			var ss [8]float64
			k.devSq8F32(x, 8, &mu, &ss)
			for row := range 8 {
				var want float64
				for _, v := range x[row*8 : (row+1)*8] {
					dv := float64(v) - mu[row]
					want += dv * dv
				}
				if math.Float64bits(ss[row]) != math.Float64bits(want) {
					t.Fatalf("%s trial %d row %d devSq8: %v, want %v", im.Name, trial, row, ss[row], want)
				}
			}
		}
	}
}

// BenchmarkLayerNormImpls times LayerNorm and its backward (dx, dw, db; recomputing the rows'
// statistics, and from the ones LayerNormStats saved) on every implementation
// of this CPU (the Go loops: nnref on blocks of widened rows; AVX2; AVX-512) at a Qwen2-VL
// vision-tower shape (1024 patches of 1280), float32 and bfloat16. b.SetBytes counts the
// activations read and written (x, y; x, dy, dx), so MB/s is wall-clock bandwidth; cpu-ns/elem
// is process CPU time per element. Run with -count N: the sub-benchmarks interleave per count.
func BenchmarkLayerNormImpls(b *testing.B) {
	rows, d, eps := 1024, 1280, 1e-6
	if s := os.Getenv("LN_ROWS"); s != "" { // another row count, e.g. one whose rows stay in the caches
		rows, _ = strconv.Atoi(s)
	}
	mk := func(dt DType, off float32, s ...int) *Tensor {
		n := 1
		for _, v := range s {
			n *= v
		}
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = float32(i%97)/50 - 0.9 + off
		}
		if dt == Float32 {
			return Must(FromFloat32(xs, s...))
		}
		y := make([]BF16, n)
		for i, f := range xs {
			y[i] = BF16FromFloat32(f)
		}
		return Must(FromBF16(y, s...))
	}
	for _, pass := range []string{"forward", "backward", "backward-saved"} {
		for _, dt := range []DType{Float32, BFloat16} {
			x, w, bb := mk(dt, 0.3, rows, d), mk(Float32, 1, d), mk(Float32, 0, d)
			y, dy := mk(dt, 0, rows, d), mk(dt, 0, rows, d)
			dw, db := mk(Float32, 0, d), mk(Float32, 0, d)
			op, tensors := func() error { return LayerNorm(y, x, w, bb, eps) }, 2
			if pass != "forward" {
				in := NormGrad{X: x, Weight: w, DY: dy, Eps: eps}
				if pass == "backward-saved" {
					in.Mean, in.Rstd = mk(Float32, 0, rows), mk(Float32, 0, rows)
					if err := LayerNormStats(y, in.Mean, in.Rstd, x, w, bb, eps); err != nil {
						b.Fatal(err)
					}
				}
				op, tensors = func() error { return LayerNormBackward(y, dw, db, in) }, 3
			}
			for _, im := range lnImpls.Impls() {
				b.Run(pass+"/"+dt.String()+"/"+im.Name, func(b *testing.B) {
					defer lnImpls.Use(im.Name)()
					b.SetBytes(int64(tensors * rows * d * dt.Size()))
					c0, _ := cputime.Process()
					for b.Loop() {
						if err := op(); err != nil {
							b.Fatal(err)
						}
					}
					c1, _ := cputime.Process()
					b.ReportMetric(float64((c1-c0).Nanoseconds())/float64(b.N*rows*d), "cpu-ns/elem")
				})
			}
		}
	}
}
