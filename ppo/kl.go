package ppo

import (
	"math"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/internal/parallel"
	"github.com/mtrl-go/mtrl/tensor"
)

// KLConfig configures KLLoss: the reference's use_kl_loss term
// kl_coef * average_loss(compute_kl(log_probs, ref_log_probs, kl_penalty), m, loss_avg_mode).
type KLConfig struct {
	Kind divergence.Kind // the reference's kl_penalty
	Coef float64         // kl_coef (finite; 0 gives a zero loss and gradient)
	Agg  Agg             // the reference uses loss_avg_mode here
}

// GradKernel is the optional backend kernel behind the elementwise gradient bookkeeping of
// KLLoss and EntropyPenalty, so that their [B, T] (or [B, T, V]) gradients stay on the device.
// The tensors are validated, float32, and every operation is one float32 operation per
// element, the same as the pure-Go path's.
type GradKernel interface {
	// ScaleGrad multiplies x by f in place: x[i] *= f.
	ScaleGrad(x *tensor.Tensor, f float32) error
	// AddGrad adds src into dst of the same shape: dst[i] += src[i].
	AddGrad(dst, src *tensor.Tensor) error
	// MaskGrad writes x[i] = f*m[i] where m[i] != 0 and 0 elsewhere into grad (mask's shape),
	// or adds x[i] into it with accumulate.
	MaskGrad(grad, mask *tensor.Tensor, f float32, accumulate bool) error
}

// KLResult is the outcome of KLLoss.
type KLResult struct {
	// Loss is Grad.Scale * Coef * KL, the term added to the micro-batch loss.
	Loss float32
	// KL is average_loss(penalty, m), the reference's actor/kl_loss metric (before the coef).
	KL float32
}

// KLLoss computes the KL penalty term of the actor loss
// (docs/semantics.md#kl-loss-and-entropy-penalty) and, when grad.Dst is not nil, writes (or adds,
// with grad.Accumulate) grad.Scale * Coef * d average_loss / d logp into it (logp's shape).
//
// For the token kinds (kl, abs, mse, low_var_kl), logp, ref, mask and grad are float32 [B, T].
// For divergence.Full, logp, ref and grad are full log-distributions [B, T, V] and mask is
// [B, T]. The per-token penalty and its gradient come from divergence.Penalty and
// divergence.PenaltyBackward; the aggregation weights are those of Agg.LossGrad. It allocates two
// [B, T] temporaries (one [B, T, V] for Full with Accumulate) on logp's backend.
func KLLoss(grad Grad, logp, ref, mask *tensor.Tensor, cfg KLConfig) (KLResult, error) {
	const op = "ppo.KLLoss"
	if err := checkBT(op, []string{"mask"}, 1, mask); err != nil {
		return KLResult{}, err
	}
	if logp == nil {
		return KLResult{}, tensor.Errorf(tensor.ErrShape, op, "logp", "is nil")
	}
	want := []int{mask.Dim(0), mask.Dim(1)}
	if cfg.Kind == divergence.Full {
		want = append(want, -1)
	}
	if err := tensor.CheckShape(op, "logp", logp, want...); err != nil {
		return KLResult{}, err
	}
	if err := tensor.CheckSameShape(op, "logp", logp, "ref", ref); err != nil {
		return KLResult{}, err
	}
	dst := grad.Dst
	if dst != nil {
		if err := tensor.CheckSameShape(op, "logp", logp, "grad.Dst", dst); err != nil {
			return KLResult{}, err
		}
		if err := tensor.CheckDType(op, "grad.Dst", dst, tensor.Float32); err != nil {
			return KLResult{}, err
		}
	}
	for _, a := range []struct {
		n string
		t *tensor.Tensor
	}{{"logp", logp}, {"ref", ref}} {
		if err := tensor.CheckDType(op, a.n, a.t, tensor.Float32); err != nil {
			return KLResult{}, err
		}
	}
	if err := tensor.CheckSameBackend(op, []string{"mask", "logp", "ref", "grad.Dst"}, mask, logp, ref, dst); err != nil {
		return KLResult{}, err
	}
	if math.IsNaN(cfg.Coef) || math.IsInf(cfg.Coef, 0) {
		return KLResult{}, tensor.Errorf(tensor.ErrParam, op, "Coef", "is %v, want a finite value", cfg.Coef)
	}
	if err := cfg.Agg.validate(op, "Agg"); err != nil {
		return KLResult{}, err
	}
	grad, err := grad.check(op)
	if err != nil {
		return KLResult{}, err
	}
	pen, err := tensor.NewLike(mask, tensor.Float32)
	if err != nil {
		return KLResult{}, err
	}
	defer pen.Release()
	if err := divergence.Penalty(pen, logp, ref, cfg.Kind); err != nil {
		return KLResult{}, err
	}
	var aggGrad *tensor.Tensor
	if dst != nil {
		if aggGrad, err = tensor.NewLike(mask, tensor.Float32); err != nil {
			return KLResult{}, err
		}
		defer aggGrad.Release()
	}
	kl, err := averageLoss(op, aggGrad, pen, mask, cfg.Agg)
	if err != nil {
		return KLResult{}, err
	}
	coef := float32(cfg.Coef)
	scale := float32(grad.Scale)
	res := KLResult{KL: kl, Loss: coef * kl * scale}
	if dst == nil {
		return res, nil
	}
	// d loss / d penalty = Scale * Coef * the aggregation weights, then through the penalty.
	f := coef * scale
	gk, onDevice := tensor.KernelOf[GradKernel](mask.Backend())
	if onDevice {
		if err := gk.ScaleGrad(aggGrad, f); err != nil {
			return KLResult{}, err
		}
	} else if err := tensor.OnHost(1, []*tensor.Tensor{aggGrad}, func(h []*tensor.Tensor) error {
		a, _ := h[0].Float32s()
		for j := range a {
			a[j] *= f
		}
		return nil
	}); err != nil {
		return KLResult{}, err
	}
	in := divergence.PenaltyGrad{LogProbs: logp, Ref: ref, DPenalty: aggGrad, Kind: cfg.Kind}
	if !grad.Accumulate {
		return res, divergence.PenaltyBackward(dst, in)
	}
	pg, err := tensor.NewLike(logp, tensor.Float32)
	if err != nil {
		return KLResult{}, err
	}
	defer pg.Release()
	if err := divergence.PenaltyBackward(pg, in); err != nil {
		return KLResult{}, err
	}
	if onDevice {
		return res, gk.AddGrad(dst, pg)
	}
	return res, tensor.OnHost(1, []*tensor.Tensor{dst, pg}, func(h []*tensor.Tensor) error {
		g, _ := h[0].Float32s()
		p, _ := h[1].Float32s()
		for i, x := range p {
			g[i] += x
		}
		return nil
	})
}

