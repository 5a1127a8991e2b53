package loop

import (
	"fmt"
	"math"
)

// Optimizer updates a policy's parameters from their accumulated gradients.
type Optimizer interface {
	// Step clips the gradient's global L2 norm to maxNorm (when > 0) and, when the norm is
	// finite, takes one step at learning rate lr; the gradient is zero afterwards either way.
	// It returns the norm before clipping (a non-finite norm means the step was skipped).
	Step(lr, maxNorm float64) (norm float64, err error)
	// Steps is the number of steps taken: the schedule's position.
	Steps() int
}

// AdamW is decoupled-weight-decay Adam as torch.optim.AdamW computes it:
//
//	w ← w − lr·wd·w;  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//	w ← w − lr · (m / (1−β1^t)) / (sqrt(v / (1−β2^t)) + eps)
//
// The weights and moments are float32; the per-step scalars are computed in float64 and
// rounded. Its fields are its state (a checkpoint saves them).
type AdamW struct {
	Beta1, Beta2, Eps, WeightDecay float64
	// T is the number of steps taken (the bias-correction exponent).
	T int
	// M and V are the first and second moments, one slice per parameter.
	M, V [][]float32
}

// NewAdamW creates the optimizer state for parameters of the given sizes.
func NewAdamW(sizes []int, beta1, beta2, eps, weightDecay float64) *AdamW {
	o := &AdamW{Beta1: beta1, Beta2: beta2, Eps: eps, WeightDecay: weightDecay}
	for _, n := range sizes {
		o.M = append(o.M, make([]float32, n))
		o.V = append(o.V, make([]float32, n))
	}
	return o
}

// Update takes one step on ws from gs at learning rate lr; decay[i] says whether parameter i
// gets weight decay.
func (o *AdamW) Update(ws, gs [][]float32, decay []bool, lr float64) error {
	if len(ws) != len(o.M) || len(gs) != len(ws) || len(decay) != len(ws) {
		return fmt.Errorf("adamw: %d weights, %d grads, %d decay flags for %d parameters", len(ws), len(gs), len(decay), len(o.M))
	}
	for i, w := range ws {
		if len(w) != len(o.M[i]) || len(gs[i]) != len(o.M[i]) {
			return fmt.Errorf("adamw: parameter %d has %d weights and %d grads, want %d", i, len(w), len(gs[i]), len(o.M[i]))
		}
	}
	s := o.Next(lr)
	for i, w := range ws {
		g, m, v := gs[i], o.M[i], o.V[i]
		shrink := o.Shrink(decay[i], lr)
		for j := range w {
			gj := g[j]
			m[j] = s.Beta1*m[j] + (1-s.Beta1)*gj
			v[j] = s.Beta2*v[j] + (1-s.Beta2)*gj*gj
			denom := float32(math.Sqrt(float64(v[j])))*s.InvSqrtBC2 + s.Eps
			w[j] = w[j]*shrink - s.StepSize*m[j]/denom
		}
	}
	return nil
}

// AdamWStep is one step's float32 constants, for kernels that run the same update elsewhere.
type AdamWStep struct {
	Beta1, Beta2, StepSize, InvSqrtBC2, Eps float32
}

// Next advances the step count and returns the new step's constants: lr/(1−β1^t) and
// 1/√(1−β2^t) computed in float64, then rounded.
func (o *AdamW) Next(lr float64) AdamWStep {
	o.T++
	bc1 := 1 - math.Pow(o.Beta1, float64(o.T))
	bc2 := 1 - math.Pow(o.Beta2, float64(o.T))
	return AdamWStep{Beta1: float32(o.Beta1), Beta2: float32(o.Beta2), StepSize: float32(lr / bc1),
		InvSqrtBC2: float32(1 / math.Sqrt(bc2)), Eps: float32(o.Eps)}
}

// Shrink is the decoupled weight decay's factor 1 − lr·wd of a decayed parameter (1 otherwise).
func (o *AdamW) Shrink(decay bool, lr float64) float32 {
	if !decay {
		return 1
	}
	return float32(1 - lr*o.WeightDecay)
}

// ClipGradNorm computes the global L2 norm of gs (accumulated in float64, in order) and, when it
// exceeds maxNorm > 0, scales every gradient by maxNorm/(norm+1e-6) as
// torch.nn.utils.clip_grad_norm_ does. It returns the norm before clipping; a non-finite norm
// leaves the gradients untouched.
func ClipGradNorm(gs [][]float32, maxNorm float64) float64 {
	norm := math.Sqrt(sumSquares(0, gs))
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return norm
	}
	clipTo(gs, norm, maxNorm)
	return norm
}

// sumSquares continues the sum acc with the squares of gs, in order, in float64.
func sumSquares(acc float64, gs [][]float32) float64 {
	for _, g := range gs {
		for _, x := range g {
			acc += float64(x) * float64(x)
		}
	}
	return acc
}

// clipTo scales gs by maxNorm/(norm+1e-6) when norm exceeds maxNorm > 0.
func clipTo(gs [][]float32, norm, maxNorm float64) {
	if maxNorm > 0 && norm > maxNorm {
		s := float32(maxNorm / (norm + 1e-6))
		for _, g := range gs {
			for j := range g {
				g[j] *= s
			}
		}
	}
}

