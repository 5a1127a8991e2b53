package main

import (
	"fmt"
	"math"
)

// AdamW is decoupled-weight-decay Adam (Loshchilov & Hutter; torch.optim.AdamW's update):
//
//	w ← w − lr·wd·w;  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//	w ← w − lr · (m / (1−β1^t)) / (sqrt(v / (1−β2^t)) + eps)
//
// The moments are float32 like the weights; the scalar arithmetic is float64.
type AdamW struct {
	Beta1, Beta2, Eps, WeightDecay float64
	// T is the number of steps taken (the bias-correction exponent).
	T int
	// M and V are the first and second moments, one slice per parameter.
	M, V [][]float32
}

// NewAdamW creates the optimizer state for parameters of the given sizes.
func NewAdamW(sizes []int, beta1, beta2, eps, weightDecay float64) *AdamW {
	o := &AdamW{Beta1: beta1, Beta2: beta2, Eps: eps, WeightDecay: weightDecay}
	for _, n := range sizes {
		o.M = append(o.M, make([]float32, n))
		o.V = append(o.V, make([]float32, n))
	}
	return o
}

// Step updates ws in place from gs at learning rate lr. decay[i] says whether parameter i gets
// weight decay (matrices do; biases, norms and embeddings of positions usually do not).
func (o *AdamW) Step(ws, gs [][]float32, decay []bool, lr float64) error {
	if len(ws) != len(o.M) || len(gs) != len(ws) || len(decay) != len(ws) {
		return fmt.Errorf("adamw: %d weights, %d grads, %d decay flags for %d parameters", len(ws), len(gs), len(decay), len(o.M))
	}
	s := o.next(lr)
	b1, b2, stepSize, invSqrtBC2, eps := s.beta1, s.beta2, s.stepSize, s.invSqrtBC2, s.eps
	for i, w := range ws {
		g, m, v := gs[i], o.M[i], o.V[i]
		if len(w) != len(m) || len(g) != len(m) {
			return fmt.Errorf("adamw: parameter %d has %d weights and %d grads, want %d", i, len(w), len(g), len(m))
		}
		shrink := o.shrink(decay[i], lr)
		for j := range w {
			gj := g[j]
			m[j] = b1*m[j] + (1-b1)*gj
			v[j] = b2*v[j] + (1-b2)*gj*gj
			denom := float32(math.Sqrt(float64(v[j])))*invSqrtBC2 + eps
			w[j] = w[j]*shrink - stepSize*m[j]/denom
		}
	}
	return nil
}

// adamwScalars are one step's float32 constants, shared by Step and the device's step.
type adamwScalars struct {
	beta1, beta2, stepSize, invSqrtBC2, eps float32
}

// next advances the step count and returns the new step's constants: lr/(1-β1^t) and
// 1/√(1-β2^t) computed in float64, then rounded.
func (o *AdamW) next(lr float64) adamwScalars {
	o.T++
	bc1 := 1 - math.Pow(o.Beta1, float64(o.T))
	bc2 := 1 - math.Pow(o.Beta2, float64(o.T))
	return adamwScalars{beta1: float32(o.Beta1), beta2: float32(o.Beta2), stepSize: float32(lr / bc1),
		invSqrtBC2: float32(1 / math.Sqrt(bc2)), eps: float32(o.Eps)}
}

// shrink is the decoupled weight decay's factor 1 - lr·wd of a decayed parameter (1 otherwise).
func (o *AdamW) shrink(decay bool, lr float64) float32 {
	if !decay {
		return 1
	}
	return float32(1 - lr*o.WeightDecay)
}

// ClipGradNorm computes the global L2 norm of gs (accumulated in float64, in a fixed order)
// and, when it exceeds maxNorm > 0, scales every gradient by maxNorm/(norm+1e-6) as
// torch.nn.utils.clip_grad_norm_ does. It returns the norm before clipping. A non-finite norm
// leaves the gradients untouched; the caller skips the step.
func ClipGradNorm(gs [][]float32, maxNorm float64) float64 {
	var sum float64
	for _, g := range gs {
		for _, x := range g {
			sum += float64(x) * float64(x)
		}
	}
	norm := math.Sqrt(sum)
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return norm
	}
	if maxNorm > 0 && norm > maxNorm {
		s := float32(maxNorm / (norm + 1e-6))
		for _, g := range gs {
			for j := range g {
				g[j] *= s
			}
		}
	}
	return norm
}
