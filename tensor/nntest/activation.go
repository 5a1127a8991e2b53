package nntest

import (
	"testing"

	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/tensor"
)

// Activation checks every Activation and SwiGLU, forward and backward, against the float64
// reference.
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
}
