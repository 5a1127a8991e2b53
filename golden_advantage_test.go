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
			err := advantage.GAE(adv, ret, r, c.F32("values"), m, c.Float("gamma"), c.Float("lam"))
			return check(c, adv, ret, err)
		},
		"grpo": func(c *golden.Case) error {
			adv, ret, r, m := outs(c)
			err := advantage.GRPO(adv, ret, r, m, c.I32("index"), grpoOpts(c))
			return check(c, adv, ret, err)
		},
		"grpo_passk": func(c *golden.Case) error {
			adv, ret, r, m := outs(c)
			err := advantage.GRPOPassK(adv, ret, r, m, c.I32("index"), grpoOpts(c))
			return check(c, adv, ret, err)
		},
		"rloo": func(c *golden.Case) error {
			adv, ret, r, m := outs(c)
			err := advantage.RLOO(adv, ret, r, m, c.I32("index"))
			return check(c, adv, ret, err)
		},
		"reinforce_plus_plus": func(c *golden.Case) error {
			adv, ret, r, m := outs(c)
			err := advantage.ReinforcePlusPlus(adv, ret, r, m, c.Float("gamma"))
			return check(c, adv, ret, err)
		},
		"remax": func(c *golden.Case) error {
			adv, ret, r, m := outs(c)
			err := advantage.ReMax(adv, ret, r, m, c.F32("reward_baselines"))
			return check(c, adv, ret, err)
		},
	}
}
