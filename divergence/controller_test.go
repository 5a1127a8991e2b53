package divergence

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFixedController(t *testing.T) {
	c, err := NewController(ControllerConfig{Coef: 0.05})
	require.NoError(t, err)
	for _, kl := range []float64{0, 1, 100, math.NaN()} {
		c.Update(kl, 64)
		assert.Equal(t, 0.05, c.Coef())
	}
	// A fixed controller ignores Target and Horizon, as the reference does.
	_, err = NewController(ControllerConfig{Type: FixedController, Coef: 0.1, Horizon: -1})
	assert.NoError(t, err)
}

func TestAdaptiveController(t *testing.T) {
	a, err := NewAdaptive(0.01, 0.1, 100)
	require.NoError(t, err)
	// Inside the clip: pe = 0.12/0.1 - 1 = 0.2 (boundary), mult = 1 + 0.2*10/100.
	a.Update(0.12, 10)
	assert.InDelta(t, 0.01*(1+(0.12/0.1-1)*10/100), a.Coef(), 1e-18)
	// Far below target: pe clipped to -0.2; a large step makes mult negative (no floor).
	a.Update(0, 1000)
	assert.InDelta(t, 0.01*(1+(0.12/0.1-1)*10/100)*(1-0.2*1000/100.0), a.Coef(), 1e-15)
	assert.Less(t, a.Coef(), 0.0)
	// Far above target: pe clipped to 0.2.
	b, _ := NewAdaptive(1, 0.1, 10)
	b.Update(50, 5)
	assert.Equal(t, 1*(1+0.2*5/10.0), b.Coef())
	// NaN propagates.
	b.Update(math.NaN(), 1)
	assert.True(t, math.IsNaN(b.Coef()))
}

func TestControllerConfigValidate(t *testing.T) {
	cases := []struct {
		cfg ControllerConfig
		arg string
	}{
		{ControllerConfig{Type: AdaptiveController, Coef: 1, Target: 0.1, Horizon: 0}, "Horizon"},
		{ControllerConfig{Type: AdaptiveController, Coef: 1, Target: 0.1, Horizon: -5}, "Horizon"},
		{ControllerConfig{Type: AdaptiveController, Coef: 1, Target: 0.1, Horizon: math.NaN()}, "Horizon"},
		{ControllerConfig{Type: AdaptiveController, Coef: 1, Target: 0, Horizon: 10}, "Target"},
		{ControllerConfig{Type: ControllerType(5), Coef: 1}, "Type"},
		{ControllerConfig{Coef: math.Inf(1)}, "Coef"},
	}
	for _, c := range cases {
		_, err := NewController(c.cfg)
		require.Error(t, err, c.arg)
		assert.True(t, errors.Is(err, tensor.ErrParam))
		var te *tensor.Error
		require.True(t, errors.As(err, &te))
		assert.Equal(t, c.arg, te.Arg)
		assert.Contains(t, err.Error(), "divergence.")
	}
	_, err := NewAdaptive(1, 0.1, 0)
	assert.ErrorIs(t, err, tensor.ErrParam)
	require.NoError(t, ControllerConfig{}.Validate())
}

func TestControllerTypeText(t *testing.T) {
	for _, typ := range []ControllerType{FixedController, AdaptiveController} {
		got, err := ParseControllerType(typ.String())
		require.NoError(t, err)
		assert.Equal(t, typ, got)
	}
	_, err := ParseControllerType("linear")
	assert.ErrorIs(t, err, tensor.ErrParam)
	var cfg ControllerConfig
	require.NoError(t, json.Unmarshal([]byte(`{"kl_type":"adaptive","kl_coef":0.001,"kl_target":0.1,"kl_horizon":10000}`), &cfg))
	assert.Equal(t, ControllerConfig{Type: AdaptiveController, Coef: 0.001, Target: 0.1, Horizon: 10000}, cfg)
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	assert.JSONEq(t, `{"kl_type":"adaptive","kl_coef":0.001,"kl_target":0.1,"kl_horizon":10000}`, string(b))
	assert.Error(t, json.Unmarshal([]byte(`{"kl_type":"linear"}`), &cfg))
	assert.Equal(t, "ControllerType(7)", ControllerType(7).String())
}
