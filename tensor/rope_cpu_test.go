package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/internal/asmcheck"
	"github.com/mtrl-go/mtrl/internal/nnref"
)

// TestRowNormAsmUpToDate fails when rownorm_amd64.s or its stubs differ from what
// internal/asmgen generates: edit the generator, then run go generate ./tensor.
func TestRowNormAsmUpToDate(t *testing.T) { asmcheck.UpToDate(t, "rownorm", "tensor") }

// TestRowNormMatchesReference: every implementation of the host RMSNorm and RoPE (the vector
// row kernels and the Go loops) equals nnref in float32 bit for bit, and with bfloat16
// activations nnref on the widened values rounded once: RoPE and its inverse with Qwen2-VL's
// sections and positions up to 10⁶ (math.Sincos against math.Cos and math.Sin over many
// angles), head dimensions whose half is and is not a multiple of the lanes, in place;
// RMSNorm, and the backwards of RMSNorm and LayerNorm (accumulating into dw and db), with row
// counts around the 8- and 4-row groups and widths around the lanes, special values (zeros, a
// row of huge values whose squares overflow to +Inf, NaN) included.
func TestRowNormMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	randv := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = BF16FromFloat32(float32(r.NormFloat64())).Float32() // bfloat16-representable
		}
		return v
	}
	asBF16 := func(v []float32) []BF16 {
		b := make([]BF16, len(v))
		for i, f := range v {
			b[i] = BF16FromFloat32(f)
		}
		return b
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
	mk := func(v []float32, bf bool, s ...int) *Tensor {
		if bf {
			return Must(FromBF16(asBF16(v), s...))
		}
		return Must(FromFloat32(append([]float32(nil), v...), s...))
	}
	for _, im := range rowImpls.Impls() {
		restore := rowImpls.Use(im.Name)
		for _, bf := range []bool{false, true} {
			const tn, h = 37, 3
			for _, d := range []int{48, 40, 64} {
				pos := make([]int32, 3*tn)
				for i := range pos {
					pos[i] = int32(r.IntN(1_000_000))
				}
				xv := randv(tn * h * d)
				for _, sections := range [][]int{nil, {d / 8, d / 8, d / 4}} {
					for _, inverse := range []bool{false, true} {
						p, rows := pos[:tn], [][]int32{pos[:tn]}
						if sections != nil {
							p, rows = pos, [][]int32{pos[:tn], pos[tn : 2*tn], pos[2*tn:]}
						}
						want := make([]float32, len(xv))
						freq := nnref.DefaultRoPEFrequencies[float32](d, 1e6)
						nnref.RoPEFrequencies(tn, h, d, xv, rows, sections, freq, inverse, want)
						x := mk(xv, bf, tn, h, d)
						ropeHost(x, x, p, sections, freq, inverse)
						same(im.Name+" rope", x, want)
					}
				}
			}
			for _, d := range []int{48, 50, 7, 300, 896} {
				for _, rows := range []int{1, 4, 7, 8, 9, 13, 33} {
					x, w := randv(rows*d), randv(d)
					if rows == 13 {
						x[0], x[d], x[2*d] = 0, float32(math.NaN()), 0
						for j := range d {
							x[3*d+j] = BF16FromFloat32(3e38).Float32() // squares overflow: r = 0
							x[4*d+j] = 0                               // a zero row: r = 1/sqrt(eps)
						}
					}
					want := make([]float32, len(x))
					nnref.RMSNorm(rows, d, x, w, 1e-6, want)
					y := mk(make([]float32, len(x)), bf, rows, d)
					rmsNormHost(y, mk(x, bf, rows, d), w, 1e-6, nil)
					same(im.Name+" rmsnorm", y, want)
					// the backwards, accumulating into dw and db
					dy, b0 := randv(rows*d), randv(d)
					for _, layer := range []bool{false, true} {
						wdx, wdw, wdb := make([]float32, len(x)), append([]float32(nil), b0...), append([]float32(nil), b0...)
						in := NormGrad{X: mk(x, bf, rows, d), Weight: Must(FromFloat32(w, d)), DY: mk(dy, bf, rows, d), Eps: 1e-6, Accumulate: true}
						dx, dw, db := mk(make([]float32, len(x)), bf, rows, d), Must(FromFloat32(append([]float32(nil), b0...), d)), Must(FromFloat32(append([]float32(nil), b0...), d))
						if layer {
							nnref.LayerNormBackward(rows, d, x, w, dy, 1e-6, wdx, wdw, wdb, true)
							if err := LayerNormBackward(dx, dw, db, in); err != nil {
								t.Fatal(err)
							}
							same(im.Name+" layernorm db", db, wdb)
						} else {
							nnref.RMSNormBackward(rows, d, x, w, dy, 1e-6, wdx, wdw, true)
							if err := RMSNormBackward(dx, dw, in); err != nil {
								t.Fatal(err)
							}
						}
						same(fmt.Sprintf("%s layer %v dx d %d rows %d", im.Name, layer, d, rows), dx, wdx)
						same(im.Name+" dw", dw, wdw)
						if !layer { // from the statistics RMSNormStats saved: the same bits
							rstd := Must(FromFloat32(make([]float32, rows), rows))
							y := mk(make([]float32, len(x)), bf, rows, d)
							if err := RMSNormStats(y, rstd, in.X, in.Weight, 1e-6); err != nil {
								t.Fatal(err)
							}
							same(im.Name+" rmsnorm (stats)", y, want)
							in.Rstd = rstd
							dx, dw = mk(make([]float32, len(x)), bf, rows, d), Must(FromFloat32(append([]float32(nil), b0...), d))
							if err := RMSNormBackward(dx, dw, in); err != nil {
								t.Fatal(err)
							}
							same(im.Name+" dx (stats)", dx, wdx)
							same(im.Name+" dw (stats)", dw, wdw)
						}
					}
				}
			}
		}
		restore()
	}
}

