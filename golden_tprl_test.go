package mtrl_test

import (
	"strings"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/internal/golden"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
)

// tprlGolden returns the handlers for the tprl op family (semantics: docs/semantics.md#entropy-mask
// to docs/semantics.md#policy-update).
func tprlGolden() map[string]goldenHandler {
	return map[string]goldenHandler{
		"entropy_top_p_mask":    goldenEntropyMask,
		"perception_top_p_mask": goldenPerceptionMask,
		"combined_token_mask":   goldenCombinedMask,
		"advantage_shaping":     goldenAdvantageShaping,
		"update_policy":         goldenUpdatePolicy,
	}
}

// tprlHasMetrics reports whether the case records any metric:* output.
func tprlHasMetrics(c *golden.Case) bool {
	for name := range c.Outputs {
		if strings.HasPrefix(name, "metric:") {
			return true
		}
	}
	return false
}

func tprlNewF32Like(t *tensor.Tensor) *tensor.Tensor {
	return tensor.Must(tensor.NewLike(t, tensor.Float32))
}

// tprlRowCounts returns the number of selected tokens per row of a [B, T] 0/1 mask.
func tprlRowCounts(c *golden.Case, m *tensor.Tensor) []int {
	v := c.Host(m)
	cols := m.Dim(1)
	out := make([]int, m.Dim(0))
	for i := range out {
		for _, x := range v[i*cols : (i+1)*cols] {
			if x != 0 {
				out[i]++
			}
		}
	}
	return out
}

// tprlCheckSelection compares mask, k and the metrics of a top-p selection case. In the
// ties_count_only cases the reference's choice among ties is unspecified, so those cases record
// only k and the per-row selected count.
// k is not an output of the mask ops: it is tensor.TopPCount of each row's valid count.
func tprlCheckSelection(c *golden.Case, dst, mask *tensor.Tensor, p float32, s tprl.SelectionStats) {
	k := tprlRowCounts(c, mask)
	for i, n := range k {
		k[i] = tensor.TopPCount(n, p)
	}
	c.Check("k", k)
	if c.HasOut("selected_count") {
		c.Check("selected_count", tprlRowCounts(c, dst))
	}
	if c.HasOut("loss_token_mask") {
		c.Check("loss_token_mask", dst)
	}
	if tprlHasMetrics(c) {
		c.CheckMetrics(tprlLists(s.Metrics()))
	}
}

func tprlLists(m map[string]float64) map[string][]float64 {
	out := make(map[string][]float64, len(m))
	for k, v := range m {
		out[k] = []float64{v}
	}
	return out
}

func goldenEntropyMask(c *golden.Case) error {
	entropy, mask := c.F32("entropy"), c.F32("response_mask")
	dst := tprlNewF32Like(entropy)
	p := float32(c.Float("top_p"))
	s, err := tprl.EntropyMask(dst, entropy, mask, p)
	if err != nil {
		return err
	}
	tprlCheckSelection(c, dst, mask, p, s)
	return nil
}

func goldenPerceptionMask(c *golden.Case) error {
	old, aug, mask := c.F32("old_log_probs"), c.F32("aug_log_probs"), c.F32("response_mask")
	score, dst := tprlNewF32Like(old), tprlNewF32Like(old)
	p := float32(c.Float("top_p"))
	if err := divergence.PerceptionScore(score, old, aug); err != nil {
		return err
	}
	s, err := tprl.PerceptionMask(dst, score, mask, p)
	if err != nil {
		return err
	}
	c.Check("low_var_kl", score)
	tprlCheckSelection(c, dst, mask, p, s)
	return nil
}

func goldenCombinedMask(c *golden.Case) error {
	entropy, old, aug, mask := c.F32("entropy"), c.F32("old_log_probs"), c.F32("aug_log_probs"), c.F32("response_mask")
	em, pm, ltm, score := tprlNewF32Like(entropy), tprlNewF32Like(entropy), tprlNewF32Like(entropy), tprlNewF32Like(entropy)
	es, err := tprl.EntropyMask(em, entropy, mask, float32(c.Float("top_p_entropy")))
	if err != nil {
		return err
	}
	if err := divergence.PerceptionScore(score, old, aug); err != nil {
		return err
	}
	ps, err := tprl.PerceptionMask(pm, score, mask, float32(c.Float("top_p_perception")))
	if err != nil {
		return err
	}
	cs, err := tprl.UnionMask(ltm, tprl.UnionInputs{EntropyMask: em, PerceptionMask: pm, Entropy: entropy, PerceptionScore: score, ResponseMask: mask})
	if err != nil {
		return err
	}
	c.Check("entropy_mask", em)
	c.Check("perception_mask", pm)
	c.Check("loss_token_mask", ltm)
	c.Check("low_var_kl", score)
	metrics := map[string][]float64{}
	es.AppendMetrics(metrics)
	ps.AppendMetrics(metrics)
	cs.AppendMetrics(metrics)
	c.CheckMetrics(metrics)
	return nil
}

// goldenAdvantageShaping runs shaping with the reference's scope (PerMicroBatchScope: mu per
// micro-batch, range per mini-batch), which is what the vectors record.
func goldenAdvantageShaping(c *golden.Case) error {
	old, aug, mask, adv := c.F32("old_log_probs"), c.F32("aug_log_probs"), c.F32("response_mask"), c.F32("advantages")
	rows := old.Dim(0)
	score, shaped := tprlNewF32Like(old), tprlNewF32Like(old)
	if err := divergence.PerceptionScore(score, old, aug); err != nil {
		return err
	}
	sens := c.New(tensor.Float32, rows)
	factors := c.New(tensor.Float32, rows)
	micro, err := tprl.ShapeBatch(tprl.ShapingOutputs{Advantages: shaped, Factors: factors, Sensitivity: sens}, tprl.ShapingInputs{Advantages: adv, PerceptionScore: score, ResponseMask: mask}, tprl.ShapingOptions{
		ScalingMin:     c.Float("advantage_scaling_min"),
		Scope:          tprl.PerMicroBatchScope,
		MiniBatchSize:  c.Int("mini_batch_size"),
		MicroBatchSize: c.Int("micro_batch_size"),
	})
	if err != nil {
		return err
	}
	c.Check("low_var_kl", score)
	c.Check("sensitivity_score", sens)
	c.Check("scaling_factor", factors)
	c.Check("shaped_advantages", shaped)
	var gmin, gmax, target, smean, fmean []float32
	var applied []bool
	for _, m := range micro {
		gmin = append(gmin, m.GlobalMin)
		gmax = append(gmax, m.GlobalMax)
		applied = append(applied, m.Applied)
		target = append(target, m.TargetMax)
		smean = append(smean, m.ScoreMean)
		fmean = append(fmean, m.FactorMean)
	}
	c.Check("global_min_score", gmin)
	c.Check("global_max_score", gmax)
	c.Check("shaping_applied", applied)
	c.Check("target_max", target)
	c.Check("sensitivity_score_mean", smean)
	c.Check("scaling_factor_mean", fmean)
	return nil
}
