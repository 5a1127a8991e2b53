package ppo

import (
	"math"

	"github.com/mtrl-go/mtrl/tensor"
)

// GradOptions controls how a loss entry point scales its result and writes its gradient. The
// zero value writes the plain gradient, unscaled, over the destination.
type GradOptions struct {
	// Scale multiplies the returned loss and the gradient; 0 means 1. Use it for the
	// reference's global token scaling of micro-batch losses (see TokenScaling): the loss a
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

// TokenScaling is the reference's global token scaling for micro-batch and data-parallel
// gradient accumulation (docs/semantics.md#token-scaling): every micro-batch loss is multiplied by
// LocalTokens * WorldSize / GlobalTokens, where LocalTokens = sum(response_mask) of the
// micro-batch and GlobalTokens = sum(response_mask) of the whole mini-batch across all ranks
// (the reference all-reduces it). Summing the scaled micro-batch gradients over micro-batches
// and averaging them over ranks (as data-parallel all-reduce does) then gives the gradient of
// the token-averaged loss of the mini-batch.
type TokenScaling struct {
	LocalTokens  float64
	GlobalTokens float64
	WorldSize    int
}

// Factor returns LocalTokens * WorldSize / GlobalTokens. GlobalTokens must be > 0,
// LocalTokens >= 0 and WorldSize >= 1 (ErrParam otherwise).
func (s TokenScaling) Factor() (float64, error) {
	const op = "ppo.TokenScaling.Factor"
	switch {
	case !(s.GlobalTokens > 0) || math.IsInf(s.GlobalTokens, 0):
		return 0, tensor.Errorf(tensor.ErrParam, op, "GlobalTokens", "is %v, want a finite value > 0", s.GlobalTokens)
	case !(s.LocalTokens >= 0) || math.IsInf(s.LocalTokens, 0):
		return 0, tensor.Errorf(tensor.ErrParam, op, "LocalTokens", "is %v, want a finite value >= 0", s.LocalTokens)
	case s.WorldSize < 1:
		return 0, tensor.Errorf(tensor.ErrParam, op, "WorldSize", "is %d, want >= 1", s.WorldSize)
	}
	return s.LocalTokens * float64(s.WorldSize) / s.GlobalTokens, nil
}

// TokenScale returns sum(microMask) * worldSize / globalTokens, the GradOptions.Scale of a
// micro-batch whose response mask is microMask (float32, any shape). An all-zero micro-batch
// gets 0; its losses and gradients are 0 anyway.
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
	f, err := TokenScaling{LocalTokens: n, GlobalTokens: globalTokens, WorldSize: worldSize}.Factor()
	if e, ok := err.(*tensor.Error); ok {
		c := *e
		c.Op = op
		switch c.Arg {
		case "GlobalTokens":
			c.Arg = "globalTokens"
		case "WorldSize":
			c.Arg = "worldSize"
		case "LocalTokens":
			c.Arg = "microMask"
		}
		return 0, &c
	}
	return f, err
}
