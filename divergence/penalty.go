package divergence

import (
	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/internal/parallel"
	"github.com/mtrl-go/mtrl/tensor"
)

// Clamp bounds of the reference (docs/semantics.md#kl-penalty, docs/semantics.md#perception-mask).
const (
	diffClamp     = 20 // |ref - lp| and |aug - old| are clamped to [-20, 20]
	lowVarKLClamp = 10 // compute_kl's low_var_kl is clamped to [-10, 10]
	perceptionMax = 10 // the perception score is clamped to [0, 10]
)

// PenaltyKernel is the optional backend kernel for Penalty. A backend that implements it gets the
// validated tensors (same backend, float32, shapes checked) and must write dst.
type PenaltyKernel interface {
	Penalty(dst, logp, ref *tensor.Tensor, kind Kind) error
}

// PenaltyBackwardKernel is the optional backend kernel for PenaltyBackward.
type PenaltyBackwardKernel interface {
	PenaltyBackward(dlogp *tensor.Tensor, in PenaltyGrad) error
}

// PerceptionScoreKernel is the optional backend kernel for PerceptionScore.
type PerceptionScoreKernel interface {
	PerceptionScore(dst, old, aug *tensor.Tensor) error
}

// penaltyArgs names the tensors of Penalty (dst, logp, ref) or PenaltyBackward (dlogp,
// LogProbs, Ref) in error messages.
type penaltyArgs struct{ dst, logp, ref string }

// checkPenalty validates the arguments shared by Penalty and PenaltyBackward. grad selects
// whether dst has logp's shape (gradient) or the penalty's shape (penaltyShape).
func checkPenalty(op string, names penaltyArgs, dst, logp, ref *tensor.Tensor, kind Kind, grad bool) error {
	if !kind.Valid() {
		return tensor.Errorf(tensor.ErrParam, op, "kind", "unknown kind %v", kind)
	}
	if err := tensor.CheckSameShape(op, names.logp, logp, names.ref, ref); err != nil {
		return err
	}
	if dst == nil {
		return tensor.Errorf(tensor.ErrShape, op, names.dst, "is nil")
	}
	for _, a := range []struct {
		name string
		t    *tensor.Tensor
	}{{names.dst, dst}, {names.logp, logp}, {names.ref, ref}} {
		if err := tensor.CheckDType(op, a.name, a.t, tensor.Float32); err != nil {
			return err
		}
	}
	if err := tensor.CheckSameBackend(op, []string{names.dst, names.logp, names.ref}, dst, logp, ref); err != nil {
		return err
	}
	if kind == Full {
		if logp.Rank() < 1 {
			return tensor.Errorf(tensor.ErrShape, op, names.logp, "kind full needs log-distributions [..., V], got a scalar")
		}
		if logp.Dim(-1) == 0 {
			return tensor.Errorf(tensor.ErrShape, op, names.logp, "kind full needs V > 0, shape is %v", logp.Shape())
		}
	}
	if !grad {
		return tensor.CheckShape(op, names.dst, dst, penaltyShape(logp, kind)...)
	}
	return tensor.CheckSameShape(op, names.logp, logp, names.dst, dst)
}

// penaltyShape is the shape of Penalty's output: logp's, without the last dimension for Full.
func penaltyShape(logp *tensor.Tensor, kind Kind) []int {
	s := logp.Shape()
	if kind == Full {
		s = s[:len(s)-1]
	}
	return s
}

// Penalty writes the per-token KL penalty of compute_kl (docs/semantics.md#kl-penalty) into dst.
//
// For KL, Abs, MSE and LowVarKL, logp and ref are token log-probs of any shape (usually [B, T])
// and dst has the same shape. For Full, logp and ref are full log-distributions [B, T, V] (any
// leading shape) and dst is [B, T]: the sum over V of exp(lp)*(lp-ref). All tensors are float32
// on one backend; dst may alias logp or ref for the elementwise kinds. NaN and ±Inf propagate
// as in the reference (a -Inf log-prob in Full gives NaN, as torch does).
func Penalty(dst, logp, ref *tensor.Tensor, kind Kind) error {
	const op = "divergence.Penalty"
	if err := checkPenalty(op, penaltyArgs{"dst", "logp", "ref"}, dst, logp, ref, kind, false); err != nil {
		return err
	}
	if k, ok := tensor.KernelOf[PenaltyKernel](logp.Backend()); ok {
		return k.Penalty(dst, logp, ref, kind)
	}
	return tensor.OnHost(1, []*tensor.Tensor{dst, logp, ref}, func(h []*tensor.Tensor) error {
		d, _ := h[0].Float32s()
		lp, _ := h[1].Float32s()
		rf, _ := h[2].Float32s()
		if kind == Full {
			v := logp.Dim(-1)
			rows := len(d)
			parallel.For(rows, parallel.Grain(v, 1<<15), func(lo, hi int) {
				fullKL(d[lo:hi], lp[lo*v:hi*v], rf[lo*v:hi*v], v)
			})
			return nil
		}
		if k := penaltyImpls.Active(); k != nil && kind == LowVarKL {
			// x = clamp(ref - lp): a = lp, b = ref.
			k.run(d, lp, rf, k.lowVarKL, func(d, lp, rf []float32) { penaltyKernel(d, lp, rf, kind) })
			return nil
		}
		parallel.For(len(d), 1<<15, func(lo, hi int) {
			penaltyKernel(d[lo:hi], lp[lo:hi], rf[lo:hi], kind)
		})
		return nil
	})
}

