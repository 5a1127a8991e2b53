package tensor

import (
	"math"
	"strconv"

	"github.com/mtrl-go/mtrl/internal/nnref"
)

// AdamWConfig holds torch.optim.AdamW's hyper-parameters (amsgrad and maximize off).
type AdamWConfig struct {
	LR           float64 // learning rate, >= 0
	Beta1, Beta2 float64 // moment decays, in [0, 1)
	Eps          float64 // added to the denominator, >= 0
	WeightDecay  float64 // decoupled weight decay, >= 0
}

// DefaultAdamWConfig returns torch.optim.AdamW's defaults with learning rate lr: betas (0.9,
// 0.999), eps 1e-8, weight_decay 0.01.
func DefaultAdamWConfig(lr float64) AdamWConfig {
	return AdamWConfig{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
}

// AdamWParams are the tensors of one parameter for AdamWStep, all float32 of one shape.
type AdamWParams struct {
	// Param is the float32 master copy, updated in place.
	Param, Grad *Tensor
	// ExpAvg and ExpAvgSq are the first and second moments (zero before the first step),
	// updated in place.
	ExpAvg, ExpAvgSq *Tensor
	// ParamBF16, when set (bfloat16, Param's shape), receives the updated parameter rounded to
	// bfloat16: the copy a bfloat16 model computes with.
	ParamBF16 *Tensor
}

// OptimKernel is implemented by backends with their own optimizer step and gradient-norm
// reductions.
type OptimKernel interface {
	AdamWStep(p AdamWParams, step int, cfg AdamWConfig) error
	SumSquares(t *Tensor) (float64, error)
	Scale(t *Tensor, c float32) error
}

// AdamWStep applies one step of torch.optim.AdamW to p; step is the step count including this
// one (1 for the first), which sets the bias corrections. The update is torch's single-tensor
// algorithm (the one it runs on the CPU) in its order of operations, with the scalars computed
// in float64 and rounded to float32 where torch passes them to a float32 kernel:
//
//	param *= 1 − lr·wd;  m += (1 − β1)·(g − m);  v = v·β2 + (1 − β2)·g·g
//	param += −(lr/(1 − β1^step))·m / (sqrt(v)/sqrt(1 − β2^step) + eps)
//
// torch's vectorized kernels fuse some multiply-adds, so results agree to a few float32 ulp.
func AdamWStep(p AdamWParams, step int, cfg AdamWConfig) error {
	const op = "tensor.AdamWStep"
	names := []string{"Param", "Grad", "ExpAvg", "ExpAvgSq"}
	ts := []*Tensor{p.Param, p.Grad, p.ExpAvg, p.ExpAvgSq}
	if err := checkElementwise(op, names, ts...); err != nil {
		return err
	}
	if p.ParamBF16 != nil {
		if err := CheckSameShape(op, "Param", p.Param, "ParamBF16", p.ParamBF16); err != nil {
			return err
		}
		if err := CheckDType(op, "ParamBF16", p.ParamBF16, BFloat16); err != nil {
			return err
		}
		if err := CheckSameBackend(op, []string{"Param", "ParamBF16"}, p.Param, p.ParamBF16); err != nil {
			return err
		}
	}
	if step < 1 {
		return Errorf(ErrParam, op, "step", "is %d, want the step count including this step (>= 1)", step)
	}
	for _, c := range []struct {
		name     string
		v        float64
		lo, hi   float64
		openHigh bool
	}{{"cfg.LR", cfg.LR, 0, math.Inf(1), true}, {"cfg.Beta1", cfg.Beta1, 0, 1, true},
		{"cfg.Beta2", cfg.Beta2, 0, 1, true}, {"cfg.Eps", cfg.Eps, 0, math.Inf(1), true},
		{"cfg.WeightDecay", cfg.WeightDecay, 0, math.Inf(1), true}} {
		if !(c.v >= c.lo && c.v < c.hi) {
			return Errorf(ErrParam, op, c.name, "is %v, want a value in [%v, %v)", c.v, c.lo, c.hi)
		}
	}
	if k, ok := KernelOf[OptimKernel](p.Param.Backend()); ok {
		return k.AdamWStep(p, step, cfg)
	}
	return OnHost(4, []*Tensor{p.Param, p.ExpAvg, p.ExpAvgSq, p.ParamBF16, p.Grad}, func(h []*Tensor) error {
		pv := hostF32(h[0])
		nnref.AdamW(pv, hostF32(h[4]), hostF32(h[1]), hostF32(h[2]), step, cfg.LR, cfg.Beta1, cfg.Beta2, cfg.Eps, cfg.WeightDecay)
		if h[3] != nil {
			b, _ := h[3].BF16s()
			for i, v := range pv {
				b[i] = BF16FromFloat32(v)
			}
		}
		return nil
	})
}

// GradNorm returns the L2 norm of all the grads together (float32 tensors, any shapes and one
// backend), summing squares in float64.
func GradNorm(grads []*Tensor) (float64, error) {
	return gradNorm("tensor.GradNorm", grads)
}

func gradNorm(op string, grads []*Tensor) (float64, error) {
	names := make([]string, len(grads))
	for i := range names {
		names[i] = "grads[" + strconv.Itoa(i) + "]"
	}
	if err := checkAll(op, names, len(grads), grads...); err != nil {
		return 0, err
	}
	var ss float64
	for _, g := range grads {
		var s float64
		var err error
		if k, ok := KernelOf[OptimKernel](g.Backend()); ok {
			s, err = k.SumSquares(g)
		} else {
			err = OnHost(0, []*Tensor{g}, func(h []*Tensor) error { s = nnref.SumSquares(hostF32(h[0])); return nil })
		}
		if err != nil {
			return 0, err
		}
		ss += s
	}
	return math.Sqrt(ss), nil
}

// ClipGradNorm scales the grads in place so that their global L2 norm is at most maxNorm, as
// torch.nn.utils.clip_grad_norm_: with the norm n (GradNorm), every gradient is multiplied by
// min(1, maxNorm/(n + 1e-6)) rounded to float32. It returns n, the norm before clipping. A
// non-finite norm propagates into the gradients, as in torch with error_if_nonfinite=False.
func ClipGradNorm(grads []*Tensor, maxNorm float64) (float64, error) {
	const op = "tensor.ClipGradNorm"
	if !(maxNorm > 0) {
		return 0, Errorf(ErrParam, op, "maxNorm", "is %v, want a value > 0", maxNorm)
	}
	n, err := gradNorm(op, grads)
	if err != nil {
		return 0, err
	}
	c := float32(math.Min(1, maxNorm/(n+1e-6)))
	if c == 1 {
		return n, nil // multiplying by 1 changes nothing
	}
	for _, g := range grads {
		if k, ok := KernelOf[OptimKernel](g.Backend()); ok {
			err = k.Scale(g, c)
		} else {
			err = OnHost(1, []*Tensor{g}, func(h []*Tensor) error { nnref.Scale(hostF32(h[0]), c); return nil })
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
