// Package gradcheck compares analytic gradients with central finite differences in float64.
package gradcheck

import (
	"math"
	"testing"
)

// Central returns the central-difference gradient of f at x with step h, restoring x.
func Central(f func(x []float64) float64, x []float64, h float64) []float64 {
	g := make([]float64, len(x))
	for i := range x {
		orig := x[i]
		x[i] = orig + h
		fp := f(x)
		x[i] = orig - h
		fm := f(x)
		x[i] = orig
		g[i] = (fp - fm) / (2 * h)
	}
	return g
}

// Check fails t when analytic differs from the central differences of f at x by more than
// atol + rtol*|numeric| in any element. A step of 1e-6 and tolerances around 1e-6 suit float64
// functions that are smooth near x.
func Check(t testing.TB, name string, f func(x []float64) float64, x, analytic []float64, h, rtol, atol float64) {
	t.Helper()
	num := Central(f, x, h)
	if len(num) != len(analytic) {
		t.Fatalf("%s: analytic gradient has %d elements, want %d", name, len(analytic), len(num))
	}
	bad := 0
	for i := range num {
		if math.Abs(num[i]-analytic[i]) > atol+rtol*math.Abs(num[i]) {
			if bad < 5 {
				t.Errorf("%s: d/dx[%d]: analytic %.10g, finite difference %.10g", name, i, analytic[i], num[i])
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d gradient elements differ", name, bad, len(num))
	}
}
