package mtrl_test

import (
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/internal/golden"
	"github.com/mtrl-go/mtrl/tensor"
)

// divergenceGolden returns the handlers for the divergence op family (semantics:
// docs/semantics.md#kl-controllers, docs/semantics.md#kl-penalty, docs/semantics.md#kl-rewards).
func divergenceGolden() map[string]goldenHandler {
	return map[string]goldenHandler{
		"compute_kl": func(c *golden.Case) error {
			kind, err := divergence.ParseKind(c.String("kl_penalty"))
			if err != nil {
				return err
			}
			lp, ref := c.F32("log_probs"), c.F32("ref_log_probs")
			shape := lp.Shape()
			if kind == divergence.Full && len(shape) > 0 {
				shape = shape[:len(shape)-1]
			}
			dst := c.New(tensor.Float32, shape...)
			err = divergence.Penalty(dst, lp, ref, kind)
			c.Check("kl", dst)
			return err
		},
		"compute_rewards": func(c *golden.Case) error {
			scores := c.F32("token_level_scores")
			dst := tensor.Must(tensor.NewLike(scores, tensor.Float32))
			err := divergence.Rewards(dst, scores, c.F32("log_probs"), c.F32("ref_log_probs"), float32(c.Float("kl_ratio")))
			c.Check("rewards", dst)
			return err
		},
		"kl_controller": func(c *golden.Case) error {
			typ, err := divergence.ParseControllerType(c.String("kl_type"))
			if err != nil {
				return err
			}
			ctl, err := divergence.NewController(divergence.ControllerConfig{
				Type: typ, Coef: c.Float("kl_coef"), Target: c.Float("kl_target"), Horizon: c.Float("kl_horizon"),
			})
			if err != nil {
				return err
			}
			kl, steps := c.In("current_kl").Data, c.In("n_steps").Data
			coefs := make([]float64, len(kl))
			for j := range kl {
				ctl.Update(kl[j], int(steps[j]))
				coefs[j] = ctl.Coef()
			}
			c.Check("kl_coef", coefs)
			return nil
		},
	}
}
