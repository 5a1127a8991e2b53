package tensor

import (
	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// The CPU activations of the sigmoid family (SiLU, QuickGELU and SwiGLU's SiLU) in float32:
// σ(βx) = 1/(1 + exp(−βx)) with hostops.Exp32 (about 2 ulp) instead of math.Exp in float64,
// whose conversions and call were a fifth of the toy VLM's decode. The results stay within a
// few float32 ulps of the float64 reference (TestActivationF32Ulps). GELU and GELUTanh (erf,
// tanh) keep the float64 reference.

// sigmoidBeta is β of x·σ(βx) for the activations evaluated here, and false for the others.
func sigmoidBeta(a Activation) (float32, bool) {
	switch a {
	case SiLU:
		return 1, true
	case QuickGELU:
		return 1.702, true
	}
	return 0, false
}

// sigmoid32 is σ(x) in float32; exp(−x) overflows to +Inf for x below about −88, giving 0.
func sigmoid32(x float32) float32 { return 1 / (1 + hostops.Exp32(-x)) }

// sigmoidPair32 is σ(x) and 1 − σ(x) = σ(−x), the latter without the cancellation of 1 − σ
// for large x (where it would lose all its digits and with them silu′'s x·σ(1−σ) term).
func sigmoidPair32(x float32) (s, oms float32) {
	e := hostops.Exp32(-x)
	s = 1 / (1 + e)
	if e > 1 {
		return s, 1 - s // σ < 1/2: no cancellation, and e may be +Inf
	}
	return s, e * s
}

// activateCPU writes y = x·σ(βx) for SiLU and QuickGELU in float32, the others through the
// float64 reference.
func activateCPU(a Activation, x, y []float32) {
	beta, ok := sigmoidBeta(a)
	if !ok {
		nnref.Activate(a.ref(), x, y)
		return
	}
	parallel.For(len(x), 1<<14, func(lo, hi int) {
		x, y := x[lo:hi], y[lo:hi]
		for i, v := range x {
			y[i] = v * sigmoid32(beta*v)
		}
	})
}

// activateBackwardCPU writes dx = dy·(σ + βx·σ(1−σ)) with σ = σ(βx) for SiLU and QuickGELU.
func activateBackwardCPU(a Activation, x, dy, dx []float32) {
	beta, ok := sigmoidBeta(a)
	if !ok {
		nnref.ActivateBackward(a.ref(), x, dy, dx)
		return
	}
	parallel.For(len(x), 1<<14, func(lo, hi int) {
		x, dy, dx := x[lo:hi], dy[lo:hi], dx[lo:hi]
		for i, v := range x {
			s, oms := sigmoidPair32(beta * v)
			dx[i] = dy[i] * (s + beta*v*s*oms)
		}
	})
}

// swiGLUCPU writes y = silu(gate)·up in float32.
func swiGLUCPU(gate, up, y []float32) {
	parallel.For(len(gate), 1<<14, func(lo, hi int) {
		gate, up, y := gate[lo:hi], up[lo:hi], y[lo:hi]
		for i, g := range gate {
			y[i] = g * sigmoid32(g) * up[i]
		}
	})
}

// swiGLUBackwardCPU writes dgate = dy·up·silu'(gate) and dup = dy·silu(gate) in float32.
func swiGLUBackwardCPU(gate, up, dy, dgate, dup []float32) {
	parallel.For(len(gate), 1<<14, func(lo, hi int) {
		gate, up, dy, dgate, dup := gate[lo:hi], up[lo:hi], dy[lo:hi], dgate[lo:hi], dup[lo:hi]
		for i, g := range gate {
			s, oms := sigmoidPair32(g)
			d := dy[i]
			dgate[i] = d * up[i] * (s + g*s*oms)
			dup[i] = d * (g * s)
		}
	})
}

// axpbyCPU writes y = alpha·x + beta·y (beta 0: y not read; alpha 0: x not read).
func axpbyCPU(y, x []float32, alpha, beta float32) {
	x = x[:len(y)]
	switch {
	case alpha == 0 && beta == 0:
		clear(y)
	case alpha == 0:
		for i := range y {
			y[i] *= beta
		}
	case beta == 0:
		for i, v := range x {
			y[i] = alpha * v
		}
	case beta == 1 && alpha == 1:
		for i, v := range x {
			y[i] += v
		}
	case beta == 1:
		for i, v := range x {
			y[i] += alpha * v
		}
	default:
		for i, v := range x {
			y[i] = alpha*v + beta*y[i]
		}
	}
}

// mulCPU writes y = a ⊙ b.
func mulCPU(y, a, b []float32) {
	a, b = a[:len(y)], b[:len(y)]
	for i := range y {
		y[i] = a[i] * b[i]
	}
}
