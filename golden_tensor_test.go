package mtrl_test

import (
	"github.com/mtrl-go/mtrl/internal/golden"
	"github.com/mtrl-go/mtrl/tensor"
)

// tensorGolden returns the handlers for the tensor op family (semantics:
// docs/semantics.md#masked-statistics, docs/semantics.md#response-mask,
// docs/semantics.md#log-probs-and-entropy).
func tensorGolden() map[string]goldenHandler {
	return map[string]goldenHandler{
		"masked_mean": func(c *golden.Case) error {
			v, m := c.F32("values"), c.F32("mask")
			if c.Params["dim"] == nil {
				got, err := tensor.MaskedMean(v, m)
				c.Check("mean", got)
				return err
			}
			if d := c.Int("dim"); d != -1 {
				c.T.Fatalf("unsupported dim %d", d) // the vectors' dim is null or -1 only
			}
			dst := c.New(tensor.Float32, v.Dim(0))
			err := tensor.MaskedMeanRows(dst, v, m)
			c.Check("mean", dst)
			return err
		},
		"masked_var": func(c *golden.Case) error {
			got, err := tensor.MaskedVar(c.F32("values"), c.F32("mask"), c.Bool("unbiased"))
			c.Check("var", got)
			return err
		},
		"masked_whiten": func(c *golden.Case) error {
			v := c.F32("values")
			dst := tensor.Must(tensor.NewLike(v, tensor.Float32))
			err := tensor.MaskedWhiten(dst, v, c.F32("mask"))
			c.Check("whitened", dst)
			return err
		},
		"get_response_mask": func(c *golden.Case) error {
			ids := c.I32("response_ids")
			var eos []int32
			switch e := c.Params["eos_token_id"].(type) {
			case float64:
				eos = []int32{int32(e)}
			case []any:
				for _, x := range e {
					eos = append(eos, int32(x.(float64)))
				}
			}
			dst := tensor.Must(tensor.NewLike(ids, tensor.Float32))
			err := tensor.ResponseMask(dst, ids, eos...)
			c.Check("response_mask", dst)
			return err
		},
		"log_probs_entropy": func(c *golden.Case) error {
			logits, ys := c.F32("logits"), c.I32("responses")
			lp := tensor.Must(tensor.NewLike(ys, tensor.Float32))
			ent := tensor.Must(tensor.NewLike(ys, tensor.Float32))
			err := tensor.LogProbEntropy(lp, ent, logits, ys, float32(c.Float("temperature")))
			c.Check("log_probs", lp)
			c.Check("entropy", ent)
			return err
		},
	}
}
