package advantage

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/tensor"
)

func TestBadInputs(t *testing.T) {
	const b, l = 4, 3
	x := randBatch(newRand(8), b, l, 2)
	r, v, m, base, ids := x.tensors(t)
	adv := zeros(t, b, l)
	wrong := zeros(t, b, l+1)
	flat := zeros(t, b*l)
	ints := tensor.Must(tensor.FromInt32(make([]int32, b*l), b, l))
	fids := t32(t, []float32{0, 0, 1, 1}, b)
	o := GRPOOptions{}
	for _, tc := range []struct {
		name string
		call func() error
		kind error
		op   string
		arg  string
	}{
		{"gae rewards rank", func() error { return gae(flat, nil, flat, flat, flat, 1, 1) }, tensor.ErrShape, "advantage.GAE", "rewards"},
		{"gae nil rewards", func() error { return gae(adv, nil, nil, v, m, 1, 1) }, tensor.ErrShape, "advantage.GAE", "rewards"},
		{"gae rewards dtype", func() error { return gae(adv, nil, ints, v, m, 1, 1) }, tensor.ErrDType, "advantage.GAE", "rewards"},
		{"gae mask shape", func() error { return gae(adv, nil, r, v, wrong, 1, 1) }, tensor.ErrShape, "advantage.GAE", "mask"},
		{"gae mask dtype", func() error { return gae(adv, nil, r, v, ints, 1, 1) }, tensor.ErrDType, "advantage.GAE", "mask"},
		{"gae adv shape", func() error { return gae(wrong, nil, r, v, m, 1, 1) }, tensor.ErrShape, "advantage.GAE", "adv"},
		{"gae adv nil", func() error { return gae(nil, nil, r, v, m, 1, 1) }, tensor.ErrShape, "advantage.GAE", "adv"},
		{"gae returns shape", func() error { return gae(adv, wrong, r, v, m, 1, 1) }, tensor.ErrShape, "advantage.GAE", "returns"},
		{"gae returns dtype", func() error { return gae(adv, ints, r, v, m, 1, 1) }, tensor.ErrDType, "advantage.GAE", "returns"},
		{"gae values missing", func() error { return gae(adv, nil, r, nil, m, 1, 1) }, tensor.ErrParam, "advantage.GAE", "values"},
		{"gae values shape", func() error { return gae(adv, nil, r, wrong, m, 1, 1) }, tensor.ErrShape, "advantage.GAE", "values"},
		{"gae values dtype", func() error { return gae(adv, nil, r, ints, m, 1, 1) }, tensor.ErrDType, "advantage.GAE", "values"},
		{"gae gamma>1", func() error { return gae(adv, nil, r, v, m, 1.5, 1) }, tensor.ErrParam, "advantage.GAE", "gamma"},
		{"gae gamma<0", func() error { return gae(adv, nil, r, v, m, -0.01, 1) }, tensor.ErrParam, "advantage.GAE", "gamma"},
		{"gae lam NaN", func() error { return gae(adv, nil, r, v, m, 1, nan64()) }, tensor.ErrParam, "advantage.GAE", "lam"},
		{"grpo index missing", func() error { return grpo(adv, nil, r, m, nil, o) }, tensor.ErrShape, "advantage.GRPO", "index"},
		{"grpo index length", func() error { return grpo(adv, nil, r, m, i32(t, []int32{0, 0, 1}), o) }, tensor.ErrShape, "advantage.GRPO", "index"},
		{"grpo index dtype", func() error { return grpo(adv, nil, r, m, fids, o) }, tensor.ErrDType, "advantage.GRPO", "index"},
		{"grpo eps<0", func() error { return grpo(adv, nil, r, m, ids, GRPOOptions{Eps: -1}) }, tensor.ErrParam, "advantage.GRPO", "Eps"},
		{"grpo floor<0", func() error { return grpo(adv, nil, r, m, ids, GRPOOptions{StdFloor: -1}) }, tensor.ErrParam, "advantage.GRPO", "StdFloor"},
		{"grpo group of one", func() error { return grpo(adv, nil, r, m, i32(t, []int32{0, 0, 0, 1}), o) }, tensor.ErrParam, "advantage.GRPO", "index"},
		{"passk group of one", func() error { return grpoPassK(adv, nil, r, m, i32(t, []int32{3, 0, 0, 0}), o) }, tensor.ErrParam, "advantage.GRPOPassK", "index"},
		{"rloo group of one", func() error { return rloo(adv, nil, r, m, i32(t, []int32{0, 1, 2, 3})) }, tensor.ErrParam, "advantage.RLOO", "index"},
		{"rloo mask shape", func() error { return rloo(adv, nil, r, wrong, ids) }, tensor.ErrShape, "advantage.RLOO", "mask"},
		{"rpp gamma", func() error { return reinforcePlusPlus(adv, nil, r, m, 2) }, tensor.ErrParam, "advantage.ReinforcePlusPlus", "gamma"},
		{"rpp adv shape", func() error { return reinforcePlusPlus(wrong, nil, r, m, 1) }, tensor.ErrShape, "advantage.ReinforcePlusPlus", "adv"},
		{"remax baselines missing", func() error { return reMax(adv, nil, r, m, nil) }, tensor.ErrShape, "advantage.ReMax", "baselines"},
		{"remax baselines length", func() error { return reMax(adv, nil, r, m, zeros(t, b+1)) }, tensor.ErrShape, "advantage.ReMax", "baselines"},
		{"remax baselines rank", func() error { return reMax(adv, nil, r, m, zeros(t, b, 1)) }, tensor.ErrShape, "advantage.ReMax", "baselines"},
		{"remax baselines dtype", func() error { return reMax(adv, nil, r, m, ids) }, tensor.ErrDType, "advantage.ReMax", "baselines"},
		{"compute gae values", func() error {
			return Compute(adv, Inputs{Rewards: r, ResponseMask: m}, Config{Estimator: EstimatorGAE})
		}, tensor.ErrParam, "advantage.Compute", "Inputs.Values"},
		{"compute gamma", func() error {
			return Compute(adv, Inputs{Rewards: r, ResponseMask: m, Values: v}, Config{Estimator: EstimatorGAE, Gamma: -1})
		}, tensor.ErrParam, "advantage.Compute", "Gamma"},
		{"compute bad estimator", func() error {
			return Compute(adv, Inputs{Rewards: r, ResponseMask: m}, Config{Estimator: 17})
		}, tensor.ErrParam, "advantage.Compute", "Estimator"},
		{"compute remax shape", func() error {
			return Compute(adv, Inputs{Rewards: r, ResponseMask: m, Baselines: zeros(t, 1)}, Config{Estimator: EstimatorReMax})
		}, tensor.ErrShape, "advantage.Compute", "Inputs.Baselines"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.Error(t, err)
			assert.True(t, errors.Is(err, tc.kind), "got %v, want %v", err, tc.kind)
			var te *tensor.Error
			require.True(t, errors.As(err, &te), "%T", err)
			assert.Equal(t, tc.op, te.Op)
			assert.Equal(t, tc.arg, te.Arg)
			assert.Contains(t, err.Error(), tc.op)
			assert.Contains(t, err.Error(), tc.arg)
		})
	}
	_ = base
}
