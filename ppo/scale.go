package ppo

import (
	"math"

	"github.com/mtrl-go/mtrl/tensor"
)

// Grad is where a loss entry point writes its gradient, passed with each call (never inside a
// configuration, so that a composition such as tprl's update cannot overwrite a configured
// value). The zero value computes the loss only.
type Grad struct {
	// Dst receives Scale * d loss / d input, shaped like the input the gradient is taken
	// w.r.t. (float32, on the inputs' backend); nil computes the loss only.
	Dst *tensor.Tensor
	// Scale multiplies the returned loss and the gradient; 0 means 1. Use it for the
	// reference's global token scaling of micro-batch losses (see TokenScale): the loss a
	// micro-batch backpropagates is loss * sum(m_micro) * world_size / total_tokens.
	Scale float64
	// Accumulate adds the gradient into Dst instead of overwriting it, so the policy loss, the
	// KL loss and the entropy penalty of one micro-batch can share one buffer.
	Accumulate bool
}

// check validates Scale and returns g with Scale filled in (0 becomes 1), the form the
// kernels receive.
func (g Grad) check(op string) (Grad, error) {
	if !(g.Scale >= 0) || math.IsInf(g.Scale, 0) {
		return g, tensor.Errorf(tensor.ErrParam, op, "grad.Scale", "is %v, want a finite value >= 0 (0 means 1)", g.Scale)
	}
	g.Scale = g.scale()
	return g, nil
}

func (g Grad) scale() float64 {
	if g.Scale == 0 {
		return 1
	}
	return g.Scale
}

// TokenScale is the reference's global token scaling for micro-batch and data-parallel gradient
// accumulation (docs/semantics.md#token-scaling): it returns sum(microMask) * worldSize /
// globalTokens, the Grad.Scale of a micro-batch whose response mask is microMask
// (float32, any shape), where globalTokens is sum(response_mask) of the whole mini-batch
// across all ranks (all-reduced). Summing the scaled micro-batch gradients over micro-batches
// and averaging them over ranks then gives the gradient of the token-averaged loss of the
// mini-batch. An all-zero micro-batch gets 0; its losses and gradients are 0 anyway.
func TokenScale(microMask *tensor.Tensor, globalTokens float64, worldSize int) (float64, error) {
	const op = "ppo.TokenScale"
	if microMask == nil {
		return 0, tensor.Errorf(tensor.ErrShape, op, "microMask", "is nil")
	}
	if err := tensor.CheckDType(op, "microMask", microMask, tensor.Float32); err != nil {
		return 0, err
	}
	_, n, err := tensor.MaskedSum(microMask, microMask)
	if err != nil {
		return 0, err
	}
	switch {
	case !(globalTokens > 0) || math.IsInf(globalTokens, 0):
		return 0, tensor.Errorf(tensor.ErrParam, op, "globalTokens", "is %v, want a finite value > 0", globalTokens)
	case worldSize < 1:
		return 0, tensor.Errorf(tensor.ErrParam, op, "worldSize", "is %d, want >= 1", worldSize)
	case !(n >= 0) || math.IsInf(n, 0):
		return 0, tensor.Errorf(tensor.ErrParam, op, "microMask", "sums to %v, want a finite value >= 0", n)
	}
	return n * float64(worldSize) / globalTokens, nil
}
