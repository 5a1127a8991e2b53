package advantage

import (
	"github.com/mtrl-go/mtrl/internal/parallel"
	"github.com/mtrl-go/mtrl/tensor"
)

// ReMaxKernel is implemented by backends that compute ReMax on the device. Arguments are
// validated before the call; returns may be nil.
type ReMaxKernel interface {
	ReMax(adv, returns, rewards, mask, baselines *tensor.Tensor) error
}

// ReMax computes the ReMax advantage (compute_remax_outcome_advantage, docs/semantics.md#remax) for
// float32 [B, T] rewards and 0/1 mask and float32 [B] reward baselines (the greedy rollout's
// reward):
//
//	adv[i,t]     = (score_i - baselines[i]) * m[i,t],  score_i = sum_t r[i,t] over all positions
//	returns[i,t] = sum_{s >= t} r[i,s]*m[i,s]
//
// The advantage is per row: the reference broadcasts the [B] vector along the wrong axis for B > 1
// (docs/semantics.md#remax-score-broadcast); this is the corrected form the vectors encode. The
// score and the reverse cumulative sum are accumulated in float64 (as torch's CPU cumsum does) and
// rounded to float32. returns may be nil. Outputs must not alias the inputs. An empty batch is
// valid and writes nothing.
func reMax(adv, returns, rewards, mask, baselines *tensor.Tensor) error {
	const op = "advantage.ReMax"
	if err := checkTokens(op, adv, returns, rewards, mask); err != nil {
		return err
	}
	if err := checkRowVector(op, "baselines", baselines, rewards, tensor.Float32); err != nil {
		return err
	}
	if rewards.Len() == 0 {
		return nil
	}
	if k, ok := tensor.KernelOf[ReMaxKernel](rewards.Backend()); ok {
		return k.ReMax(adv, returns, rewards, mask, baselines)
	}
	return tensor.OnHost(2, []*tensor.Tensor{adv, returns, rewards, mask, baselines}, func(h []*tensor.Tensor) error {
		remaxHost(f32s(h[0]), f32s(h[1]), f32s(h[2]), f32s(h[3]), f32s(h[4]), rewards.Dim(1))
		return nil
	})
}

// remaxHost is the pure-Go ReMax kernel on row-major [rows, cols] slices; ret may be nil.
func remaxHost(adv, ret, r, m, baselines []float32, cols int) {
	parallel.For(len(baselines), rowGrain(cols), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			base := i * cols
			ri, mi, ai := r[base:base+cols], m[base:base+cols], adv[base:base+cols]
			a := rowSum(ri) - baselines[i]
			for t, w := range mi {
				ai[t] = a * w
			}
			if ret != nil {
				rt := ret[base : base+cols]
				var run float64
				for t := cols - 1; t >= 0; t-- {
					run += float64(ri[t] * mi[t])
					rt[t] = float32(run)
				}
			}
		}
	})
}
