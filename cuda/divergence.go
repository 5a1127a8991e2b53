//go:build cuda

package cuda

import (
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/tensor"
)

// The divergence family: package divergence (kernels/divergence.cu).
var (
	_ divergence.PenaltyKernel         = deviceKernels{}
	_ divergence.PenaltyBackwardKernel = deviceKernels{}
	_ divergence.PerceptionScoreKernel = deviceKernels{}
	_ divergence.RewardsKernel         = deviceKernels{}
)

// Penalty is the device kernel of divergence.Penalty (every kind; Full reduces one row per
// block in float64).
func (b deviceKernels) Penalty(dst, logp, ref *tensor.Tensor, kind divergence.Kind) error {
	const op = "divergence.Penalty"
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"dst", "logp", "ref"}, dst, logp, ref)
		if err != nil {
			return err
		}
		if kind == divergence.Full {
			rows := dst.Len()
			if rows == 0 {
				return nil
			}
			return b.launch(op, "divergence_full_fwd_f32", rows, 1, blockSize, 0,
				ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), intArg(logp.Dim(-1)))
		}
		return b.elementwise(op, "divergence_penalty_fwd_f32", dst.Len(), ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), intArg(dst.Len()), intArg(int(kind)))
	})
}

// PenaltyBackward is the device kernel of divergence.PenaltyBackward (every kind).
func (b deviceKernels) PenaltyBackward(dlogp *tensor.Tensor, in divergence.PenaltyGrad) error {
	const op = "divergence.PenaltyBackward"
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"dlogp", "LogProbs", "Ref", "DPenalty"}, dlogp, in.LogProbs, in.Ref, in.DPenalty)
		if err != nil {
			return err
		}
		v := 1
		if in.Kind == divergence.Full {
			v = in.LogProbs.Dim(-1)
		}
		return b.elementwise(op, "divergence_penalty_bwd_f32", dlogp.Len(), ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), ptrArg(p[3]),
			intArg(dlogp.Len()), intArg(v), intArg(int(in.Kind)))
	})
}

// PerceptionScore is the device kernel of divergence.PerceptionScore.
func (b deviceKernels) PerceptionScore(dst, old, aug *tensor.Tensor) error {
	const op = "divergence.PerceptionScore"
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"dst", "old", "aug"}, dst, old, aug)
		if err != nil {
			return err
		}
		return b.elementwise(op, "divergence_perception_fwd_f32", dst.Len(), ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), intArg(dst.Len()))
	})
}

// Rewards is the device kernel of divergence.Rewards.
func (b deviceKernels) Rewards(dst, scores, logp, ref *tensor.Tensor, klRatio float32) error {
	const op = "divergence.Rewards"
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"dst", "scores", "logp", "ref"}, dst, scores, logp, ref)
		if err != nil {
			return err
		}
		return b.elementwise(op, "divergence_rewards_fwd_f32", dst.Len(), ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), ptrArg(p[3]), intArg(dst.Len()), f32Arg(klRatio))
	})
}
