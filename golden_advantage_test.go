package mtrl_test

import (
	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/internal/golden"
	"github.com/mtrl-go/mtrl/tensor"
)

// advantageGolden returns the handlers for the advantage op family (semantics:
// docs/semantics.md#advantage-estimators).
func advantageGolden() map[string]goldenHandler {
	// outs allocates advantages and returns shaped like the rewards.
	outs := func(c *golden.Case) (adv, ret, rewards, mask *tensor.Tensor) {
		rewards = c.F32("token_level_rewards")
		mask = c.F32("response_mask")
		adv = tensor.Must(tensor.NewLike(rewards, tensor.Float32))
		ret = tensor.Must(tensor.NewLike(rewards, tensor.Float32))
		return adv, ret, rewards, mask
	}
	check := func(c *golden.Case, adv, ret *tensor.Tensor, err error) error {
		if err != nil {
			return err
		}
		c.Check("advantages", adv)
		c.Check("returns", ret)
		return nil
	}
	grpoOpts := func(c *golden.Case) advantage.GRPOOptions {
		return advantage.GRPOOptions{Eps: c.FloatOr("eps", advantage.DefaultEps)}
	}
	return map[string]goldenHandler{
		"gae": func(c *golden.Case) error {
			adv, ret, r, m := outs(c)
			err := advantage.ComputeWithReturns(adv, ret, advantage.Inputs{Rewards: r, Values: c.F32("values"), ResponseMask: m}, advantage.Config{Estimator: advantage.EstimatorGAE, Gamma: c.Float("gamma"), Lambda: c.Float("lam")})
			return check(c, adv, ret, err)
		},
		"grpo": func(c *golden.Case) error {
			adv, ret, r, m := outs(c)
			err := advantage.ComputeWithReturns(adv, ret, advantage.Inputs{Rewards: r, ResponseMask: m, Index: c.I32("index")}, withGRPO(advantage.Config{Estimator: advantage.EstimatorGRPO}, grpoOpts(c)))
			return check(c, adv, ret, err)
		},
		"grpo_passk": func(c *golden.Case) error {
			adv, ret, r, m := outs(c)
			err := advantage.ComputeWithReturns(adv, ret, advantage.Inputs{Rewards: r, ResponseMask: m, Index: c.I32("index")}, withGRPO(advantage.Config{Estimator: advantage.EstimatorGRPOPassK}, grpoOpts(c)))
			return check(c, adv, ret, err)
		},
		"rloo": func(c *golden.Case) error {
			adv, ret, r, m := outs(c)
			err := advantage.ComputeWithReturns(adv, ret, advantage.Inputs{Rewards: r, ResponseMask: m, Index: c.I32("index")}, advantage.Config{Estimator: advantage.EstimatorRLOO})
			return check(c, adv, ret, err)
		},
		"reinforce_plus_plus": func(c *golden.Case) error {
			adv, ret, r, m := outs(c)
			err := advantage.ComputeWithReturns(adv, ret, advantage.Inputs{Rewards: r, ResponseMask: m}, advantage.Config{Estimator: advantage.EstimatorReinforcePlusPlus, Gamma: c.Float("gamma")})
			return check(c, adv, ret, err)
		},
		"remax": func(c *golden.Case) error {
			adv, ret, r, m := outs(c)
			err := advantage.ComputeWithReturns(adv, ret, advantage.Inputs{Rewards: r, ResponseMask: m, Baselines: c.F32("reward_baselines")}, advantage.Config{Estimator: advantage.EstimatorReMax})
			return check(c, adv, ret, err)
		},
	}
}

// withGRPO sets the GRPO options of a case on an estimator configuration.
func withGRPO(c advantage.Config, o advantage.GRPOOptions) advantage.Config {
	c.Eps, c.StdFloor, c.NoStdNorm = o.Eps, o.StdFloor, o.NoStdNorm
	return c
}