// clamp limits x to [lo, hi]; NaN passes through (as torch.clamp).
func clamp[F hostops.Float](x, lo, hi F) F {
	if x < lo {
		return lo
	}
	if x > hi {
		return hi
	}
	return x
}

// inside reports whether a clamp to [lo, hi] passes the gradient (ends inclusive, NaN → false).
func inside[F hostops.Float](x, lo, hi F) bool { return x >= lo && x <= hi }

// penaltyKernel is the elementwise penalty for every kind but Full.
func penaltyKernel[F hostops.Float](dst, lp, ref []F, kind Kind) {
	n := len(dst)
	lp, ref = lp[:n], ref[:n]
	switch kind {
	case KL:
		for i := range dst {
			dst[i] = lp[i] - ref[i]
		}
	case Abs:
		for i := range dst {
			d := lp[i] - ref[i]
			if d < 0 {
				d = -d
			}
			dst[i] = d
		}
	case MSE:
		for i := range dst {
			d := lp[i] - ref[i]
			dst[i] = 0.5 * d * d
		}
	case LowVarKL:
		for i := range dst {
			x := clamp(ref[i]-lp[i], -diffClamp, diffClamp)
			dst[i] = clamp(hostops.Exp(x)-x-1, -lowVarKLClamp, lowVarKLClamp)
		}
	}
}

// fullKL writes dst[r] = sum_v exp(lp[r,v]) * (lp[r,v] - ref[r,v]), accumulating in float64.
func fullKL[F hostops.Float](dst, lp, ref []F, v int) {
	for r := range dst {
		l, q := lp[r*v:(r+1)*v], ref[r*v:(r+1)*v]
		var s float64
		for j := range l {
			s += float64(hostops.Exp(l[j]) * (l[j] - q[j]))
		}
		dst[r] = F(s)
	}
}

// PenaltyGrad is what PenaltyBackward reads: Penalty's inputs and the gradient that flows into
// its output.
type PenaltyGrad struct {
	// LogProbs and Ref are Penalty's logp and ref (float32, one shape; [..., V] for Full).
	LogProbs, Ref *tensor.Tensor
	// DPenalty is d loss / d penalty (float32, Penalty's output shape: LogProbs' shape, or
	// LogProbs' shape without V for Full).
	DPenalty *tensor.Tensor
	// Kind is Penalty's kind.
	Kind Kind
}

// PenaltyBackward writes into dlogp (LogProbs' shape) the gradient of sum(DPenalty * Penalty)
// with respect to the log-probs: dlogp = DPenalty * d penalty / d lp, the derivative of the exact
// expression Penalty computes, as autograd would give it (for Full, with each log-prob an
// independent input):
//
//	kl:         1
//	abs:        sign(lp - ref) (0 at lp == ref, like torch.abs)
//	mse:        lp - ref
//	low_var_kl: 1 - exp(x), x = ref - lp, and 0 where either clamp is active
//	full:       exp(lp)*(lp - ref + 1)
//
// A clamp passes the gradient when its input lies inside the bounds, ends inclusive
// (docs/semantics.md#clamps). Where DPenalty is 0 (masked tokens) dlogp is exactly 0, whatever
// the log-probs hold, so NaN or ±Inf there do not propagate. ppo.KLLoss uses it with DPenalty =
// Coef times the aggregation weights.
func PenaltyBackward(dlogp *tensor.Tensor, in PenaltyGrad) error {
	const op = "divergence.PenaltyBackward"
	logp, ref, dpen, kind := in.LogProbs, in.Ref, in.DPenalty, in.Kind
	if err := checkPenalty(op, penaltyArgs{"dlogp", "LogProbs", "Ref"}, dlogp, logp, ref, kind, true); err != nil {
		return err
	}
	if dpen == nil {
		return tensor.Errorf(tensor.ErrShape, op, "DPenalty", "is nil")
	}
	if err := tensor.CheckDType(op, "DPenalty", dpen, tensor.Float32); err != nil {
		return err
	}
	if err := tensor.CheckShape(op, "DPenalty", dpen, penaltyShape(logp, kind)...); err != nil {
		return err
	}
	if err := tensor.CheckSameBackend(op, []string{"LogProbs", "DPenalty"}, logp, dpen); err != nil {
		return err
	}
	if k, ok := tensor.KernelOf[PenaltyBackwardKernel](logp.Backend()); ok {
		return k.PenaltyBackward(dlogp, in)
	}
	return tensor.OnHost(1, []*tensor.Tensor{dlogp, logp, ref, dpen}, func(h []*tensor.Tensor) error {
		d, _ := h[0].Float32s()
		lp, _ := h[1].Float32s()
		rf, _ := h[2].Float32s()
		u, _ := h[3].Float32s()
		derivative := func(d, lp, rf []float32) { penaltyGradKernel(d, lp, rf, kind) }
		if k := penaltyImpls.Active(); k != nil && kind == LowVarKL {
			goTail := derivative
			derivative = func(d, lp, rf []float32) { k.chunk(d, lp, rf, k.grad, goTail) }
		}
		// One pass per chunk of rows: the derivatives, then the chain while they are in cache.
		v := len(d) / max(len(u), 1)
		parallel.For(len(u), parallel.Grain(v, 1<<15), func(lo, hi int) {
			a, b := lo*v, hi*v
			derivative(d[a:b], lp[a:b], rf[a:b])
			chainRows(d[a:b], u[lo:hi], v)
		})
		return nil
	})
}

