//go:build cuda

package cuda

import (
	"math"
	"unsafe"

	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"gorgonia.org/cu"
)

var (
	_ ppo.PolicyLossKernel  = deviceKernels{}
	_ ppo.ValueLossKernel   = deviceKernels{}
	_ ppo.AverageLossKernel = deviceKernels{}
	_ ppo.GradKernel        = deviceKernels{}
)

// ScaleGrad is the device kernel of ppo.KLLoss's gradient scaling: x *= f (ppo_scale_fwd_f32).
func (b deviceKernels) ScaleGrad(x *tensor.Tensor, f float32) error {
	const op = "ppo.ScaleGrad"
	return b.do(op, func() error {
		p, err := b.ptrOf(op, "x", x)
		if err != nil {
			return err
		}
		n := x.Len()
		return b.elementwise(op, "ppo_scale_fwd_f32", n, ptrArg(p), intArg(n), f32Arg(f))
	})
}

// AddGrad is the device kernel of the Accumulate option of ppo.KLLoss: dst += src
// (ppo_add_fwd_f32).
func (b deviceKernels) AddGrad(dst, src *tensor.Tensor) error {
	const op = "ppo.AddGrad"
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"dst", "src"}, dst, src)
		if err != nil {
			return err
		}
		n := dst.Len()
		return b.elementwise(op, "ppo_add_fwd_f32", n, ptrArg(p[0]), ptrArg(p[1]), intArg(n))
	})
}

// MaskGrad is the device kernel of ppo.EntropyPenalty's gradient: f * m where m != 0, written
// or added (ppo_mask_grad_fwd_f32).
func (b deviceKernels) MaskGrad(grad, mask *tensor.Tensor, f float32, accumulate bool) error {
	const op = "ppo.MaskGrad"
	acc := 0
	if accumulate {
		acc = 1
	}
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"grad", "mask"}, grad, mask)
		if err != nil {
			return err
		}
		n := grad.Len()
		return b.elementwise(op, "ppo_mask_grad_fwd_f32", n, ptrArg(p[0]), ptrArg(p[1]), intArg(n), f32Arg(f), intArg(acc))
	})
}

// The PPO losses run in two or three launches: ppo_rowsums_fwd_f32 (per-row mask sums, and the
// masked value sums for Agg.Loss), then on the host the aggregation weights (uploaded as
// float32 [B]), then the per-row loss kernel, whose float64 row sums the host combines in row
// order with ppo.Agg.Weights and Finish, the pure-Go kernels' own plan and reduction.

// ppoScratch lays out the scratch of one PPO call: rowsums [2B] float64, stats [per*B] float64,
// w [B] float32.
type ppoScratch struct{ sums, stats, w cu.DevicePtr }

func (b *Backend) ppoScratch(op string, rows, per int) (ppoScratch, error) {
	n := int64(rows)
	p, err := b.scratchPtr(op, 16*n+8*int64(per)*n+4*n)
	if err != nil {
		return ppoScratch{}, err
	}
	return ppoScratch{sums: p, stats: p + cu.DevicePtr(16*n), w: p + cu.DevicePtr(16*n+8*int64(per)*n)}, nil
}

// rowSums launches ppo_rowsums_fwd_f32 (pv may be 0 for counts only) and returns the per-row
// value sums and mask sums.
func (b *Backend) rowSums(op string, out, pv, pm cu.DevicePtr, rows, cols int) (sums, cnt []float64, err error) {
	if err := b.launch(op, "ppo_rowsums_fwd_f32", rows, 1, blockSize, 0, ptrArg(out), ptrArg(pv), ptrArg(pm), intArg(cols)); err != nil {
		return nil, nil, err
	}
	raw := make([]float64, 2*rows)
	if err := b.download(op, unsafe.Pointer(&raw[0]), out, 16*rows); err != nil {
		return nil, nil, err
	}
	sums, cnt = make([]float64, rows), make([]float64, rows)
	for i := range sums {
		sums[i], cnt[i] = raw[2*i], raw[2*i+1]
	}
	return sums, cnt, nil
}

