package advantage

import (
	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/internal/parallel"
	"github.com/mtrl-go/mtrl/tensor"
)

// GAEKernel is implemented by backends that compute GAE on the device. Arguments are validated
// before the call; returns may be nil.
type GAEKernel interface {
	GAE(adv, returns, rewards, values, mask *tensor.Tensor, gamma, lam float64) error
}

// GAE computes generalised advantage estimation (compute_gae_advantage_return,
// docs/semantics.md#gae) for [B, T] float32 rewards, values and 0/1 mask.
//
// Each row runs its own masked recurrence from t = T-1 down to 0, starting from nv = lg = 0:
//
//	delta = r[t] + gamma*nv - v[t];  g = delta + (gamma*lam)*lg
//	if m[t] != 0 { nv = v[t]; lg = g }
//	raw[t] = lg
//
// so masked positions (right padding, holes/observation tokens) carry the state of the next
// valid token; trailing padding gets raw = 0 and an all-padding row is 0 everywhere. Then
// returns = raw + values and adv = masked_whiten(raw, mask) with one mean and variance over the
// whole batch; every position is whitened, masked or not, as in the reference.
//
// gamma and lam must lie in [0, 1]. returns may be nil. Outputs must not alias the inputs. An
// empty batch ([0, T] or [B, 0]) is valid and writes nothing.
//
// Numerics follow the reference's float32 order: gamma*lam is formed in float64 then rounded to
// float32, gamma*nv uses float32(gamma).
func gae(adv, returns, rewards, values, mask *tensor.Tensor, gamma, lam float64) error {
	const op = "advantage.GAE"
	if err := checkTokens(op, adv, returns, rewards, mask); err != nil {
		return err
	}
	if values == nil {
		return tensor.Errorf(tensor.ErrParam, op, "values", "is required (nil)")
	}
	if err := tensor.CheckSameShape(op, "rewards", rewards, "values", values); err != nil {
		return err
	}
	if err := tensor.CheckDType(op, "values", values, tensor.Float32); err != nil {
		return err
	}
	if err := tensor.CheckSameBackend(op, []string{"rewards", "values"}, rewards, values); err != nil {
		return err
	}
	if err := tensor.CheckUnit(op, "gamma", gamma); err != nil {
		return err
	}
	if err := tensor.CheckUnit(op, "lam", lam); err != nil {
		return err
	}
	if rewards.Len() == 0 {
		return nil
	}
	if k, ok := tensor.KernelOf[GAEKernel](rewards.Backend()); ok {
		return k.GAE(adv, returns, rewards, values, mask, gamma, lam)
	}
	return tensor.OnHost(2, []*tensor.Tensor{adv, returns, rewards, values, mask}, func(h []*tensor.Tensor) error {
		gaeHost(f32s(h[0]), f32s(h[1]), f32s(h[2]), f32s(h[3]), f32s(h[4]), rewards.Dim(1), float32(gamma), float32(gamma*lam))
		return nil
	})
}

// gaeHost is the pure-Go GAE kernel on row-major [rows, cols] slices; ret may be nil. g is
// fl32(gamma) and gl is fl32(gamma*lam).
func gaeHost(adv, ret, r, v, m []float32, cols int, g, gl float32) {
	gaeRaw(adv, ret, r, v, m, cols, g, gl)
	hostops.MaskedWhiten(adv, adv, m)
}

// gaeRaw writes the raw (unwhitened) GAE into adv and raw + v into ret (when not nil).
func gaeRaw(adv, ret, r, v, m []float32, cols int, g, gl float32) {
	rows := len(r) / cols
	parallel.For(rows, rowGrain(cols), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			base := i * cols
			ri, vi, mi, ai := r[base:base+cols], v[base:base+cols], m[base:base+cols], adv[base:base+cols]
			var nv, lg float32
			for t := cols - 1; t >= 0; t-- {
				// ((r + g*nv) - v) + gl*lg; explicit conversions forbid fused multiply-adds.
				x := ri[t] + float32(g*nv) - vi[t] + float32(gl*lg)
				if mi[t] != 0 {
					nv, lg = vi[t], x
				}
				ai[t] = lg
			}
		}
		if ret != nil {
			for k := lo * cols; k < hi*cols; k++ {
				ret[k] = adv[k] + v[k]
			}
		}
	})
}
