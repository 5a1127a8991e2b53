package nnref

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/internal/gradcheck"
)

func randn(r *rand.Rand, n int, scale float64) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = r.NormFloat64() * scale
	}
	return x
}

// dotLoss is Σ r ⊙ y: its gradient with respect to y is r, which the backward kernels take as dy.
func dotLoss(r, y []float64) float64 {
	var s float64
	for i := range r {
		s += r[i] * y[i]
	}
	return s
}

// fd checks analytic against the central differences of loss with respect to x, in float64,
// with step 1e-6.
func fd(t *testing.T, name string, x []float64, loss func() float64, analytic []float64) {
	t.Helper()
	fdStep(t, name, x, loss, analytic, 1e-6)
}

// fdStep is fd with step h: a loss summed over many terms (|loss| ~ 100) needs a larger step
// for its rounding error, ~1e-16·|loss|/h, to stay below the tolerance.
func fdStep(t *testing.T, name string, x []float64, loss func() float64, analytic []float64, h float64) {
	t.Helper()
	gradcheck.Check(t, name, func([]float64) float64 { return loss() }, x, analytic, h, 1e-6, 1e-8)
}

func near(t *testing.T, name string, got, want []float64, tol float64) {
	t.Helper()
	for i := range want {
		if math.Abs(got[i]-want[i]) > tol*(1+math.Abs(want[i])) || math.IsNaN(got[i]) != math.IsNaN(want[i]) {
			t.Fatalf("%s[%d] = %.12g, want %.12g", name, i, got[i], want[i])
		}
	}
}
