package advantage

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/tensor"
)

func TestEstimatorNames(t *testing.T) {
	want := []string{"gae", "grpo", "grpo_passk", "rloo", "reinforce_plus_plus", "remax"}
	seen := map[Estimator]bool{}
	for _, name := range want {
		e, err := ParseEstimator(name)
		require.NoError(t, err, name)
		assert.Equal(t, name, e.String())
		b, err := e.MarshalText()
		require.NoError(t, err)
		var back Estimator
		require.NoError(t, back.UnmarshalText(b))
		assert.Equal(t, e, back)
		seen[e] = true
	}
	assert.Len(t, seen, int(numEstimators))
	assert.Equal(t, EstimatorGRPO, Estimator(0), "zero value is the reference default")

	for _, bad := range []string{"", "GAE", "ppo", "grpo ", "reinforce++"} {
		_, err := ParseEstimator(bad)
		assert.ErrorIs(t, err, tensor.ErrParam, bad)
	}
	assert.Equal(t, "Estimator(42)", Estimator(42).String())
	_, err := Estimator(-1).MarshalText()
	assert.ErrorIs(t, err, tensor.ErrParam)
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, Config{}.Validate())
	require.NoError(t, DefaultConfig().Validate())
	d := DefaultConfig()
	assert.Equal(t, EstimatorGRPO, d.Estimator)
	assert.Equal(t, 1.0, d.Gamma)
	assert.Equal(t, 1.0, d.Lambda)
	assert.Equal(t, DefaultEps, d.Eps)

	for _, tc := range []struct {
		name string
		mod  func(*Config)
		arg  string
	}{
		{"estimator", func(c *Config) { c.Estimator = 99 }, "Estimator"},
		{"gamma>1", func(c *Config) { c.Gamma = 1.01 }, "Gamma"},
		{"gamma<0", func(c *Config) { c.Gamma = -0.1 }, "Gamma"},
		{"gammaNaN", func(c *Config) { c.Gamma = math.NaN() }, "Gamma"},
		{"lambda", func(c *Config) { c.Lambda = 2 }, "Lambda"},
		{"eps<0", func(c *Config) { c.Eps = -1e-6 }, "Eps"},
		{"epsInf", func(c *Config) { c.Eps = math.Inf(1) }, "Eps"},
		{"floor<0", func(c *Config) { c.StdFloor = -1 }, "StdFloor"},
		{"floorNaN", func(c *Config) { c.StdFloor = math.NaN() }, "StdFloor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			err := c.Validate()
			require.ErrorIs(t, err, tensor.ErrParam)
			assert.Contains(t, err.Error(), "advantage.Config.Validate")
			assert.Contains(t, err.Error(), tc.arg)
		})
	}
}

// TestComputeDispatch checks that Compute gives the same results as the direct functions.
func TestComputeDispatch(t *testing.T) {
	x := randBatch(newRand(1), 12, 9, 4)
	r, v, m, base, ids := x.tensors(t)
	in := Inputs{Rewards: r, ResponseMask: m, Values: v, Index: ids, Baselines: base}
	direct := map[Estimator]func(adv, ret *tensor.Tensor) error{
		EstimatorGAE: func(a, rt *tensor.Tensor) error { return gae(a, rt, r, v, m, 0.99, 0.95) },
		EstimatorGRPO: func(a, rt *tensor.Tensor) error {
			return grpo(a, rt, r, m, ids, GRPOOptions{Eps: 1e-6, StdFloor: 0.1})
		},
		EstimatorGRPOPassK: func(a, rt *tensor.Tensor) error {
			return grpoPassK(a, rt, r, m, ids, GRPOOptions{Eps: 1e-6, StdFloor: 0.1})
		},
		EstimatorRLOO:              func(a, rt *tensor.Tensor) error { return rloo(a, rt, r, m, ids) },
		EstimatorReinforcePlusPlus: func(a, rt *tensor.Tensor) error { return reinforcePlusPlus(a, rt, r, m, 0.99) },
		EstimatorReMax:             func(a, rt *tensor.Tensor) error { return reMax(a, rt, r, m, base) },
	}
	for e, f := range direct {
		t.Run(e.String(), func(t *testing.T) {
			cfg := Config{Estimator: e, Gamma: 0.99, Lambda: 0.95, Eps: 1e-6, StdFloor: 0.1}
			a1, r1 := zeros(t, x.b, x.l), zeros(t, x.b, x.l)
			a2, r2 := zeros(t, x.b, x.l), zeros(t, x.b, x.l)
			require.NoError(t, ComputeWithReturns(a1, r1, in, cfg))
			require.NoError(t, f(a2, r2))
			assert.Equal(t, data(t, a2), data(t, a1))
			assert.Equal(t, data(t, r2), data(t, r1))
			// returns may be nil and adv is unchanged by that.
			a3 := zeros(t, x.b, x.l)
			require.NoError(t, Compute(a3, in, cfg))
			assert.Equal(t, data(t, a1), data(t, a3))
		})
	}
}

func TestComputeMissingInputs(t *testing.T) {
	x := randBatch(newRand(2), 4, 3, 2)
	r, v, m, base, ids := x.tensors(t)
	full := Inputs{Rewards: r, ResponseMask: m, Values: v, Index: ids, Baselines: base}
	for _, tc := range []struct {
		est Estimator
		mod func(*Inputs)
		arg string
	}{
		{EstimatorGAE, func(in *Inputs) { in.Values = nil }, "Inputs.Values"},
		{EstimatorGRPO, func(in *Inputs) { in.Index = nil }, "Inputs.Index"},
		{EstimatorGRPOPassK, func(in *Inputs) { in.Index = nil }, "Inputs.Index"},
		{EstimatorRLOO, func(in *Inputs) { in.Index = nil }, "Inputs.Index"},
		{EstimatorReMax, func(in *Inputs) { in.Baselines = nil }, "Inputs.Baselines"},
		{EstimatorReinforcePlusPlus, func(in *Inputs) { in.Rewards = nil }, "Inputs.Rewards"},
		{EstimatorGRPO, func(in *Inputs) { in.ResponseMask = nil }, "Inputs.ResponseMask"},
	} {
		in := full
		tc.mod(&in)
		err := Compute(zeros(t, 4, 3), in, Config{Estimator: tc.est})
		require.ErrorIs(t, err, tensor.ErrParam, tc.arg)
		assert.Contains(t, err.Error(), "advantage.Compute")
		assert.Contains(t, err.Error(), tc.arg)
	}
	// A bad config is reported under Compute's name.
	err := Compute(zeros(t, 4, 3), full, Config{Estimator: EstimatorGAE, Gamma: 3})
	require.ErrorIs(t, err, tensor.ErrParam)
	assert.True(t, strings.HasPrefix(err.Error(), "advantage.Compute: Gamma"), err.Error())
	var te *tensor.Error
	require.True(t, errors.As(err, &te))
	assert.Equal(t, "Gamma", te.Arg)
}
