package nntest

import (
	"fmt"
	"math"
	"testing"

	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/tensor"
)

// Linear checks PackWeight, Linear, LinearBias and LinearBackward (with accumulation into the
// weight and bias gradients) against the float64 reference, for float32 and bfloat16 inputs.
func Linear(t *testing.T, b tensor.Backend) {
	for _, bf16 := range []bool{false, true} {
		t.Run(fmt.Sprint("bf16=", bf16), func(t *testing.T) {
			e := newEnv(t, b, 21)
			const rows, n, k = 2 * 7, 48, 80
			xv, wv, bias := e.randn(rows*k, 1, bf16), e.randn(n*k, 0.3, bf16), e.randn(n, 1, false)
			dyv, dw0, db0 := e.randn(rows*n, 1, false), e.randn(n*k, 1, false), e.randn(n, 1, false)
			got := twice(t, func() [][]float32 {
				x, w := e.put(xv, bf16, 2, 7, k), e.put(wv, bf16, n, k)
				pw, err := tensor.PackWeight(w)
				e.ok(err)
				y, yb := e.zeros(2, 7, n), e.zeros(2, 7, n)
				e.ok(tensor.Linear(y, x, pw))
				e.ok(tensor.LinearBias(yb, x, pw, e.f32(bias, n)))
				dx, dw, db := e.zeros(2, 7, k), e.f32(append([]float32(nil), dw0...), n, k), e.f32(append([]float32(nil), db0...), n)
				e.ok(tensor.LinearBackward(tensor.LinearGradOut{DX: dx, DWeight: dw, DBias: db},
					tensor.LinearGrad{X: x, Weight: pw, DY: e.f32(dyv, 2, 7, n), Accumulate: true}))
				return [][]float32{e.host(y), e.host(yb), e.host(dx), e.host(dw), e.host(db)}
			})
			x64, w64, b64, dy64 := f64(xv), f64(wv), f64(bias), f64(dyv)
			y, yb := make([]float64, rows*n), make([]float64, rows*n)
			nnref.Linear(rows, n, k, x64, w64, nil, y)
			nnref.Linear(rows, n, k, x64, w64, b64, yb)
			dx, dw, db := make([]float64, rows*k), f64(dw0), f64(db0)
			nnref.LinearBackward(rows, n, k, x64, w64, dy64, dx, dw, db, true)
			for i, c := range []struct {
				name string
				want []float64
				k    int
			}{{"y", y, k}, {"y+bias", yb, k}, {"dx", dx, n}, {"dw", dw, rows}, {"dbias", db, rows}} {
				scale := 0.0
				for _, v := range c.want {
					scale = math.Max(scale, math.Abs(v))
				}
				near(t, c.name, got[i], c.want, rtol, float64(c.k)*0x1p-22*(1+scale))
			}
		})
	}
}
