package nnref

import (
	"math/rand/v2"
	"testing"
)

func TestActivations(t *testing.T) {
	// f(1) from the definitions: Φ(1) = 0.8413447460685429, σ(1), σ(1.702).
	for _, c := range []struct {
		a    Act
		name string
		f1   float64
	}{{SiLU, "silu", 0.7310585786300049}, {GELU, "gelu", 0.8413447460685429},
		{GELUTanh, "gelu_tanh", 0.8411919906082768}, {QuickGELU, "quick_gelu", 0.8457957659328212}} {
		t.Run(c.name, func(t *testing.T) {
			y := []float64{0}
			Activate(c.a, []float64{1}, y)
			near(t, "f(1)", y, []float64{c.f1}, 1e-15)
			r := rand.New(rand.NewPCG(11, uint64(c.a)))
			x, ry := randn(r, 40, 3), randn(r, 40, 1)
			y = make([]float64, 40)
			dx := make([]float64, 40)
			ActivateBackward(c.a, x, ry, dx)
			fd(t, "dx", x, func() float64 { Activate(c.a, x, y); return dotLoss(ry, y) }, dx)
		})
	}
}

func TestSwiGLUGradient(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 13))
	g, u, ry := randn(r, 30, 2), randn(r, 30, 1), randn(r, 30, 1)
	y, dg, du := make([]float64, 30), make([]float64, 30), make([]float64, 30)
	SwiGLUBackward(g, u, ry, dg, du)
	loss := func() float64 { SwiGLU(g, u, y); return dotLoss(ry, y) }
	fd(t, "dgate", g, loss, dg)
	fd(t, "dup", u, loss, du)
}

func TestEmbeddingGradient(t *testing.T) {
	r := rand.New(rand.NewPCG(14, 15))
	v, d := 6, 5
	ids := []int32{3, 0, 3, 5, 3} // repeated ids add up
	table, ry := randn(r, v*d, 1), randn(r, len(ids)*d, 1)
	y, dt := make([]float64, len(ids)*d), make([]float64, v*d)
	EmbeddingBackward(d, ids, ry, dt, false)
	fd(t, "dtable", table, func() float64 { Embedding(d, table, ids, y); return dotLoss(ry, y) }, dt)
}
