package tensor

import (
	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// The CPU activations of the sigmoid family (SiLU, QuickGELU and SwiGLU's SiLU) in float32:
// σ(βx) = 1/(1 + exp(−βx)) with hostops.Exp32 (about 2 ulp) instead of math.Exp in float64,
// whose conversions and call were a fifth of the toy VLM's decode. The results stay within a
// few float32 ulps of the float64 reference (TestActivationF32Ulps). GELU and GELUTanh (erf,
// tanh) keep the float64 reference. On amd64 the loops run as AVX-512 or AVX2 kernels
// (activation_amd64.s) that give the same float32 results bit for bit (TestActivationSIMD).

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

// The float32 conversions of products that are then added keep them rounded (no FMA under
// GOAMD64=v3), as the vector kernels compute.

// actKernels is a vector implementation of the loops below over whole vectors of lanes
// elements (activation_amd64.s), bit-identical to them: each returns nonzero when an exp
// argument exceeded expVecMax, and the caller redoes those elements with the Go loop.
type actKernels struct {
	lanes     int
	fwd       func(y, x []float32, beta float32) int32
	bwd       func(dx, x, dy []float32, beta float32) int32
	swiGLU    func(y, gate, up []float32) int32
	swiGLUBwd func(dgate, dup, gate, up, dy []float32) int32
}

// expVecMax is hostops.Exp32's expMax: above it Exp32 takes math.Exp, which the kernels do not.
const expVecMax = 88

// actImpls lists the activation kernels this build and CPU can run, the Go loops last.
var actImpls = dispatch.New(actSIMD()...)

// vecSplit returns the kernels and the length of x's whole vectors, 0 with nil for the Go loops.
func vecSplit(n int) (*actKernels, int) {
	k := actImpls.Active()
	if k == nil {
		return nil, 0
	}
	return k, n / k.lanes * k.lanes
}

// activateCPU writes y = x·σ(βx) for SiLU and QuickGELU in float32, the others through the
// float64 reference.
func activateCPU(a Activation, x, y []float32) {
	beta, ok := sigmoidBeta(a)
	if !ok {
		nnref.Activate(a.ref(), x, y)
		return
	}
	one := func(v float32) float32 { return v * sigmoid32(beta*v) }
	parallel.For(len(x), 1<<14, func(lo, hi int) {
		x, y := x[lo:hi], y[lo:hi]
		k, n := vecSplit(len(x))
		if n > 0 && k.fwd(y[:n], x[:n], beta) != 0 {
			for i, v := range x[:n] {
				if -(beta * v) > expVecMax {
					y[i] = one(v)
				}
			}
		}
		for i, v := range x[n:] {
			y[n+i] = one(v)
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
	one := func(v, d float32) float32 {
		s, oms := sigmoidPair32(beta * v)
		return d * (s + float32(beta*v*s*oms))
	}
	parallel.For(len(x), 1<<14, func(lo, hi int) {
		x, dy, dx := x[lo:hi], dy[lo:hi], dx[lo:hi]
		k, n := vecSplit(len(x))
		if n > 0 && k.bwd(dx[:n], x[:n], dy[:n], beta) != 0 {
			for i, v := range x[:n] {
				if -(beta * v) > expVecMax {
					dx[i] = one(v, dy[i])
				}
			}
		}
		for i, v := range x[n:] {
			dx[n+i] = one(v, dy[n+i])
		}
	})
}

// swiGLUCPU writes y = silu(gate)·up in float32.
func swiGLUCPU(gate, up, y []float32) {
	parallel.For(len(gate), 1<<14, func(lo, hi int) {
		gate, up, y := gate[lo:hi], up[lo:hi], y[lo:hi]
		k, n := vecSplit(len(gate))
		if n > 0 && k.swiGLU(y[:n], gate[:n], up[:n]) != 0 {
			for i, g := range gate[:n] {
				if -g > expVecMax {
					y[i] = g * sigmoid32(g) * up[i]
				}
			}
		}
		for i := n; i < len(gate); i++ {
			g := gate[i]
			y[i] = g * sigmoid32(g) * up[i]
		}
	})
}

// swiGLUBackwardCPU writes dgate = dy·up·silu'(gate) and dup = dy·silu(gate) in float32.
func swiGLUBackwardCPU(gate, up, dy, dgate, dup []float32) {
	one := func(i int, g float32) {
		s, oms := sigmoidPair32(g)
		d := dy[i]
		dgate[i] = d * up[i] * (s + float32(g*s*oms))
		dup[i] = d * (g * s)
	}
	parallel.For(len(gate), 1<<14, func(lo, hi int) {
		k, n := vecSplit(hi - lo)
		if n > 0 && k.swiGLUBwd(dgate[lo:lo+n], dup[lo:lo+n], gate[lo:lo+n], up[lo:lo+n], dy[lo:lo+n]) != 0 {
			for i := lo; i < lo+n; i++ {
				if -gate[i] > expVecMax {
					one(i, gate[i])
				}
			}
		}
		for i := lo + n; i < hi; i++ {
			one(i, gate[i])
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