// HostAdamW is the Optimizer of host parameters: AdamW's state and the float32 host
// parameters it updates (each with its decay flag).
type HostAdamW struct {
	*AdamW
	Params []Param
}

// NewHostAdamW creates fresh AdamW state for params.
func NewHostAdamW(params []Param, beta1, beta2, eps, weightDecay float64) (*HostAdamW, error) {
	if err := checkParams(params, true); err != nil {
		return nil, err
	}
	sizes := make([]int, len(params))
	for i, p := range params {
		sizes[i] = p.Value.Len()
	}
	return &HostAdamW{AdamW: NewAdamW(sizes, beta1, beta2, eps, weightDecay), Params: params}, nil
}

// Steps is the number of steps taken.
func (o *HostAdamW) Steps() int { return o.T }

// Step implements Optimizer.
func (o *HostAdamW) Step(lr, maxNorm float64) (float64, error) {
	if o == nil || o.AdamW == nil {
		return 0, fmt.Errorf("loop: HostAdamW without AdamW state")
	}
	ws, gs, err := paramSlices(o.Params)
	if err != nil {
		return 0, err
	}
	defer zero(gs)
	norm := ClipGradNorm(gs, maxNorm)
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return norm, nil
	}
	decay := make([]bool, len(o.Params))
	for i, p := range o.Params {
		decay[i] = p.Decay
	}
	return norm, o.Update(ws, gs, decay, lr)
}

func paramSlices(ps []Param) (ws, gs [][]float32, err error) {
	if gs, err = gradSlices(ps); err != nil {
		return nil, nil, err
	}
	for _, p := range ps {
		w, err := p.Value.Float32s()
		if err != nil {
			return nil, nil, fmt.Errorf("loop: parameter %s: %w", p.Name, err)
		}
		ws = append(ws, w)
	}
	return ws, gs, nil
}

func zero(gs [][]float32) {
	for _, g := range gs {
		clear(g)
	}
}

// ScheduleKind is the learning-rate schedule after the warm-up (EasyR1 / transformers names).
type ScheduleKind int

const (
	Constant ScheduleKind = iota // constant (constant_with_warmup is the same)
	Cosine                       // half a cosine down to MinLRRatio·LR
	Linear                       // a straight line down to MinLRRatio·LR
)

var scheduleNames = [...]string{Constant: "constant", Cosine: "cosine", Linear: "linear"}

func (k ScheduleKind) String() string {
	if k >= 0 && int(k) < len(scheduleNames) {
		return scheduleNames[k]
	}
	return fmt.Sprintf("ScheduleKind(%d)", int(k))
}

// ParseScheduleKind parses lr_scheduler_type: constant (or constant_with_warmup, or empty),
// cosine, linear.
func ParseScheduleKind(s string) (ScheduleKind, error) {
	switch s {
	case "constant", "constant_with_warmup", "":
		return Constant, nil
	case "cosine":
		return Cosine, nil
	case "linear":
		return Linear, nil
	}
	return 0, fmt.Errorf("unknown schedule %q (want constant, constant_with_warmup, cosine or linear)", s)
}

// Schedule is a learning rate over the optimizer steps: a linear warm-up, then Kind.
type Schedule struct {
	LR float64
	// WarmupSteps, or when 0 WarmupRatio of all steps (rounded up), ramp the rate up linearly.
	WarmupSteps int
	WarmupRatio float64
	Kind        ScheduleKind
	// MinLRRatio is the floor of the cosine and linear decays, as a fraction of LR.
	MinLRRatio float64
}

// Validate checks the schedule's values.
func (s Schedule) Validate() error {
	switch {
	case !(s.LR >= 0) || math.IsInf(s.LR, 0):
		return fmt.Errorf("loop: Schedule.LR is %v, want a finite value >= 0", s.LR)
	case s.WarmupSteps < 0 || !(s.WarmupRatio >= 0 && s.WarmupRatio <= 1):
		return fmt.Errorf("loop: Schedule warm-up %d steps / ratio %v: want >= 0 and a ratio in [0, 1]", s.WarmupSteps, s.WarmupRatio)
	case !(s.MinLRRatio >= 0 && s.MinLRRatio <= 1):
		return fmt.Errorf("loop: Schedule.MinLRRatio is %v, want [0, 1]", s.MinLRRatio)
	case s.Kind < Constant || s.Kind > Linear:
		return fmt.Errorf("loop: Schedule.Kind is %v", s.Kind)
	}
	return nil
}

// At is the learning rate of optimizer step `step` (0-based) of `total`: linear warm-up from
// LR/warmup over the warm-up steps (as torch's LambdaLR with (step+1)/warmup), then Kind.
func (s Schedule) At(step, total int) float64 {
	warm := s.WarmupSteps
	if warm == 0 && s.WarmupRatio > 0 {
		warm = int(math.Ceil(s.WarmupRatio * float64(total)))
	}
	if step < warm {
		return s.LR * float64(step+1) / float64(warm)
	}
	if s.Kind == Constant || total <= warm {
		return s.LR
	}
	progress := math.Min(1, float64(step-warm)/float64(max(1, total-warm)))
	floor := s.MinLRRatio
	var f float64
	switch s.Kind {
	case Cosine:
		f = floor + (1-floor)*0.5*(1+math.Cos(math.Pi*progress))
	case Linear:
		f = floor + (1-floor)*(1-progress)
	}
	return s.LR * f
}
