package tensor

import "github.com/mtrl-go/mtrl/internal/hostops"

// GELU and GELUTanh in float32 on the CPU. Like the sigmoid family they are defined by these
// scalar functions, which the vector kernels (activation_amd64.s) reproduce bit for bit; every
// product that is then added is converted to float32 (no FMA under GOAMD64=v3), and the exps
// are hostops.Exp32.
//
// GELU is x·Φ(x) with 2Φ(x) = erfc(−x/√2), and erfc(z) for z ≥ 0 is Numerical Recipes'
// Chebyshev fit t·exp(−z² + P(t)), t = 1/(1 + z/2), P of degree 9 (relative error below
// 1.2e-7 for every z ≥ 0); erfc(z) = 2 − erfc(−z) for z < 0. The negative tail, where
// GELU(x) is tiny, is therefore relatively accurate, not just absolutely. GELUTanh is
// 0.5·x·(1 + tanh u) = x·σ(2u), u = √(2/π)·(x + 0.044715·x³), on the sigmoid family's σ.
// Measured against the float64 reference (TestGELUF32Error) over a dense sweep: see the
// bounds there.

// The coefficients of P, constant term first.
var erfcP = [10]float32{-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
	0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277}

const (
	negInvSqrt2  = -0.70710678118654752 // −1/√2
	invSqrt2Pi   = 0.39894228040143268  // 1/√(2π)
	geluTanhK2   = 1.5957691216057308   // 2·√(2/π)
	geluTanhK3   = 0.044715
	geluTanhK3x3 = 3 * 0.044715
)

// geluCDF2 returns 2Φ(x) = erfc(−x/√2).
func geluCDF2(x float32) float32 {
	z := x * negInvSqrt2
	a := z
	if a < 0 {
		a = -a
	}
	t := 1 / (1 + float32(a*0.5))
	p := erfcP[9]
	for i := 8; i >= 0; i-- {
		p = erfcP[i] + float32(t*p)
	}
	e := float32(t * hostops.Exp32(p-float32(a*a)))
	if z < 0 {
		return 2 - e
	}
	return e
}

// gelu32 is GELU(x) = x·Φ(x).
func gelu32(x float32) float32 { return x * (0.5 * geluCDF2(x)) }

// geluGrad32 is GELU'(x) = Φ(x) + x·φ(x), φ(x) = exp(−x²/2)/√(2π).
func geluGrad32(x float32) float32 {
	pdf := hostops.Exp32(float32(x*x)*-0.5) * invSqrt2Pi
	return float32(0.5*geluCDF2(x)) + float32(x*pdf)
}

// geluTanhArg is 2u = 2√(2/π)·(x + 0.044715·x³).
func geluTanhArg(x float32) float32 {
	return geluTanhK2 * (x + float32(geluTanhK3*float32(float32(x*x)*x)))
}

// geluTanh32 is GELUTanh(x) = x·σ(2u).
func geluTanh32(x float32) float32 { return x * sigmoid32(geluTanhArg(x)) }

// geluTanhGrad32 is GELUTanh'(x) = σ + x·σ(1−σ)·2u′ with σ = σ(2u) and
// 2u′ = 2√(2/π)·(1 + 3·0.044715·x²).
func geluTanhGrad32(x float32) float32 {
	s, oms := sigmoidPair32(geluTanhArg(x))
	du := geluTanhK2 * (1 + float32(geluTanhK3x3*float32(x*x)))
	return s + float32(float32(float32(x*du)*s)*oms)
}