// EntropyConfig configures EntropyPenalty.
type EntropyConfig struct {
	Coef float64 // the reference's entropy_penalty_coef (finite)
}

// EntropyPenalty computes the reference's entropy penalty Coef * (-masked_mean(logp, m))
// (docs/semantics.md#kl-loss-and-entropy-penalty; always token-averaged, whatever the loss
// aggregation) and returns it times grad.Scale. When grad.Dst is not nil it writes (or adds, with
// grad.Accumulate) -grad.Scale * Coef * m / (S + 1e-8) into it. logp, mask and grad.Dst are
// float32 [B, T].
// Minimising the penalty lowers -log p on sampled tokens, i.e. sharpens the policy (it lowers
// entropy).
func EntropyPenalty(grad Grad, logp, mask *tensor.Tensor, cfg EntropyConfig) (float32, error) {
	const op = "ppo.EntropyPenalty"
	if err := checkBT(op, []string{"logp", "mask", "grad.Dst"}, 2, logp, mask, grad.Dst); err != nil {
		return 0, err
	}
	if math.IsNaN(cfg.Coef) || math.IsInf(cfg.Coef, 0) {
		return 0, tensor.Errorf(tensor.ErrParam, op, "Coef", "is %v, want a finite value", cfg.Coef)
	}
	grad, err := grad.check(op)
	if err != nil {
		return 0, err
	}
	if gk, ok := tensor.KernelOf[GradKernel](mask.Backend()); ok {
		sum, n, err := tensor.MaskedSum(logp, mask)
		if err != nil {
			return 0, err
		}
		loss, f := entropyPlan[float32](sum, n, cfg.Coef, grad.Scale)
		if grad.Dst == nil {
			return loss, nil
		}
		return loss, gk.MaskGrad(grad.Dst, mask, f, grad.Accumulate)
	}
	var loss float32
	err = tensor.OnHost(1, []*tensor.Tensor{grad.Dst, logp, mask}, func(h []*tensor.Tensor) error {
		var g []float32
		if h[0] != nil {
			g, _ = h[0].Float32s()
		}
		lp, _ := h[1].Float32s()
		m, _ := h[2].Float32s()
		loss = entropyHost(g, lp, m, cfg, grad)
		return nil
	})
	return loss, err
}

// entropyHost is the pure-Go kernel of EntropyPenalty; g may be nil and opt gives the scale and
// accumulation.
func entropyHost[F hostops.Float](g, lp, m []F, cfg EntropyConfig, opt Grad) F {
	var s, n float64
	for i, w := range m {
		if w != 0 {
			s += float64(lp[i] * w)
			n += float64(w)
		}
	}
	loss, f := entropyPlan[F](s, n, cfg.Coef, opt.scale())
	if g != nil {
		parallel.For(len(m), 1<<15, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				x := F(0)
				if m[i] != 0 {
					x = f * m[i]
				}
				if opt.Accumulate {
					g[i] += x
				} else {
					g[i] = x
				}
			}
		})
	}
	return loss
}

// entropyPlan returns EntropyPenalty's scaled loss and gradient factor from the float64 masked
// sum s of logp and the mask sum n (shared by the pure-Go kernel and GradKernel backends).
func entropyPlan[F hostops.Float](s, n, coef64, scale64 float64) (loss, f F) {
	coef, scale := F(coef64), F(scale64)
	denom := F(n) + F(DefaultEps)
	loss = coef * -(F(s) / denom)
	f = -(scale * coef) / denom
	return loss * scale, f
}
