package divergence

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/parallel"
	"github.com/mtrl-go/mtrl/tensor"
)

// RewardsKernel is the optional backend kernel for Rewards.
type RewardsKernel interface {
	Rewards(dst, scores, logp, ref *tensor.Tensor, klRatio float32) error
}

// Rewards writes the KL-penalised token rewards of compute_rewards (docs/semantics.md#kl-rewards)
// into dst: dst = scores - (logp - ref) * klRatio, in float32 (the reference rounds kl_ratio to
// float32 when it meets the tensors). All four tensors are float32 of one shape (usually [B, T]) on
// one backend; dst may alias any input. klRatio must be finite.
func Rewards(dst, scores, logp, ref *tensor.Tensor, klRatio float32) error {
	const op = "divergence.Rewards"
	if err := tensor.CheckSameShape(op, "scores", scores, "logp", logp); err != nil {
		return err
	}
	if err := tensor.CheckSameShape(op, "scores", scores, "ref", ref); err != nil {
		return err
	}
	if err := tensor.CheckSameShape(op, "scores", scores, "dst", dst); err != nil {
		return err
	}
	names := []string{"dst", "scores", "logp", "ref"}
	ts := []*tensor.Tensor{dst, scores, logp, ref}
	for i, t := range ts {
		if err := tensor.CheckDType(op, names[i], t, tensor.Float32); err != nil {
			return err
		}
	}
	if err := tensor.CheckSameBackend(op, names, ts...); err != nil {
		return err
	}
	if math.IsNaN(float64(klRatio)) || math.IsInf(float64(klRatio), 0) {
		return tensor.Errorf(tensor.ErrParam, op, "klRatio", "is %v, want a finite value", klRatio)
	}
	if k, ok := tensor.KernelOf[RewardsKernel](scores.Backend()); ok {
		return k.Rewards(dst, scores, logp, ref, klRatio)
	}
	return tensor.OnHost(1, ts, func(h []*tensor.Tensor) error {
		d, _ := h[0].Float32s()
		s, _ := h[1].Float32s()
		lp, _ := h[2].Float32s()
		rf, _ := h[3].Float32s()
		parallel.For(len(d), 1<<15, func(lo, hi int) {
			rewardsKernel(d[lo:hi], s[lo:hi], lp[lo:hi], rf[lo:hi], klRatio)
		})
		return nil
	})
}

func rewardsKernel(dst, scores, lp, ref []float32, klRatio float32) {
	n := len(dst)
	scores, lp, ref = scores[:n], lp[:n], ref[:n]
	for i := range dst {
		kl := lp[i] - ref[i]
		dst[i] = scores[i] - kl*klRatio
	}
}
