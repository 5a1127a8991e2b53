package ppo

import (
	"testing"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/internal/hostile"
)

// ppoFuncs lists every exported function and method of ppo. UnmarshalText is called on a
// valid receiver: decoding into a nil pointer is the caller's bug, as with any
// encoding.TextUnmarshaler.
func ppoFuncs() map[string]any {
	return map[string]any{
		"Agg.Finish":             Agg.Finish,
		"Agg.Loss":               Agg.Loss,
		"Agg.LossGrad":           Agg.LossGrad,
		"Agg.Validate":           Agg.Validate,
		"Agg.Weights":            Agg.Weights,
		"AggMode.MarshalText":    AggMode.MarshalText,
		"AggMode.String":         AggMode.String,
		"AggMode.Valid":          AggMode.Valid,
		"AggMode.UnmarshalText":  func(b []byte) error { var a AggMode; return a.UnmarshalText(b) },
		"DefaultPolicyConfig":    DefaultPolicyConfig,
		"DefaultValueConfig":     DefaultValueConfig,
		"EntropyPenalty":         EntropyPenalty,
		"KLLoss":                 KLLoss,
		"LossType.MarshalText":   LossType.MarshalText,
		"LossType.String":        LossType.String,
		"LossType.Valid":         LossType.Valid,
		"LossType.UnmarshalText": func(b []byte) error { var l LossType; return l.UnmarshalText(b) },
		"ParseAggMode":           ParseAggMode,
		"ParseLossType":          ParseLossType,
		"PolicyConfig.Validate":  PolicyConfig.Validate,
		"PolicyLoss":             PolicyLoss,
		"PolicyResult.Metrics":   PolicyResult.Metrics,
		"TokenScale":             TokenScale,
		"ValueConfig.Validate":   ValueConfig.Validate,
		"ValueLoss":              ValueLoss,
		"ValueResult.Metrics":    ValueResult.Metrics,
	}
}

func ppoValues() *hostile.Values {
	v := hostile.NewValues()
	v.Add(DefaultPolicyConfig(Vanilla), DefaultPolicyConfig(GSPO), DefaultPolicyConfig(SAPO), DefaultValueConfig())
	v.Add(Vanilla, GSPO, GSPOToken, CISPO, SAPO, LossType(-1), LossType(50))
	v.Add(Agg{}, Agg{Mode: Seq}, Agg{Mode: SeqMeanTokenSumNorm, Horizon: 3}, Agg{Mode: SeqMeanTokenSumNorm}, Agg{Mode: AggMode(9), Eps: -1})
	v.Add(KLConfig{Kind: divergence.LowVarKL, Coef: 0.1}, EntropyConfig{Coef: 0.01})
	v.Add([]float32{0, 0}, []float64{1, 2})
	hostile.Gen(v, "policy inputs [2 3]", func() PolicyInputs {
		return PolicyInputs{OldLogProbs: hostile.F32(2, 3), LogProbs: hostile.F32(2, 3), Advantages: hostile.F32(2, 3),
			ResponseMask: hostile.Ones(2, 3), TokenMask: hostile.Ones(2, 3)}
	})
	hostile.Gen(v, "value inputs [2 3]", func() ValueInputs {
		return ValueInputs{VPreds: hostile.F32(2, 3), Returns: hostile.F32(2, 3), Values: hostile.F32(2, 3), ResponseMask: hostile.Ones(2, 3)}
	})
	return v
}

// TestHostileInputs: no exported function of ppo panics, whatever its arguments; every error
// is a *tensor.Error.
func TestHostileInputs(t *testing.T) {
	hostile.Test(t, ppoFuncs(), nil, ppoValues(), hostile.Options{TensorErrors: true})
}
