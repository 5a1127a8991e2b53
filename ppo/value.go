package ppo

import (
	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/internal/parallel"
	"github.com/mtrl-go/mtrl/tensor"
)

// ValueConfig configures ValueLoss. Every field means what it says: the zero value clips with
// range 0 (vpreds are clipped to the old values, the reference's cliprange_value = 0) and
// averages per token. DefaultValueConfig gives EasyR1's cliprange_value 0.5.
type ValueConfig struct {
	// ClipRange is the reference's cliprange_value c >= 0 (+Inf disables the clip).
	ClipRange float64
	Agg       Agg
	// CheckFinite makes ValueLoss return an ErrNotFinite error when an input holds NaN or ±Inf.
	CheckFinite bool
}

// DefaultClipRangeValue is EasyR1's default cliprange_value.
const DefaultClipRangeValue = 0.5

// DefaultValueConfig returns EasyR1's defaults: ClipRange 0.5, token-mean aggregation.
func DefaultValueConfig() ValueConfig {
	return ValueConfig{ClipRange: DefaultClipRangeValue, Agg: Agg{Mode: Token}}
}

// Validate reports an ErrParam error for a negative or NaN ClipRange or a bad Agg.
func (c ValueConfig) Validate() error { return c.validate("ppo.ValueConfig.Validate") }

func (c ValueConfig) validate(op string) error {
	if !(c.ClipRange >= 0) {
		return tensor.Errorf(tensor.ErrParam, op, "ClipRange", "is %v, want a value >= 0", c.ClipRange)
	}
	return c.Agg.validate(op, "Agg")
}

// ValueInputs are the tensors of ValueLoss, all float32 [B, T] on one backend.
type ValueInputs struct {
	VPreds       *tensor.Tensor // current value predictions (the gradient is w.r.t. these)
	Returns      *tensor.Tensor // targets
	Values       *tensor.Tensor // old value predictions (the clip centre)
	ResponseMask *tensor.Tensor
}

// ValueResult is the outcome of ValueLoss.
type ValueResult struct {
	Loss       float32 // Grad.Scale * VFLoss
	VFLoss     float32 // the reference's vf_loss (unscaled)
	VFClipFrac float64 // masked_mean(l1 < l2, m)
	VPredMean  float64 // masked_mean(vpreds, m)
}

// Metrics returns the reference's metric dict: vf_clipfrac and vpred_mean.
func (r ValueResult) Metrics() map[string]float64 {
	return map[string]float64{"vf_clipfrac": r.VFClipFrac, "vpred_mean": r.VPredMean}
}

// ValueLossKernel is the optional backend kernel for ValueLoss. It receives validated tensors
// (grad.Dst may be nil), grad.Scale filled in (never 0) and a validated config.
type ValueLossKernel interface {
	ValueLoss(grad Grad, in ValueInputs, cfg ValueConfig) (ValueResult, error)
}