// weights computes the aggregation weights and uploads them to p.
func (b *Backend) weights(op string, p cu.DevicePtr, cnt []float64, agg ppo.Agg) error {
	w := make([]float32, len(cnt))
	agg.Weights(w, cnt)
	return b.upload(op, p, unsafe.Pointer(&w[0]), 4*len(w))
}

// downloadStats copies rows*per float64 row statistics to the host.
func (b *Backend) downloadStats(op string, p cu.DevicePtr, rows, per int) ([]float64, error) {
	st := make([]float64, rows*per)
	if err := b.download(op, unsafe.Pointer(&st[0]), p, 8*rows*per); err != nil {
		return nil, err
	}
	return st, nil
}

// AverageLoss is the device kernel of ppo's Agg.Loss / LossGrad (dst may be nil).
func (b deviceKernels) AverageLoss(dst, values, mask *tensor.Tensor, agg ppo.Agg) (float32, error) {
	const op = "ppo.Agg.Loss"
	rows, cols := values.Dim(0), values.Dim(1)
	if rows == 0 {
		return agg.Finish(nil, nil), nil
	}
	var loss float32
	err := b.do(op, func() error {
		p, err := b.ptrs(op, []string{"dst", "values", "mask"}, dst, values, mask)
		if err != nil {
			return err
		}
		sc, err := b.ppoScratch(op, rows, 0)
		if err != nil {
			return err
		}
		sums, cnt, err := b.rowSums(op, sc.sums, p[1], p[2], rows, cols)
		if err != nil {
			return err
		}
		loss = agg.Finish(sums, cnt)
		if dst == nil {
			return nil
		}
		if err := b.weights(op, sc.w, cnt, agg); err != nil {
			return err
		}
		n := rows * cols
		return b.elementwise(op, "ppo_average_bwd_f32", n, ptrArg(p[0]), ptrArg(sc.w), ptrArg(p[2]), intArg(n), intArg(cols))
	})
	return loss, err
}

// PolicyLoss is the device kernel of ppo.PolicyLoss: every loss type, aggregation mode, token
// mask and gradient option; one block per row.
func (b deviceKernels) PolicyLoss(grad ppo.Grad, in ppo.PolicyInputs, cfg ppo.PolicyConfig) (ppo.PolicyResult, error) {
	const op = "ppo.PolicyLoss"
	rows, cols := in.LogProbs.Dim(0), in.LogProbs.Dim(1)
	// The constants of ppo's policyHost, at float32.
	clo := float32(math.Log(1 - cfg.ClipLow))
	chi := float32(math.Log(1 + cfg.ClipHigh))
	scale := float32(grad.Scale)
	args := []arg{
		intArg(cols), intArg(int(cfg.LossType)), boolArg(grad.Accumulate), f32Arg(scale),
		f32Arg(clo), f32Arg(chi), f32Arg(hostops.Exp(clo)), f32Arg(hostops.Exp(chi)),
		f32Arg(hostops.Exp(float32(-20))), f32Arg(hostops.Exp(float32(20))), f32Arg(float32(cfg.ClipDual)),
		f32Arg(float32(cfg.TauPos)), f32Arg(float32(cfg.TauNeg)), f32Arg(float32(4 / cfg.TauPos)), f32Arg(float32(4 / cfg.TauNeg)),
	}
	const per = 5
	var stats, cnt []float64
	if rows > 0 {
		err := b.do(op, func() error {
			p, err := b.ptrs(op, []string{"grad", "OldLogProbs", "LogProbs", "Advantages", "ResponseMask", "TokenMask"},
				grad.Dst, in.OldLogProbs, in.LogProbs, in.Advantages, in.ResponseMask, in.TokenMask)
			if err != nil {
				return err
			}
			sc, err := b.ppoScratch(op, rows, per)
			if err != nil {
				return err
			}
			if _, cnt, err = b.rowSums(op, sc.sums, 0, p[4], rows, cols); err != nil {
				return err
			}
			if grad.Dst != nil {
				if err := b.weights(op, sc.w, cnt, cfg.Agg); err != nil {
					return err
				}
			}
			all := append([]arg{ptrArg(sc.stats), ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), ptrArg(p[3]), ptrArg(p[4]), ptrArg(p[5]), ptrArg(sc.w)}, args...)
			if err := b.launch(op, "ppo_policy_fwd_f32", rows, 1, blockSize, 0, all...); err != nil {
				return err
			}
			stats, err = b.downloadStats(op, sc.stats, rows, per)
			return err
		})
		if err != nil {
			return ppo.PolicyResult{}, err
		}
	}
	// Combine in row order, as policyHost.
	sums := make([]float64, rows)
	negLP := make([]float64, rows)
	var s, kl, chiN, cloN float64
	for i := range rows {
		st := stats[per*i : per*(i+1)]
		sums[i], negLP[i] = st[0], st[1]
		s += cnt[i]
		kl += st[2]
		chiN += st[3]
		cloN += st[4]
	}
	pg := cfg.Agg.Finish(sums, cnt)
	ent := cfg.Agg.Finish(negLP, cnt)
	const eps = float32(ppo.DefaultEps)
	mean := func(x float64) float64 { return float64(float32(x) / (float32(s) + eps)) }
	res := ppo.PolicyResult{
		PGLoss:      pg,
		Loss:        pg * scale,
		PPOKL:       mean(kl),
		EntropyLoss: float64(ent * float32(s) / (float32(s) + eps)),
		LossType:    cfg.LossType,
	}
	if cfg.LossType != ppo.CISPO && cfg.LossType != ppo.SAPO {
		res.ClipFracHigher = mean(chiN)
		res.ClipFracLower = mean(cloN)
	}
	return res, nil
}

