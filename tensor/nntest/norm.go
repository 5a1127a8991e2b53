package nntest

import (
	"fmt"
	"math"
	"testing"

	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/tensor"
)

// Norm checks RMSNorm and LayerNorm and their backwards (weight and bias gradients
// accumulated) against the float64 reference, then with bfloat16 activations (normBF16).
func Norm(t *testing.T, b tensor.Backend) {
	e := newEnv(t, b, 22)
	const rows, d, eps = 3 * 5, 200, 1e-6
	xv, wv, bv, dyv := e.randn(rows*d, 2, false), e.randn(d, 1, false), e.randn(d, 1, false), e.randn(rows*d, 1, false)
	for i := range xv {
		xv[i] += 1.5 // LayerNorm must remove a mean
	}
	dw0, db0 := e.randn(d, 1, false), e.randn(d, 1, false)
	got := twice(t, func() [][]float32 {
		x, w, bb, dy := e.f32(xv, 3, 5, d), e.f32(wv, d), e.f32(bv, d), e.f32(dyv, 3, 5, d)
		y, ly := e.zeros(3, 5, d), e.zeros(3, 5, d)
		e.ok(tensor.RMSNorm(y, x, w, eps))
		e.ok(tensor.LayerNorm(ly, x, w, bb, eps))
		in := tensor.NormGrad{X: x, Weight: w, DY: dy, Eps: eps, Accumulate: true}
		dx, dw := e.zeros(3, 5, d), e.f32(append([]float32(nil), dw0...), d)
		e.ok(tensor.RMSNormBackward(dx, dw, in))
		ldx, ldw, ldb := e.zeros(3, 5, d), e.f32(append([]float32(nil), dw0...), d), e.f32(append([]float32(nil), db0...), d)
		e.ok(tensor.LayerNormBackward(ldx, ldw, ldb, in))
		return [][]float32{e.host(y), e.host(dx), e.host(dw), e.host(ly), e.host(ldx), e.host(ldw), e.host(ldb)}
	})
	x, w, bb, dy := f64(xv), f64(wv), f64(bv), f64(dyv)
	y, dx, dw := make([]float64, rows*d), make([]float64, rows*d), f64(dw0)
	nnref.RMSNorm(rows, d, x, w, eps, y)
	nnref.RMSNormBackward(rows, d, x, w, dy, eps, dx, dw, true)
	ly, ldx, ldw, ldb := make([]float64, rows*d), make([]float64, rows*d), f64(dw0), f64(db0)
	nnref.LayerNorm(rows, d, x, w, bb, eps, ly)
	nnref.LayerNormBackward(rows, d, x, w, dy, eps, ldx, ldw, ldb, true)
	for i, c := range []struct {
		name string
		want []float64
	}{{"rms y", y}, {"rms dx", dx}, {"rms dw", dw}, {"ln y", ly}, {"ln dx", ldx}, {"ln dw", ldw}, {"ln db", ldb}} {
		near(t, c.name, got[i], c.want, rtol, 1e-4) // the weight gradients sum 15 rows of O(1) terms
	}
	normSaved(t, e, got, xv, wv, bv, dyv, dw0, db0)
	normBF16(t, b)
}

// normSaved checks that LayerNormStats and RMSNormStats give Norm's outputs, and the backwards
// from their saved statistics Norm's gradients (want: y, dx, dw of RMSNorm, then of LayerNorm
// with db), bit for bit.
func normSaved(t *testing.T, e env, want [][]float32, xv, wv, bv, dyv, dw0, db0 []float32) {
	const d, eps = 200, 1e-6
	x, w, bb, dy := e.f32(xv, 3, 5, d), e.f32(wv, d), e.f32(bv, d), e.f32(dyv, 3, 5, d)
	y, ly, mean, rstd, r := e.zeros(3, 5, d), e.zeros(3, 5, d), e.zeros(15), e.zeros(15), e.zeros(15)
	e.ok(tensor.RMSNormStats(y, r, x, w, eps))
	e.ok(tensor.LayerNormStats(ly, mean, rstd, x, w, bb, eps))
	dx, dw := e.zeros(3, 5, d), e.f32(append([]float32(nil), dw0...), d)
	e.ok(tensor.RMSNormBackward(dx, dw, tensor.NormGrad{X: x, Weight: w, DY: dy, Eps: eps, Accumulate: true, Rstd: r}))
	ldx, ldw, ldb := e.zeros(3, 5, d), e.f32(append([]float32(nil), dw0...), d), e.f32(append([]float32(nil), db0...), d)
	e.ok(tensor.LayerNormBackward(ldx, ldw, ldb, tensor.NormGrad{X: x, Weight: w, DY: dy, Eps: eps, Accumulate: true, Mean: mean, Rstd: rstd}))
	for i, got := range [][]float32{e.host(y), e.host(dx), e.host(dw), e.host(ly), e.host(ldx), e.host(ldw), e.host(ldb)} {
		for j, v := range got {
			if math.Float32bits(v) != math.Float32bits(want[i][j]) {
				t.Fatalf("saved statistics: output %d [%d] = %v, want %v (recomputed)", i, j, v, want[i][j])
			}
		}
	}
	// The statistics themselves are the reference's (float64 sums, so any order is within rtol).
	const rows = 15
	x64, w64, dy64, dx64 := f64(xv), f64(wv), f64(dyv), make([]float64, rows*d)
	wantR, wantMean, wantRstd := make([]float64, rows), make([]float64, rows), make([]float64, rows)
	nnref.RMSNormDX(rows, d, x64, w64, dy64, eps, dx64, wantR)
	nnref.LayerNormDX(rows, d, x64, w64, dy64, eps, dx64, wantMean, wantRstd)
	near(t, "RMSNormStats rstd", e.host(r), wantR, rtol, 0)
	near(t, "LayerNormStats mean", e.host(mean), wantMean, rtol, 1e-6)
	near(t, "LayerNormStats rstd", e.host(rstd), wantRstd, rtol, 0)
}

