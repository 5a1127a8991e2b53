package nntest

import (
	"fmt"
	"math"
	"testing"

	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/tensor"
)

// Activation checks every Activation and SwiGLU, forward and backward, against the float64
// reference, then with bfloat16 activations (activationBF16).
func Activation(t *testing.T, b tensor.Backend) {
	e := newEnv(t, b, 26)
	const n = 3000
	xv, uv, dyv := e.randn(n, 3, false), e.randn(n, 1, false), e.randn(n, 1, false)
	x, u, dy := f64(xv), f64(uv), f64(dyv)
	for a, ra := range map[tensor.Activation]nnref.Act{tensor.SiLU: nnref.SiLU, tensor.GELU: nnref.GELU,
		tensor.GELUTanh: nnref.GELUTanh, tensor.QuickGELU: nnref.QuickGELU} {
		t.Run(a.String(), func(t *testing.T) {
			got := twice(t, func() [][]float32 {
				y, dx := e.zeros(n), e.zeros(n)
				xt := e.f32(xv, n)
				e.ok(tensor.Activate(y, xt, a))
				e.ok(tensor.ActivateBackward(dx, tensor.ActivationGrad{X: xt, DY: e.f32(dyv, n), Activation: a}))
				return [][]float32{e.host(y), e.host(dx)}
			})
			y, dx := make([]float64, n), make([]float64, n)
			nnref.Activate(ra, x, y)
			nnref.ActivateBackward(ra, x, dy, dx)
			near(t, "y", got[0], y, rtol, atol)
			near(t, "dx", got[1], dx, rtol, atol)
		})
	}
	t.Run("swiglu", func(t *testing.T) {
		got := twice(t, func() [][]float32 {
			g, up := e.f32(xv, 30, 100), e.f32(uv, 30, 100)
			y, dg, du := e.zeros(30, 100), e.zeros(30, 100), e.zeros(30, 100)
			e.ok(tensor.SwiGLU(y, g, up))
			e.ok(tensor.SwiGLUBackward(dg, du, tensor.SwiGLUGrad{Gate: g, Up: up, DY: e.f32(dyv, 30, 100)}))
			return [][]float32{e.host(y), e.host(dg), e.host(du)}
		})
		y, dg, du := make([]float64, n), make([]float64, n), make([]float64, n)
		nnref.SwiGLU(x, u, y)
		nnref.SwiGLUBackward(x, u, dy, dg, du)
		near(t, "y", got[0], y, rtol, atol)
		near(t, "dgate", got[1], dg, rtol, atol)
		near(t, "dup", got[2], du, rtol, atol)
	})
	t.Run("arith", func(t *testing.T) {
		// Axpby at its special cases (beta 0 never reads y, which holds NaN there; alpha 0 never
		// reads x) and a general one, and Mul.
		nan := make([]float32, n)
		for i := range nan {
			nan[i] = float32(math.NaN())
		}
		for _, c := range []struct{ alpha, beta float32 }{{1, 1}, {0.375, 1}, {-1.5, 0}, {0, 0}, {0, 0.5}, {0.75, -2}} {
			yv := yvOf(uv, nan, c.beta)
			xv := yvOf(xv, nan, c.alpha)
			got := twice(t, func() [][]float32 {
				y := e.f32(yv, n)
				e.ok(tensor.Axpby(y, e.f32(xv, n), c.alpha, c.beta))
				return [][]float32{e.host(y)}
			})
			want := make([]float64, n)
			for i := range want {
				if c.alpha != 0 {
					want[i] = float64(c.alpha) * float64(xv[i])
				}
				if c.beta != 0 {
					want[i] += float64(c.beta) * float64(yv[i])
				}
			}
			near(t, fmt.Sprintf("axpby(%v, %v)", c.alpha, c.beta), got[0], want, rtol, atol)
		}
		got := twice(t, func() [][]float32 {
			y := e.zeros(n)
			e.ok(tensor.Mul(y, e.f32(xv, n), e.f32(uv, n)))
			return [][]float32{e.host(y)}
		})
		want := make([]float64, n)
		for i := range want {
			want[i] = x[i] * u[i]
		}
		near(t, "mul", got[0], want, rtol, atol)
	})
	activationBF16(t, b)
}

// activationBF16 checks every Activation and SwiGLU with bfloat16 activations (checkBF16), the
// backwards in place (dx = DY).
func activationBF16(t *testing.T, b tensor.Backend) {
	e := newEnv(t, b, 29)
	const n = 3000
	xv, uv, dyv := e.randn(n, 3, true), e.randn(n, 1, true), e.randn(n, 1, true)
	tl := []tol{{rtol, atol}, {rtol, atol}, {rtol, atol}}
	for a, ra := range map[tensor.Activation]nnref.Act{tensor.SiLU: nnref.SiLU, tensor.GELU: nnref.GELU,
		tensor.GELUTanh: nnref.GELUTanh, tensor.QuickGELU: nnref.QuickGELU} {
		t.Run("bf16/"+a.String(), func(t *testing.T) {
			e := env{t: t, b: e.b, r: e.r} // failures end this subtest
			run := func(bf16 bool) [][]float32 {
				y, x, dy := e.zerosOf(dtype(bf16), n), e.put(xv, bf16, n), e.put(dyv, bf16, n)
				e.ok(tensor.Activate(y, x, a))
				e.ok(tensor.ActivateBackward(dy, tensor.ActivationGrad{X: x, DY: dy, Activation: a}))
				return [][]float32{e.values(y), e.values(dy)}
			}
			y, dx := make([]float32, n), make([]float32, n)
			nnref.Activate(ra, xv, y)
			nnref.ActivateBackward(ra, xv, dyv, dx)
			checkBF16(t, []string{"y", "dx"}, []bool{true, true}, twice(t, func() [][]float32 { return run(true) }), run(false),
				[][]float32{y, dx}, tl)
		})
	}
	t.Run("bf16/swiglu", func(t *testing.T) {
		e := env{t: t, b: e.b, r: e.r} // failures end this subtest
		run := func(bf16 bool) [][]float32 {
			dt := dtype(bf16)
			g, up := e.put(xv, bf16, 30, 100), e.put(uv, bf16, 30, 100)
			y, dg, du := e.zerosOf(dt, 30, 100), e.zerosOf(dt, 30, 100), e.zerosOf(dt, 30, 100)
			e.ok(tensor.SwiGLU(y, g, up))
			e.ok(tensor.SwiGLUBackward(dg, du, tensor.SwiGLUGrad{Gate: g, Up: up, DY: e.put(dyv, bf16, 30, 100)}))
			return [][]float32{e.values(y), e.values(dg), e.values(du)}
		}
		y, dg, du := make([]float32, n), make([]float32, n), make([]float32, n)
		nnref.SwiGLU(xv, uv, y)
		nnref.SwiGLUBackward(xv, uv, dyv, dg, du)
		checkBF16(t, []string{"y", "dgate", "dup"}, []bool{true, true, true}, twice(t, func() [][]float32 { return run(true) }), run(false),
			[][]float32{y, dg, du}, tl)
	})
}

// yvOf is v, or nan when the coefficient that would read it is 0 (an operand Axpby must not
// read).
func yvOf(v, nan []float32, coef float32) []float32 {
	if coef == 0 {
		return nan
	}
	return v
}