// ValueLoss computes the reference's compute_value_loss (docs/semantics.md#value-loss):
// vc = clamp(vpreds, values - c, values + c), l1 = (vpreds - returns)^2, l2 = (vc - returns)^2,
// vf_loss = 0.5 * average_loss(max(l1, l2), m). When grad.Dst is not nil it writes (or adds,
// with grad.Accumulate) grad.Scale * d vf_loss / d vpreds into it [B, T]: the clamp passes the gradient when
// vpreds lies inside the bounds, ends included, and a tie l1 == l2 splits it half and half as
// torch does. Masked-out tokens are skipped (gradient exactly 0).
func ValueLoss(grad Grad, in ValueInputs, cfg ValueConfig) (ValueResult, error) {
	const op = "ppo.ValueLoss"
	names := []string{"VPreds", "Returns", "Values", "ResponseMask", "grad.Dst"}
	ts := []*tensor.Tensor{in.VPreds, in.Returns, in.Values, in.ResponseMask, grad.Dst}
	if err := checkBT(op, names, 4, ts...); err != nil {
		return ValueResult{}, err
	}
	if err := cfg.validate(op); err != nil {
		return ValueResult{}, err
	}
	grad, err := grad.check(op)
	if err != nil {
		return ValueResult{}, err
	}
	if cfg.CheckFinite {
		for i := range 4 {
			if err := tensor.CheckFinite(op, names[i], ts[i]); err != nil {
				return ValueResult{}, err
			}
		}
	}
	if k, ok := tensor.KernelOf[ValueLossKernel](in.VPreds.Backend()); ok {
		return k.ValueLoss(grad, in, cfg)
	}
	var res ValueResult
	err = tensor.OnHost(1, []*tensor.Tensor{grad.Dst, in.VPreds, in.Returns, in.Values, in.ResponseMask}, func(h []*tensor.Tensor) error {
		s := make([][]float32, len(h))
		for i, t := range h {
			if t != nil {
				s[i], _ = t.Float32s()
			}
		}
		res, _ = valueHost(s[0], s[1], s[2], s[3], s[4], in.VPreds.Dim(0), in.VPreds.Dim(1), cfg, grad)
		return nil
	})
	return res, err
}

type valueRow struct{ sumL, sumV, clip, cnt float64 }

// valueHost is the pure-Go kernel of ValueLoss on row-major [rows, cols] slices; grad may be nil
// and opt gives the scale and accumulation. It also returns the unscaled loss in precision F.
func valueHost[F hostops.Float](grad, vp, ret, val, m []F, rows, cols int, cfg ValueConfig, opt Grad) (ValueResult, F) {
	c := F(cfg.ClipRange)
	scale := F(opt.scale())
	cnt := make([]float64, rows)
	grain := parallel.Grain(cols, 1<<13)
	maskCounts(cnt, m, cols, grain)
	w := make([]F, rows)
	aggWeights(w, cnt, cfg.Agg)
	stats := make([]valueRow, rows)
	parallel.For(rows, grain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			a, b := i*cols, (i+1)*cols
			var gr []F
			if grad != nil {
				gr = grad[a:b]
			}
			gw := scale * F(0.5) * w[i]
			var st valueRow
			for t, mw := range m[a:b] {
				if mw == 0 {
					if gr != nil && !opt.Accumulate {
						gr[t] = 0
					}
					continue
				}
				v, r, o := vp[a+t], ret[a+t], val[a+t]
				vc, pass := clampGrad(v, o-c, o+c)
				d1, d2 := v-r, vc-r
				l1, l2 := d1*d1, d2*d2
				g1, g2 := 2*d1, F(0)
				if pass {
					g2 = 2 * d2
				}
				var L, dL F
				switch {
				case l1 > l2:
					L, dL = l1, g1
				case l2 > l1:
					L, dL = l2, g2
				case l1 == l2:
					L, dL = l1, (g1+g2)/2
				default: // NaN
					L, dL = l1+l2, g1+g2
				}
				st.sumL += float64(L * mw)
				st.sumV += float64(v * mw)
				if l1 < l2 {
					st.clip += float64(mw)
				}
				if gr == nil {
					continue
				}
				g := gw * mw * dL
				if opt.Accumulate {
					gr[t] += g
				} else {
					gr[t] = g
				}
			}
			st.cnt = cnt[i]
			stats[i] = st
		}
	})
	sums := make([]float64, rows)
	var s, sv, sc float64
	for i, st := range stats {
		sums[i] = st.sumL
		s += st.cnt
		sv += st.sumV
		sc += st.clip
	}
	eps := F(DefaultEps)
	vf := F(0.5) * aggFinish[F](sums, cnt, cfg.Agg)
	return ValueResult{
		VFLoss:     float32(vf),
		Loss:       float32(vf * scale),
		VFClipFrac: float64(F(sc) / (F(s) + eps)),
		VPredMean:  float64(F(sv) / (F(s) + eps)),
	}, vf
}