// chainRows multiplies each run of v derivatives in d by its upstream gradient u[j], writing
// exactly 0 where u[j] == 0.
func chainRows[F hostops.Float](d, u []F, v int) {
	for j, uj := range u {
		dj := d[j*v : (j+1)*v]
		for k := range dj {
			if uj != 0 {
				dj[k] = uj * dj[k]
			} else {
				dj[k] = 0
			}
		}
	}
}

// penaltyGradKernel is the elementwise gradient for every kind (Full is elementwise in V too).
func penaltyGradKernel[F hostops.Float](dst, lp, ref []F, kind Kind) {
	n := len(dst)
	lp, ref = lp[:n], ref[:n]
	switch kind {
	case KL:
		for i := range dst {
			dst[i] = 1
		}
	case Abs:
		for i := range dst {
			d := lp[i] - ref[i]
			switch {
			case d > 0:
				dst[i] = 1
			case d < 0:
				dst[i] = -1
			case d == 0:
				dst[i] = 0
			default:
				dst[i] = d // NaN
			}
		}
	case MSE:
		for i := range dst {
			dst[i] = lp[i] - ref[i]
		}
	case LowVarKL:
		for i := range dst {
			x0 := ref[i] - lp[i]
			x := clamp(x0, -diffClamp, diffClamp)
			e := hostops.Exp(x)
			y := e - x - 1
			if inside(x0, -diffClamp, diffClamp) && inside(y, -lowVarKLClamp, lowVarKLClamp) {
				dst[i] = 1 - e
			} else {
				dst[i] = 0
			}
		}
	case Full:
		for i := range dst {
			dst[i] = hostops.Exp(lp[i]) * (lp[i] - ref[i] + 1)
		}
	}
}

// PerceptionScore writes the token perception score of the VPPO perception mask
// (docs/semantics.md#perception-mask) into dst: d = clamp(aug - old, -20, 20),
// dst = clamp(exp(d) - d - 1, 0, 10), at every position (padding included). old holds the
// log-probs with the original image, aug those with the perturbed image; all three are float32 of
// one shape (usually [B, T]) on one backend. Note the lower clamp 0, where compute_kl's low_var_kl
// uses -10.
func PerceptionScore(dst, old, aug *tensor.Tensor) error {
	const op = "divergence.PerceptionScore"
	if err := tensor.CheckSameShape(op, "old", old, "aug", aug); err != nil {
		return err
	}
	if err := tensor.CheckSameShape(op, "old", old, "dst", dst); err != nil {
		return err
	}
	for _, a := range []struct {
		name string
		t    *tensor.Tensor
	}{{"dst", dst}, {"old", old}, {"aug", aug}} {
		if err := tensor.CheckDType(op, a.name, a.t, tensor.Float32); err != nil {
			return err
		}
	}
	if err := tensor.CheckSameBackend(op, []string{"dst", "old", "aug"}, dst, old, aug); err != nil {
		return err
	}
	if k, ok := tensor.KernelOf[PerceptionScoreKernel](old.Backend()); ok {
		return k.PerceptionScore(dst, old, aug)
	}
	return tensor.OnHost(1, []*tensor.Tensor{dst, old, aug}, func(h []*tensor.Tensor) error {
		d, _ := h[0].Float32s()
		o, _ := h[1].Float32s()
		a, _ := h[2].Float32s()
		if k := penaltyImpls.Active(); k != nil {
			k.run(d, o, a, k.perception, perceptionKernel[float32])
			return nil
		}
		parallel.For(len(d), 1<<15, func(lo, hi int) {
			perceptionKernel(d[lo:hi], o[lo:hi], a[lo:hi])
		})
		return nil
	})
}

func perceptionKernel[F hostops.Float](dst, old, aug []F) {
	n := len(dst)
	old, aug = old[:n], aug[:n]
	for i := range dst {
		d := clamp(aug[i]-old[i], -diffClamp, diffClamp)
		dst[i] = clamp(hostops.Exp(d)-d-1, 0, perceptionMax)
	}
}
