package advantage

import (
	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/internal/parallel"
	"github.com/mtrl-go/mtrl/tensor"
)

// ReinforcePlusPlusKernel is implemented by backends that compute REINFORCE++ on the device.
// Arguments are validated before the call; returns may be nil.
type ReinforcePlusPlusKernel interface {
	ReinforcePlusPlus(adv, returns, rewards, mask *tensor.Tensor, gamma float64) error
}

// ReinforcePlusPlus computes the REINFORCE++ advantage
// (compute_reinforce_plus_plus_outcome_advantage, docs/semantics.md#reinforce) for float32 [B, T]
// rewards and 0/1 mask. Per row, from t = T-1 down to 0:
//
//	run = r[t] + gamma*run;  returns[t] = run;  run = run * m[t]
//
// (the running return resets after EOS), then adv = masked_whiten(returns, mask) with one mean and
// variance over the whole batch; every position is whitened, masked or not, as in the reference.
// gamma must lie in [0, 1] and is rounded to float32. returns may be nil. Outputs must not alias
// the inputs. An empty batch is valid and writes nothing.
func reinforcePlusPlus(adv, returns, rewards, mask *tensor.Tensor, gamma float64) error {
	const op = "advantage.ReinforcePlusPlus"
	if err := checkTokens(op, adv, returns, rewards, mask); err != nil {
		return err
	}
	if err := tensor.CheckUnit(op, "gamma", gamma); err != nil {
		return err
	}
	if rewards.Len() == 0 {
		return nil
	}
	if k, ok := tensor.KernelOf[ReinforcePlusPlusKernel](rewards.Backend()); ok {
		return k.ReinforcePlusPlus(adv, returns, rewards, mask, gamma)
	}
	return tensor.OnHost(2, []*tensor.Tensor{adv, returns, rewards, mask}, func(h []*tensor.Tensor) error {
		reinforceHost(f32s(h[0]), f32s(h[1]), f32s(h[2]), f32s(h[3]), rewards.Dim(1), float32(gamma))
		return nil
	})
}

// reinforceHost is the pure-Go REINFORCE++ kernel on row-major [rows, cols] slices; ret may be nil.
func reinforceHost(adv, ret, r, m []float32, cols int, g float32) {
	rows := len(r) / cols
	parallel.For(rows, rowGrain(cols), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			base := i * cols
			ri, mi, ai := r[base:base+cols], m[base:base+cols], adv[base:base+cols]
			var run float32
			for t := cols - 1; t >= 0; t-- {
				run = ri[t] + float32(g*run)
				ai[t] = run
				run *= mi[t]
			}
			if ret != nil {
				copy(ret[base:base+cols], ai)
			}
		}
	})
	hostops.MaskedWhiten(adv, adv, m)
}
