package tensor

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/internal/nnref"
)

// TestActivationF32Ulps bounds the float32 sigmoid-family kernels against the float64 reference
// in units of float32 rounding u = 2⁻²⁴: the value within (8 + 2|βx|(1−σ))·u of |f| (the second
// term is the rounding of β = 1.702 and βx to float32, amplified by exp), the derivative within twice that of
// the sum of its terms' magnitudes |σ| + |βx·σ(1−σ)| (it crosses zero, where a relative bound
// means nothing), over x in [−100, 100] (σ saturating both ways) and dense near 0. Below 1e-30
// the bound is absolute: exp(−βx) overflows float32 past βx ≈ −88, flushing x·σ(βx) ≈ 1e-36 to 0.
func TestActivationF32Ulps(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var x []float32
	for range 20000 {
		x = append(x, float32(r.NormFloat64()*3), float32((r.Float64()*2-1)*100))
	}
	x = append(x, 0, -0.0, 1e-30, -1e-30, 88, -88, 100, -100, float32(math.Inf(1)), float32(math.Inf(-1)))
	ones := make([]float32, len(x))
	for i := range ones {
		ones[i] = 1
	}
	const eps = 8 * 0x1p-24
	x64 := make([]float64, len(x))
	for i, v := range x {
		x64[i] = float64(v)
	}
	for _, a := range []Activation{SiLU, QuickGELU} {
		beta, _ := sigmoidBeta(a)
		y, dx := make([]float32, len(x)), make([]float32, len(x))
		activateCPU(a, x, y)
		activateBackwardCPU(a, x, ones, dx)
		wy, wdx := make([]float64, len(x)), make([]float64, len(x))
		nnref.Activate(a.ref(), x64, wy)
		nnref.ActivateBackward(a.ref(), x64, make64(len(x), 1), wdx)
		var worst, worstD float64 // in units of the bound
		for i, v := range x64 {
			if math.IsInf(v, 0) {
				if got, want := float64(y[i]), wy[i]; got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
					t.Errorf("%v(%v) = %v, want %v", a, v, got, want)
				}
				continue
			}
			s := 1 / (1 + math.Exp(-float64(beta)*v))
			scale := math.Abs(s) + math.Abs(float64(beta)*v*s*(1-s))
			// rounding β and βx to float32 moves σ(βx) by up to 1.5·|βx|(1−σ)·2⁻²⁴ relative
			bound := eps + 2*math.Abs(float64(beta)*v)*(1-s)*0x1p-24
			e := math.Abs(float64(y[i])-wy[i]) / math.Max(math.Abs(wy[i]), 1e-30)
			ed := math.Abs(float64(dx[i])-wdx[i]) / math.Max(scale, 1e-30)
			if e > bound || ed > 2*bound {
				t.Fatalf("%v(%v) = %v, f' %v; want %v, %v", a, v, y[i], dx[i], wy[i], wdx[i])
			}
			worst, worstD = max(worst, e/bound), max(worstD, ed/bound/2)
		}
		t.Logf("%v: worst error %.2g of the bound (value), %.2g (derivative)", a, worst, worstD)
	}
	g, u, dy := x[:1000], x[1000:2000], x[2000:3000]
	y, dg, du := make([]float32, 1000), make([]float32, 1000), make([]float32, 1000)
	swiGLUCPU(g, u, y)
	swiGLUBackwardCPU(g, u, dy, dg, du)
	g6, u6, dy6 := x64[:1000], x64[1000:2000], x64[2000:3000]
	wy, wdg, wdu := make([]float64, 1000), make([]float64, 1000), make([]float64, 1000)
	nnref.SwiGLU(g6, u6, wy)
	nnref.SwiGLUBackward(g6, u6, dy6, wdg, wdu)
	for i, v := range g6 {
		s := 1 / (1 + math.Exp(-v))
		for _, c := range []struct {
			name      string
			got, want float64
			scale     float64
		}{
			{"y", float64(y[i]), wy[i], math.Abs(wy[i])},
			{"dgate", float64(dg[i]), wdg[i], math.Abs(dy6[i]*u6[i]) * (s + math.Abs(v*s*(1-s)))},
			{"dup", float64(du[i]), wdu[i], math.Abs(wdu[i])},
		} {
			if math.Abs(c.got-c.want) > 2*(eps+2*math.Abs(v)*(1-s)*0x1p-24)*c.scale+1e-30 {
				t.Fatalf("swiglu %s[%d] = %v, want %v", c.name, i, c.got, c.want)
			}
		}
	}
}

func make64(n int, v float64) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = v
	}
	return x
}
