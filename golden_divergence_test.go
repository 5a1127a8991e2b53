package mtrl_test

import (
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/internal/golden"
	"github.com/mtrl-go/mtrl/tensor"
)

// divergenceGolden returns the handlers for the divergence op family (FORMAT.md §5.1–§5.3).
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
			dst := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, shape...))
			err = divergence.Penalty(dst, lp, ref, kind)
			c.Check("kl", dst)
			return err
		},
	}
}