// normBF16 checks the norms with bfloat16 activations and a float32 or bfloat16 weight and
// bias (checkBF16), the weight and bias gradients float32 and accumulated.
func normBF16(t *testing.T, b tensor.Backend) {
	for _, w16 := range []bool{false, true} {
		t.Run(fmt.Sprint("bf16/weight bf16=", w16), func(t *testing.T) {
			e := newEnv(t, b, 28)
			const rows, d, eps = 3 * 5, 200, 1e-6
			xv, wv, bv, dyv := e.randn(rows*d, 2, false), e.randn(d, 1, w16), e.randn(d, 1, w16), e.randn(rows*d, 1, true)
			for i := range xv {
				xv[i] += 1.5 // LayerNorm must remove a mean
			}
			bf16s(xv)
			dw0, db0 := e.randn(d, 1, false), e.randn(d, 1, false)
			run := func(bf16 bool) [][]float32 {
				x, dy := e.put(xv, bf16, 3, 5, d), e.put(dyv, bf16, 3, 5, d)
				w, bb := e.put(wv, bf16 && w16, d), e.put(bv, bf16 && w16, d)
				dt := dtype(bf16)
				y, ly, dx, ldx := e.zerosOf(dt, 3, 5, d), e.zerosOf(dt, 3, 5, d), e.zerosOf(dt, 3, 5, d), e.zerosOf(dt, 3, 5, d)
				e.ok(tensor.RMSNorm(y, x, w, eps))
				e.ok(tensor.LayerNorm(ly, x, w, bb, eps))
				in := tensor.NormGrad{X: x, Weight: w, DY: dy, Eps: eps, Accumulate: true}
				dw := e.f32(append([]float32(nil), dw0...), d)
				e.ok(tensor.RMSNormBackward(dx, dw, in))
				ldw, ldb := e.f32(append([]float32(nil), dw0...), d), e.f32(append([]float32(nil), db0...), d)
				e.ok(tensor.LayerNormBackward(ldx, ldw, ldb, in))
				return [][]float32{e.values(y), e.values(dx), e.values(dw), e.values(ly), e.values(ldx), e.values(ldw), e.values(ldb)}
			}
			got := twice(t, func() [][]float32 { return run(true) })
			f32 := run(false)
			y, dx, dw := make([]float32, rows*d), make([]float32, rows*d), append([]float32(nil), dw0...)
			nnref.RMSNorm(rows, d, xv, wv, eps, y)
			nnref.RMSNormBackward(rows, d, xv, wv, dyv, eps, dx, dw, true)
			ly, ldx, ldw, ldb := make([]float32, rows*d), make([]float32, rows*d), append([]float32(nil), dw0...), append([]float32(nil), db0...)
			nnref.LayerNorm(rows, d, xv, wv, bv, eps, ly)
			nnref.LayerNormBackward(rows, d, xv, wv, dyv, eps, ldx, ldw, ldb, true)
			tl := tol{rtol, 1e-4} // Norm's float32 tolerance
			checkBF16(t, []string{"rms y", "rms dx", "rms dw", "ln y", "ln dx", "ln dw", "ln db"},
				[]bool{true, true, false, true, true, false, false}, got, f32,
				[][]float32{y, dx, dw, ly, ldx, ldw, ldb}, []tol{tl, tl, tl, tl, tl, tl, tl})
		})
	}
}
