package mtrl_test

import (
	"math"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/internal/golden"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
)

// goldenUpdatePolicy runs the reference's update_policy end to end
// (docs/semantics.md#policy-update) through tprl.UpdateConfig.Prepare / Update.MicroBatch, in the
// reference's shaping scope, and derives actor/grad_norm by carrying the log-prob gradients back to
// the raw logits with tensor.LogProbEntropyBackward.
func goldenUpdatePolicy(c *golden.Case) error {
	lossType, err := ppo.ParseLossType(c.String("loss_type"))
	if err != nil {
		return err
	}
	agg, err := ppo.ParseAggMode(c.String("loss_avg_mode"))
	if err != nil {
		return err
	}
	klKind, err := divergence.ParseKind(c.String("kl_penalty"))
	if err != nil {
		return err
	}
	if c.Int("ppo_epochs") != 1 || c.Int("world_size") != 1 {
		c.T.Fatalf("the format fixes ppo_epochs = world_size = 1")
	}
	cfg := tprl.UpdateConfig{
		Tokens: tprl.Config{
			EnableEntropyFiltering:      c.Bool("use_vppo_on_entropy"),
			TopPEntropyTokens:           c.Float("top_p_entropy_tokens"),
			EnablePerceptionFiltering:   c.Bool("use_vppo_on_perception"),
			TopPPerceptionTokens:        c.Float("top_p_perception_tokens"),
			EnableTrajectoryReweighting: c.Bool("use_advantage_shaping"),
			TrajectoryScalingMin:        c.Float("advantage_scaling_min"),
			// The reference: mu per micro-batch, shaping only with the perception filter, and
			// ties at a mask's threshold to the lower index (its stable sort).
			TrajectoryShapingScope:    tprl.PerMicroBatchScope,
			ShapingRequiresPerception: true,
			TiesToLowerIndex:          true,
		},
		Policy: ppo.PolicyConfig{
			LossType: lossType,
			ClipLow:  c.Float("clip_ratio_low"), ClipHigh: c.Float("clip_ratio_high"), ClipDual: c.Float("clip_ratio_dual"),
			TauPos: c.FloatOr("tau_positive", ppo.DefaultTauPos), TauNeg: c.FloatOr("tau_negative", ppo.DefaultTauNeg),
			Agg: ppo.Agg{Mode: agg},
		},
		WorldSize: c.Int("world_size"),
	}
	if c.Bool("use_kl_loss") {
		cfg.KLLoss = &ppo.KLConfig{Kind: klKind, Coef: c.Float("kl_coef")}
	}
	if c.Bool("use_entropy_penalty") {
		cfg.EntropyPenalty = &ppo.EntropyConfig{Coef: c.Float("entropy_penalty_coef")}
	}
	temperature := float32(c.Float("temperature"))
	logits, responses := c.F32("logits"), c.I32("responses")
	mask, old, adv := c.F32("response_mask"), c.F32("old_log_probs"), c.F32("advantages")
	// The case's log_probs/entropy are exactly what the reference computed from the logits;
	// feeding them keeps top-p ties identical. Our fused op must agree with them too.
	logp, entropy := c.F32("log_probs"), c.F32("entropy")
	ourLogp := tensor.Must(tensor.NewLike(responses, tensor.Float32))
	ourEnt := tensor.Must(tensor.NewLike(responses, tensor.Float32))
	if err := tensor.LogProbEntropy(ourLogp, ourEnt, logits, responses, temperature); err != nil {
		return err
	}
	pairs := [][2]*tensor.Tensor{{ourLogp, logp}}
	if cfg.Tokens.EnableEntropyFiltering { // otherwise the reference skips entropy (zeros)
		pairs = append(pairs, [2]*tensor.Tensor{ourEnt, entropy})
	}
	for _, pair := range pairs {
		a, b := c.Host(pair[0]), c.Host(pair[1])
		for i := range a {
			if math.Abs(float64(a[i]-b[i])) > 1e-5+1e-5*math.Abs(float64(b[i])) {
				c.T.Errorf("LogProbEntropy[%d] = %v, the reference computed %v", i, a[i], b[i])
				break
			}
		}
	}
	var aug, ref *tensor.Tensor
	if c.HasIn("aug_log_probs") {
		aug = c.F32("aug_log_probs")
	}
	if c.HasIn("ref_log_probs") {
		ref = c.F32("ref_log_probs")
	}

	n, cols := mask.Dim(0), mask.Dim(1)
	mini, micro := c.Int("mini_batch_size"), c.Int("micro_batch_size")
	grad := c.New(tensor.Float32, n, cols)
	ltm := c.New(tensor.Float32, n, cols)
	shaped := c.New(tensor.Float32, n, cols)
	var pgLoss, loss []float32
	metrics := map[string][]float64{}
	haveMask := false
	rows := func(t *tensor.Tensor, lo, hi int) *tensor.Tensor {
		if t == nil {
			return nil
		}
		return tensor.Must(t.Rows(lo, hi))
	}
	for mlo := 0; mlo < n; mlo += mini {
		mhi := min(mlo+mini, n)
		u, err := cfg.Prepare(tprl.MiniBatch{ResponseMask: rows(mask, mlo, mhi), OldLogProbs: rows(old, mlo, mhi),
			Advantages: rows(adv, mlo, mhi), AugLogProbs: rows(aug, mlo, mhi), RefLogProbs: rows(ref, mlo, mhi)})
		if err != nil {
			return err
		}
		for lo := mlo; lo < mhi; lo += micro {
			hi := min(lo+micro, mhi)
			r, err := u.MicroBatch(rows(grad, lo, hi), tprl.MicroInputs{LogProbs: rows(logp, lo, hi), Entropy: rows(entropy, lo, hi)}, lo-mlo, hi-mlo)
			if err != nil {
				return err
			}
			pgLoss, loss = append(pgLoss, r.PGLoss), append(loss, r.Loss)
			if r.LossTokenMask != nil {
				haveMask = true
				if err := tensor.CopyInto(rows(ltm, lo, hi), r.LossTokenMask); err != nil {
					return err
				}
			}
			if err := tensor.CopyInto(rows(shaped, lo, hi), r.Advantages); err != nil {
				return err
			}
		}
		for k, v := range u.Metrics {
			if k == "actor/kl_loss" || k == "actor/kl_coef" || k == "actor/entropy_penalty_coef" {
				metrics[k] = v // overwritten by the reference, not appended
			} else {
				metrics[k] = append(metrics[k], v...)
			}
		}
		// actor/grad_norm: the L2 norm of d(sum of micro losses)/d(raw logits) of this mini-batch.
		dlogits := c.New(tensor.Float32, mhi-mlo, cols, logits.Dim(2))
		if err := tensor.LogProbEntropyBackward(dlogits, tensor.LogProbGrad{
			Logits: rows(logits, mlo, mhi), Targets: rows(responses, mlo, mhi),
			LogProbs: rows(logp, mlo, mhi), DLogProbs: rows(grad, mlo, mhi),
			Temperature: temperature,
		}); err != nil {
			return err
		}
		d := c.Host(dlogits)
		var ss float64
		for _, x := range d {
			ss += float64(x) * float64(x)
		}
		metrics["actor/grad_norm"] = append(metrics["actor/grad_norm"], math.Sqrt(ss))
	}
	if haveMask {
		c.Check("loss_token_mask", ltm)
	}
	c.Check("shaped_advantages", shaped)
	c.Check("pg_loss", pgLoss)
	c.Check("loss", loss)
	c.Check("grad_log_probs", grad)
	for k, v := range metrics { // the overwritten metrics are scalars in the case
		if len(v) == 1 && c.HasOut("metric:"+k) && len(c.Outputs["metric:"+k].Shape) == 0 {
			metrics[k] = v[:1]
		}
	}
	c.CheckMetrics(metrics)
	return nil
}
