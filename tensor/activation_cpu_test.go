package tensor

import (
	"math"
	"math/rand/v2"
	"os"
	"strconv"
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

// TestGELUF32Error bounds the float32 GELU and GELUTanh (activation_gelu.go) against the float64
// reference in units of u = 2⁻²⁴, over every stride-th float32 in [−20, 20] (MTRL_GELU_STRIDE,
// default 4099; 1 sweeps all 2.2·10⁹ of them): the value relative to |f|, the derivative relative
// to the sum of its terms' magnitudes (it crosses zero), both with a floor of 1e-30 (f underflows
// there). GELU's error grows with x² (the rounding of x/√2 and of z² inside exp(−z²)), GELUTanh's
// with |2u|·(1−σ(2u)) (the rounding of 2u inside exp(−2u)), as the sigmoid family's with |βx|.
// It also checks the suites' float32 tolerance, 2·10⁻⁵·(1 + |f|), which these bounds imply.
func TestGELUF32Error(t *testing.T) {
	stride := 4099
	if s, _ := strconv.Atoi(os.Getenv("MTRL_GELU_STRIDE")); s > 0 {
		stride = s
	}
	type acc struct{ val, der, tol float64 }
	worst := map[Activation]*acc{GELU: {}, GELUTanh: {}}
	const u = 0x1p-24
	check := func(a Activation, x float32) {
		v := float64(x)
		var f, df, scale, bound float64
		var got, gotD float32
		switch a {
		case GELU:
			c := 0.5 * math.Erfc(-v/math.Sqrt2)
			p := math.Exp(-v*v/2) / math.Sqrt(2*math.Pi)
			f, df, scale = v*c, c+v*p, c+math.Abs(v*p)
			bound = (16 + 3*v*v) * u
			got, gotD = gelu32(x), geluGrad32(x)
		case GELUTanh:
			k := math.Sqrt(2 / math.Pi)
			w := 2 * k * (v + 0.044715*v*v*v)
			s := 1 / (1 + math.Exp(-w))
			dw := 2 * k * (1 + 3*0.044715*v*v)
			f, df, scale = v*s, s+v*s*(1-s)*dw, s+math.Abs(v*s*(1-s)*dw)
			bound = (16 + 4*math.Abs(w)*(1-s)) * u
			got, gotD = geluTanh32(x), geluTanhGrad32(x)
		}
		e := math.Abs(float64(got)-f) / math.Max(math.Abs(f), 1e-30)
		ed := math.Abs(float64(gotD)-df) / math.Max(scale, 1e-30)
		if e > bound || ed > 2*bound {
			t.Fatalf("%v(%v) = %v, f' %v; want %v, %v (errors %.3g, %.3g u; bound %.3g u)", a, x, got, gotD, f, df, e/u, ed/u, bound/u)
		}
		w := worst[a]
		w.val, w.der = max(w.val, e/bound), max(w.der, ed/bound/2)
		w.tol = max(w.tol, math.Abs(float64(got)-f)/(2e-5*(1+math.Abs(f))), math.Abs(float64(gotD)-df)/(2e-5*(1+math.Abs(df))))
	}
	lo, hi := math.Float32bits(20), math.Float32bits(-20)
	for b := uint64(0); b <= uint64(hi); b += uint64(stride) {
		if uint32(b) <= lo || uint32(b) >= 0x80000000 {
			for _, a := range []Activation{GELU, GELUTanh} {
				check(a, math.Float32frombits(uint32(b)))
			}
		}
	}
	for _, x := range []float32{0, -0.0, 1, -1, 3, -3, 20, -20, 1e-30, -1e-30} {
		check(GELU, x)
		check(GELUTanh, x)
	}
	for a, w := range worst {
		t.Logf("%v: worst error %.3g of the bound (value), %.3g (derivative); %.3g of the suites' float32 tolerance", a, w.val, w.der, w.tol)
	}
}
