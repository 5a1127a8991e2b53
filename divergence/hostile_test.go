package divergence

import (
	"testing"

	"github.com/mtrl-go/mtrl/internal/hostile"
)

// divergenceFuncs lists every exported function and method of divergence. UnmarshalText and
// the controllers' methods are called on valid receivers (from their constructors): a nil
// receiver is the caller's bug, as with any pointer method that returns no error.
func divergenceFuncs() map[string]any {
	adaptive := func() *Adaptive { a, _ := NewAdaptive(0.1, 6, 10000); return a }
	return map[string]any{
		"Adaptive.Coef":                func() float64 { return adaptive().Coef() },
		"Adaptive.Update":              func(kl float64, n int) { adaptive().Update(kl, n) },
		"ControllerConfig.Validate":    ControllerConfig.Validate,
		"ControllerType.MarshalText":   ControllerType.MarshalText,
		"ControllerType.String":        ControllerType.String,
		"ControllerType.Valid":         ControllerType.Valid,
		"ControllerType.UnmarshalText": func(b []byte) error { var c ControllerType; return c.UnmarshalText(b) },
		"Fixed.Coef":                   func(c float64) float64 { return NewFixed(c).Coef() },
		"Fixed.Update":                 func(kl float64, n int) { NewFixed(0.1).Update(kl, n) },
		"Kind.MarshalText":             Kind.MarshalText,
		"Kind.String":                  Kind.String,
		"Kind.Valid":                   Kind.Valid,
		"Kind.UnmarshalText":           func(b []byte) error { var k Kind; return k.UnmarshalText(b) },
		"NewAdaptive":                  NewAdaptive,
		"NewController":                NewController,
		"NewFixed":                     NewFixed,
		"ParseControllerType":          ParseControllerType,
		"ParseKind":                    ParseKind,
		"Penalty":                      Penalty,
		"PenalizeRewards":              PenalizeRewards,
		"PenaltyBackward":              PenaltyBackward,
		"PerceptionScore":              PerceptionScore,
		"Rewards":                      Rewards,
	}
}

func divergenceValues() *hostile.Values {
	v := hostile.NewValues()
	v.Add(LowVarKL, KL, Abs, MSE, Full, Kind(-1), Kind(77), FixedController, AdaptiveController, ControllerType(9))
	v.Add(ControllerConfig{Type: AdaptiveController, Coef: 0.1, Target: 6, Horizon: 10000}, ControllerConfig{Coef: 0.1})
	hostile.Gen(v, "penalty grad [2 3]", func() PenaltyGrad {
		return PenaltyGrad{LogProbs: hostile.F32(2, 3), Ref: hostile.F32(2, 3), DPenalty: hostile.F32(2, 3), Kind: LowVarKL}
	})
	v.Add(float32(0.1))
	return v
}

// TestHostileInputs: no exported function of divergence panics, whatever its arguments;
// every error is a *tensor.Error.
func TestHostileInputs(t *testing.T) {
	hostile.Test(t, divergenceFuncs(), nil, divergenceValues(), hostile.Options{TensorErrors: true})
}
