package ppo

import (
	"math"

	"github.com/mtrl-go/mtrl/tensor"
)

// GradOptions controls how a loss entry point scales its result and writes its gradient. The
// zero value writes the plain gradient, unscaled, over the destination.
type GradOptions struct {
	// Scale multiplies the returned loss and the gradient; 0 means 1. Use it for the
	// reference's global token scaling of micro-batch losses (see TokenScale): the loss a
	// micro-batch backpropagates is loss * sum(m_micro) * world_size / total_tokens.
	Scale float64
	// Accumulate adds the gradient into the destination instead of overwriting it, so the
	// policy loss, the KL loss and the entropy penalty of one micro-batch can share one buffer.
	Accumulate bool
}

func (o GradOptions) validate(op string) error {
	if !(o.Scale >= 0) || math.IsInf(o.Scale, 0) {
		return tensor.Errorf(tensor.ErrParam, op, "Scale", "is %v, want a finite value >= 0 (0 means 1)", o.Scale)
	}
	return nil
}

func (o GradOptions) scale() float64 {
	if o.Scale == 0 {
		return 1
	}
	return o.Scale
}

// TokenScale is the reference's global token scaling for micro-batch and data-parallel gradient
// accumulation (docs/semantics.md#token-scaling): it returns sum(microMask) * worldSize /
// globalTokens, the GradOptions.Scale of a micro-batch whose response mask is microMask
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
