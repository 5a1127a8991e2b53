package nnref

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestGemmTransposes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	m, n, k := 5, 7, 9
	a, b := randn(r, m*k, 1), randn(r, k*n, 1)
	at, bt := make([]float64, m*k), make([]float64, k*n) // the same matrices stored transposed
	for i := range m {
		for p := range k {
			at[p*m+i] = a[i*k+p]
		}
	}
	for p := range k {
		for j := range n {
			bt[j*k+p] = b[p*n+j]
		}
	}
	want := make([]float64, m*n)
	for i := range m {
		for j := range n {
			for p := range k {
				want[i*n+j] += a[i*k+p] * b[p*n+j]
			}
		}
	}
	for _, c := range []struct{ ta, tb bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		t.Run(fmt.Sprintf("ta=%v/tb=%v", c.ta, c.tb), func(t *testing.T) {
			aa, bb := a, b
			if c.ta {
				aa = at
			}
			if c.tb {
				bb = bt
			}
			got := make([]float64, m*n)
			Gemm(c.ta, c.tb, m, n, k, aa, bb, false, got)
			near(t, "c", got, want, 1e-13)
			Gemm(c.ta, c.tb, m, n, k, aa, bb, true, got) // accumulate: twice the product
			for i := range want {
				got[i] /= 2
			}
			near(t, "c+=", got, want, 1e-13)
		})
	}
}

func TestLinearGradient(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	m, n, k := 4, 6, 5
	x, w, bias, ry := randn(r, m*k, 1), randn(r, n*k, 1), randn(r, n, 1), randn(r, m*n, 1)
	y := make([]float64, m*n)
	loss := func() float64 { Linear(m, n, k, x, w, bias, y); return dotLoss(ry, y) }
	dx, dw, db := make([]float64, m*k), make([]float64, n*k), make([]float64, n)
	LinearBackward(m, n, k, x, w, ry, dx, dw, db, false)
	fd(t, "dx", x, loss, dx)
	fd(t, "dw", w, loss, dw)
	fd(t, "dbias", bias, loss, db)
}
