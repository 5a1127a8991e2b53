package mtrl_test

import (
	"github.com/mtrl-go/mtrl/internal/golden"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
)

// ppoGolden returns the handlers for the ppo op family (semantics:
// docs/semantics.md#loss-aggregation, docs/semantics.md#policy-loss, docs/semantics.md#value-loss).
func ppoGolden() map[string]goldenHandler {
	return map[string]goldenHandler{
		"average_loss": goldenAverageLoss,
		"policy_loss":  goldenPolicyLoss,
		"value_loss":   goldenValueLoss,
	}
}

// goldenAgg reads the mode param (named key) and the optional eps into a ppo.Agg.
func goldenAgg(c *golden.Case, key string) (ppo.Agg, error) {
	mode, err := ppo.ParseAggMode(c.String(key))
	if err != nil {
		return ppo.Agg{}, err
	}
	return ppo.Agg{Mode: mode, Eps: c.FloatOr("eps", 0)}, nil
}

// goldenAverageLoss runs average_loss (docs/semantics.md#loss-aggregation) and also checks that the
// gradient variant returns the same loss.
func goldenAverageLoss(c *golden.Case) error {
	agg, err := goldenAgg(c, "mode")
	if err != nil {
		return err
	}
	values, mask := c.F32("values"), c.F32("mask")
	loss, err := agg.Loss(values, mask)
	if err != nil {
		return err
	}
	c.Check("loss", loss)
	if agg.Eps == 0 {
		l2, err := ppo.Agg{Mode: agg.Mode}.Loss(values, mask)
		if err != nil {
			return err
		}
		if l2 != loss {
			c.T.Errorf("ppo.AverageLoss = %v, Agg.Loss = %v", l2, loss)
		}
	}
	g := tensor.Must(tensor.NewLike(values, tensor.Float32))
	l3, err := agg.LossGrad(g, values, mask)
	if err != nil {
		return err
	}
	if l3 != loss {
		c.T.Errorf("Agg.LossGrad = %v, Agg.Loss = %v", l3, loss)
	}
	return nil
}

func goldenPolicyLoss(c *golden.Case) error {
	lt, err := ppo.ParseLossType(c.String("loss_type"))
	if err != nil {
		return err
	}
	agg, err := goldenAgg(c, "loss_avg_mode")
	if err != nil {
		return err
	}
	cfg := ppo.PolicyConfig{
		LossType: lt,
		ClipLow:  c.Float("clip_ratio_low"),
		ClipHigh: c.Float("clip_ratio_high"),
		ClipDual: c.Float("clip_ratio_dual"),
		TauPos:   c.FloatOr("tau_positive", ppo.DefaultTauPos),
		TauNeg:   c.FloatOr("tau_negative", ppo.DefaultTauNeg),
		Agg:      agg,
	}
	in := ppo.PolicyInputs{
		OldLogProbs:  c.F32("old_log_probs"),
		LogProbs:     c.F32("log_probs"),
		Advantages:   c.F32("advantages"),
		ResponseMask: c.F32("response_mask"),
	}
	if c.HasIn("loss_token_mask") {
		in.TokenMask = c.F32("loss_token_mask")
	}
	grad := tensor.Must(tensor.NewLike(in.LogProbs, tensor.Float32))
	res, err := ppo.PolicyLoss(ppo.Grad{Dst: grad}, in, cfg)
	if err != nil {
		return err
	}
	c.Check("pg_loss", res.PGLoss)
	c.Check("grad_log_probs", grad)
	c.CheckMetrics(ppoMetricLists(res.Metrics()))
	// The forward-only call must agree with the forward+gradient call.
	fwd, err := ppo.PolicyLoss(ppo.Grad{}, in, cfg)
	if err != nil {
		return err
	}
	if fwd != res {
		c.T.Errorf("forward-only result %+v differs from %+v", fwd, res)
	}
	return nil
}

func goldenValueLoss(c *golden.Case) error {
	agg, err := goldenAgg(c, "loss_avg_mode")
	if err != nil {
		return err
	}
	in := ppo.ValueInputs{
		VPreds:       c.F32("vpreds"),
		Returns:      c.F32("returns"),
		Values:       c.F32("values"),
		ResponseMask: c.F32("response_mask"),
	}
	grad := tensor.Must(tensor.NewLike(in.VPreds, tensor.Float32))
	res, err := ppo.ValueLoss(ppo.Grad{Dst: grad}, in, ppo.ValueConfig{ClipRange: c.Float("cliprange_value"), Agg: agg})
	if err != nil {
		return err
	}
	c.Check("vf_loss", res.VFLoss)
	c.Check("grad_vpreds", grad)
	c.CheckMetrics(ppoMetricLists(res.Metrics()))
	return nil
}

func ppoMetricLists(m map[string]float64) map[string][]float64 {
	out := make(map[string][]float64, len(m))
	for k, v := range m {
		out[k] = []float64{v}
	}
	return out
}