// ValueLoss is the device kernel of ppo.ValueLoss; one block per row.
func (b deviceKernels) ValueLoss(grad ppo.Grad, in ppo.ValueInputs, cfg ppo.ValueConfig) (ppo.ValueResult, error) {
	const op = "ppo.ValueLoss"
	rows, cols := in.VPreds.Dim(0), in.VPreds.Dim(1)
	scale := float32(grad.Scale)
	const per = 3
	var stats, cnt []float64
	if rows > 0 {
		err := b.do(op, func() error {
			p, err := b.ptrs(op, []string{"grad", "VPreds", "Returns", "Values", "ResponseMask"},
				grad.Dst, in.VPreds, in.Returns, in.Values, in.ResponseMask)
			if err != nil {
				return err
			}
			sc, err := b.ppoScratch(op, rows, per)
			if err != nil {
				return err
			}
			if _, cnt, err = b.rowSums(op, sc.sums, 0, p[4], rows, cols); err != nil {
				return err
			}
			if grad.Dst != nil {
				if err := b.weights(op, sc.w, cnt, cfg.Agg); err != nil {
					return err
				}
			}
			if err := b.launch(op, "ppo_value_fwd_f32", rows, 1, blockSize, 0,
				ptrArg(sc.stats), ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), ptrArg(p[3]), ptrArg(p[4]), ptrArg(sc.w),
				intArg(cols), boolArg(grad.Accumulate), f32Arg(scale), f32Arg(float32(cfg.ClipRange))); err != nil {
				return err
			}
			stats, err = b.downloadStats(op, sc.stats, rows, per)
			return err
		})
		if err != nil {
			return ppo.ValueResult{}, err
		}
	}
	sums := make([]float64, rows)
	var s, sv, sc float64
	for i := range rows {
		sums[i] = stats[per*i]
		s += cnt[i]
		sv += stats[per*i+1]
		sc += stats[per*i+2]
	}
	const eps = float32(ppo.DefaultEps)
	vf := float32(0.5) * cfg.Agg.Finish(sums, cnt)
	return ppo.ValueResult{
		VFLoss:     vf,
		Loss:       vf * scale,
		VFClipFrac: float64(float32(sc) / (float32(s) + eps)),
		VPredMean:  float64(float32(sv) / (float32(s) + eps)),
	}, nil
}
