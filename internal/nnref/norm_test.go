package nnref

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestRMSNormGradient(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	rows, d := 3, 8
	x, w, ry := randn(r, rows*d, 2), randn(r, d, 1), randn(r, rows*d, 1)
	y := make([]float64, rows*d)
	loss := func() float64 { RMSNorm(rows, d, x, w, 1e-6, y); return dotLoss(ry, y) }
	dx, dw := make([]float64, rows*d), make([]float64, d)
	RMSNormBackward(rows, d, x, w, ry, 1e-6, dx, dw, false)
	fd(t, "dx", x, loss, dx)
	fd(t, "dw", w, loss, dw)

	// The forward against its definition on one row.
	RMSNorm(rows, d, x, w, 1e-6, y)
	var ms float64
	for _, v := range x[:d] {
		ms += v * v / float64(d)
	}
	for j := range d {
		if want := w[j] * x[j] / math.Sqrt(ms+1e-6); math.Abs(y[j]-want) > 1e-12 {
			t.Fatalf("y[%d] = %v, want %v", j, y[j], want)
		}
	}
}

func TestLayerNormGradient(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	rows, d := 3, 8
	x, w, b, ry := randn(r, rows*d, 2), randn(r, d, 1), randn(r, d, 1), randn(r, rows*d, 1)
	for i := range x {
		x[i] += 3 // a mean far from zero
	}
	y := make([]float64, rows*d)
	loss := func() float64 { LayerNorm(rows, d, x, w, b, 1e-5, y); return dotLoss(ry, y) }
	dx, dw, db := make([]float64, rows*d), make([]float64, d), make([]float64, d)
	LayerNormBackward(rows, d, x, w, ry, 1e-5, dx, dw, db, false)
	fd(t, "dx", x, loss, dx)
	fd(t, "dw", w, loss, dw)
	fd(t, "db", b, loss, db)
	// acc adds to what is there.
	dw2, db2 := append([]float64(nil), dw...), append([]float64(nil), db...)
	LayerNormBackward(rows, d, x, w, ry, 1e-5, dx, dw2, db2, true)
	for j := range d {
		if math.Abs(dw2[j]-2*dw[j]) > 1e-12 || math.Abs(db2[j]-2*db[j]) > 1e-12 {
			t.Fatalf("accumulated dw/db[%d] = %v/%v, want twice %v/%v", j, dw2[j], db2[j], dw[j], db[j])
		}
	}
}
