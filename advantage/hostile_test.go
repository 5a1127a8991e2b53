package advantage

import (
	"errors"
	"math"
	"testing"

	"github.com/mtrl-go/mtrl/internal/hostile"
	"github.com/mtrl-go/mtrl/tensor"
)

// advantageFuncs lists every exported function and method of advantage. UnmarshalText is
// called on a valid receiver: decoding into a nil pointer is the caller's bug, as with any
// encoding.TextUnmarshaler.
func advantageFuncs() map[string]any {
	return map[string]any{
		"Compute":                 Compute,
		"ComputeWithReturns":      ComputeWithReturns,
		"Config.GRPOOptions":      Config.GRPOOptions,
		"Config.Validate":         Config.Validate,
		"DefaultConfig":           DefaultConfig,
		"Estimator.MarshalText":   Estimator.MarshalText,
		"Estimator.String":        Estimator.String,
		"Estimator.Valid":         Estimator.Valid,
		"Estimator.UnmarshalText": func(b []byte) error { var e Estimator; return e.UnmarshalText(b) },
		"GroupRowAdvantages":      GroupRowAdvantages,
		"ParseEstimator":          ParseEstimator,
	}
}

func advantageValues() *hostile.Values {
	v := hostile.NewValues()
	v.Add(DefaultConfig(), Config{Estimator: EstimatorGAE, Gamma: 0.9, Lambda: 0.95}, Config{Estimator: EstimatorRLOO},
		Config{Estimator: EstimatorReMax}, Config{Estimator: EstimatorReinforcePlusPlus, Gamma: 1}, Config{Estimator: EstimatorGRPOPassK})
	v.Add(EstimatorGRPO, EstimatorGAE, EstimatorGRPOPassK, EstimatorRLOO, EstimatorReinforcePlusPlus, EstimatorReMax, Estimator(-1), Estimator(42))
	v.Add(GRPOOptions{}, GRPOOptions{Eps: 1e-3, StdFloor: 0.1, NoStdNorm: true})
	v.Add([]float32{1, 2, 3, 4}, []int32{0, 0, 1, 1})
	hostile.Gen(v, "inputs [4 3]", func() Inputs {
		return Inputs{Rewards: hostile.F32(4, 3), ResponseMask: hostile.Ones(4, 3), Values: hostile.F32(4, 3),
			Index: hostile.I32([]int32{0, 0, 1, 1}, 4), Baselines: hostile.F32(4)}
	})
	hostile.Gen(v, "f32[4 3]", func() *tensor.Tensor { return hostile.F32(4, 3) })
	return v
}

// TestHostileInputs: no exported function of advantage panics, whatever its arguments; every
// error is a *tensor.Error.
func TestHostileInputs(t *testing.T) {
	hostile.Test(t, advantageFuncs(), nil, advantageValues(), hostile.Options{TensorErrors: true})
}

// TestGroupRowAdvantagesChecksOptions: the GRPOOptions values its documentation rejects are
// rejected by GroupRowAdvantages too, not only by Compute.
func TestGroupRowAdvantagesChecksOptions(t *testing.T) {
	for _, o := range []GRPOOptions{{Eps: -1}, {Eps: math.NaN()}, {Eps: math.Inf(1)}, {StdFloor: math.Inf(-1)}, {StdFloor: -1}, {StdFloor: math.NaN()}} {
		for _, est := range []Estimator{EstimatorGRPO, EstimatorGRPOPassK, EstimatorRLOO} {
			if _, err := GroupRowAdvantages([]float32{1, 2, 3, 4}, []int32{0, 0, 1, 1}, est, o); !errors.Is(err, tensor.ErrParam) {
				t.Errorf("%v %+v: %v, want ErrParam", est, o, err)
			}
		}
	}
}
