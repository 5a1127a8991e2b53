package nnref

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/parallel"
)

// AdamW is one step of torch.optim.AdamW (amsgrad=False, maximize=False, the single-tensor
// implementation torch runs on the CPU) on float32 parameters, in torch's order of operations
// and roundings; step is the step count after this step (1 for the first). The scalars are
// computed in float64, as Python does, and rounded to float32 where torch passes them to a
// float32 kernel. torch's vectorized CPU kernels fuse some of the multiply-adds (lerp, add
// with alpha), which this reference does not, so the two agree to within a few float32 ulp;
// torch 1.x wrote the first moment as m·β1 + (1 − β1)·g, the same value up to rounding.
//
//	param  *= 1 − lr·wd
//	m      += (1 − β1)·(g − m)                      (lerp with weight < 0.5)
//	v       = v·β2 + (1 − β2)·g·g                 (addcmul, left to right)
//	denom   = sqrt(v) / sqrt(1 − β2^step) + eps
//	param  += −(lr / (1 − β1^step)) · m / denom   (addcdiv, left to right)
func AdamW(param, grad, m, v []float32, step int, lr, beta1, beta2, eps, wd float64) {
	c := NewAdamWScalars(step, lr, beta1, beta2, eps, wd)
	decay, w1, b2, w2, bc2, stepSize, e := c.Decay, c.W1, c.B2, c.W2, c.BC2, c.StepSize, c.Eps
	parallel.For(len(param), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g := grad[i]
			p := param[i] * decay
			mi := m[i] + float32(w1*(g-m[i]))
			vi := float32(v[i]*b2) + float32(float32(w2*g)*g) // addcmul: self + value*t1*t2
			denom := float32(float32(math.Sqrt(float64(vi)))/bc2) + e
			param[i] = p + float32(float32(stepSize*mi)/denom) // addcdiv: self + value*t1/t2
			m[i], v[i] = mi, vi
		}
	})
}

// AdamWScalars are the float32 scalars of one AdamW step (see AdamW): device kernels take
// them from here so that they round as the reference does.
type AdamWScalars struct {
	Decay    float32 // 1 − lr·wd
	W1       float32 // 1 − β1
	B2, W2   float32 // β2 and 1 − β2
	BC2      float32 // sqrt(1 − β2^step)
	StepSize float32 // −lr / (1 − β1^step)
	Eps      float32
}

// NewAdamWScalars computes the scalars in float64, as Python does, rounded to float32.
func NewAdamWScalars(step int, lr, beta1, beta2, eps, wd float64) AdamWScalars {
	return AdamWScalars{
		Decay:    float32(1 - lr*wd),
		W1:       float32(1 - beta1),
		B2:       float32(beta2),
		W2:       float32(1 - beta2),
		BC2:      float32(math.Sqrt(1 - math.Pow(beta2, float64(step)))),
		StepSize: float32(-(lr / (1 - math.Pow(beta1, float64(step))))),
		Eps:      float32(eps),
	}
}

// SumSquares is Σ x² in float64 over x, in a fixed order (chunks of 16384 summed in order).
func SumSquares(x []float32) float64 {
	const chunk = 1 << 14
	parts := make([]float64, (len(x)+chunk-1)/chunk)
	parallel.For(len(x), chunk, func(lo, hi int) {
		var s float64
		for _, v := range x[lo:hi] {
			s += float64(v) * float64(v)
		}
		parts[lo/chunk] = s
	})
	var s float64
	for _, p := range parts {
		s += p
	}
	return s
}

// Scale multiplies x by c in place.
func Scale(x []float32, c float32) {
	parallel.For(len(x), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x[i] *= c
		}
	})
}
