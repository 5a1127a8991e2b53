package nnref

import (
	"math"
	"testing"
)

// TestAdamWFirstStep: after one step m = (1−β1)g and v = (1−β2)g², so the bias-corrected update
// is lr·g/(|g| + eps): the parameter moves by about lr against the sign of its gradient, after
// the decoupled decay.
func TestAdamWFirstStep(t *testing.T) {
	const lr, wd = 1e-3, 0.01
	p := []float32{1, -2, 0.5}
	g := []float32{0.3, -4, 0}
	m, v := make([]float32, 3), make([]float32, 3)
	AdamW(p, g, m, v, 1, lr, 0.9, 0.999, 1e-8, wd)
	for i, p0 := range []float64{1, -2, 0.5} {
		gi := float64(g[i])
		want := p0*(1-lr*wd) - lr*gi/(math.Abs(gi)+1e-8)
		if math.Abs(float64(p[i])-want) > 1e-6 {
			t.Errorf("param[%d] = %.9g, want %.9g", i, p[i], want)
		}
		if math.Abs(float64(m[i])-0.1*gi) > 1e-7 || math.Abs(float64(v[i])-0.001*gi*gi) > 1e-7 {
			t.Errorf("moments[%d] = %v, %v", i, m[i], v[i])
		}
	}
}

// TestAdamWSteps runs ten steps against the float64 formula: float32 rounding only.
func TestAdamWSteps(t *testing.T) {
	const lr, b1, b2, eps, wd = 3e-3, 0.9, 0.95, 1e-6, 0.1
	p, m, v := []float32{0.7, -0.2}, make([]float32, 2), make([]float32, 2)
	p64, m64, v64 := []float64{0.7, -0.2}, make([]float64, 2), make([]float64, 2)
	for step := 1; step <= 10; step++ {
		g := []float32{float32(math.Sin(float64(step))), float32(0.01 * float64(step))}
		AdamW(p, g, m, v, step, lr, b1, b2, eps, wd)
		for i := range p64 {
			gi := float64(g[i])
			p64[i] *= 1 - lr*wd
			m64[i] = b1*m64[i] + (1-b1)*gi
			v64[i] = b2*v64[i] + (1-b2)*gi*gi
			denom := math.Sqrt(v64[i])/math.Sqrt(1-math.Pow(b2, float64(step))) + eps
			p64[i] -= lr / (1 - math.Pow(b1, float64(step))) * m64[i] / denom
			if math.Abs(float64(p[i])-p64[i]) > 1e-6 {
				t.Fatalf("step %d: param[%d] = %.9g, want %.9g", step, i, p[i], p64[i])
			}
		}
	}
}