// TestSumSq8Order: the vector sums of squares (and RMSNorm backward's dot products) equal the reference's chain (one row summed in
// column order) in float64 bit for bit, on values of widely spread exponents, where another
// order of the same squares gives other bits (RMSNorm's tests above seldom see that through
// the float32 rounding of r).
func TestSumSq8Order(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, im := range rowImpls.Impls() {
		k := im.Kernels
		if k == nil {
			continue
		}
		for _, d := range []int{8, 16, 64, 896} {
			x := make([]float32, 8*d)
			for i := range x {
				x[i] = BF16FromFloat32(float32(math.Ldexp(r.NormFloat64(), r.IntN(40)-20))).Float32()
			}
			b := make([]BF16, len(x))
			for i, v := range x {
				b[i] = BF16FromFloat32(v)
			}
			var s32, s16, g32, g16 [8]float64
			k.sumSq8F32(x, d, &s32)
			k.sumSq8BF16(bf16Bits(b), d, &s16)
			w, rs := x[:d], [8]float32{1, 0.5, 3, 1e-3, 7, 0.1, 2, 1e5}
			k.rmsDot8F32(x, x[len(x)-8*d:], w, &rs, d, &g32) // dy = x
			k.rmsDot8BF16(bf16Bits(b), bf16Bits(b[len(b)-8*d:]), w, &rs, d, &g16)
			for row := range 8 {
				var want, wantG float64
				for j, v := range x[row*d : (row+1)*d] {
					want += float64(v) * float64(v)
					wantG += float64(v*w[j]) * float64(v*rs[row])
				}
				if math.Float64bits(s32[row]) != math.Float64bits(want) || math.Float64bits(s16[row]) != math.Float64bits(want) {
					t.Fatalf("%s d %d row %d: %v, %v, want %v", im.Name, d, row, s32[row], s16[row], want)
				}
				if math.Float64bits(g32[row]) != math.Float64bits(wantG) || math.Float64bits(g16[row]) != math.Float64bits(wantG) {
					t.Fatalf("%s d %d row %d: dot %v, %v, want %v", im.Name, d, row, g32[row], g16[row], wantG)
				}
			}
		}
	}
}
