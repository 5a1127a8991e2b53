package tprl

import (
	"math"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
)

// UpdateConfig is the actor side of one VPPO policy update: the fields of the reference's
// ActorConfig that its update_policy reads (docs/semantics.md#policy-update).
type UpdateConfig struct {
	// Tokens selects the token filters and trajectory shaping.
	Tokens Config
	// Policy is the clipped policy objective and its aggregation (loss_type, clip ratios,
	// loss_avg_mode).
	Policy ppo.PolicyConfig
	// KLLoss, when not nil, adds ppo.KLLoss to the loss: Coef * average_loss(Kind penalty of
	// log_probs to ref_log_probs) (the reference's use_kl_loss, kl_penalty, kl_coef); set Kind
	// and Coef. The update supplies Agg (the policy's): leave it zero.
	KLLoss *ppo.KLConfig
	// EntropyPenalty, when not nil, adds ppo.EntropyPenalty: Coef * (-masked_mean(log_probs)),
	// token-averaged (use_entropy_penalty, entropy_penalty_coef).
	EntropyPenalty *ppo.EntropyConfig
	// WorldSize is the number of data-parallel ranks (0 means 1); it enters the global token
	// scaling sum(m_micro) * WorldSize / GlobalTokens.
	WorldSize int
}

// Validate checks every part of the configuration.
func (c UpdateConfig) Validate() error {
	const op = "tprl.UpdateConfig.Validate"
	if err := c.Tokens.Validate(); err != nil {
		return err
	}
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	switch {
	case c.WorldSize < 0:
		return tensor.Errorf(tensor.ErrParam, op, "WorldSize", "is %d, want >= 1 (0 means 1)", c.WorldSize)
	}
	if kl := c.KLLoss; kl != nil {
		switch {
		case !kl.Kind.Valid():
			return tensor.Errorf(tensor.ErrParam, op, "KLLoss.Kind", "unknown divergence kind %v", kl.Kind)
		case math.IsNaN(kl.Coef) || math.IsInf(kl.Coef, 0):
			return tensor.Errorf(tensor.ErrParam, op, "KLLoss.Coef", "is %v, want a finite value", kl.Coef)
		case kl.Agg != (ppo.Agg{}):
			return tensor.Errorf(tensor.ErrParam, op, "KLLoss.Agg", "is %+v; the update uses Policy.Agg, leave it zero", kl.Agg)
		}
	}
	if ent := c.EntropyPenalty; ent != nil && (math.IsNaN(ent.Coef) || math.IsInf(ent.Coef, 0)) {
		return tensor.Errorf(tensor.ErrParam, op, "EntropyPenalty.Coef", "is %v, want a finite value", ent.Coef)
	}
	return nil
}

// MiniBatch is what an update knows about a mini-batch before any forward pass: float32
// [B, T] tensors on one backend from the rollout.
type MiniBatch struct {
	ResponseMask *tensor.Tensor // required
	OldLogProbs  *tensor.Tensor // required
	Advantages   *tensor.Tensor // required
	AugLogProbs  *tensor.Tensor // log-probs with the perturbed image; perception filter / shaping
	// PerceptionScore is divergence.PerceptionScore(OldLogProbs, AugLogProbs) when the caller
	// already has it (for example for its own diagnostics, or across PPO epochs); AugLogProbs
	// is then not needed. When nil, Prepare computes it once for the mini-batch.
	PerceptionScore *tensor.Tensor
	RefLogProbs     *tensor.Tensor // reference policy log-probs; needed with KLLoss
	// GlobalTokens is sum(response_mask) over this mini-batch on every rank (all-reduced);
	// 0 means this mini-batch's own count (one device).
	GlobalTokens float64
	// ShapingStats, when not nil, are all-reduced shaping statistics of every rank's
	// mini-batch (see ShapingStats); nil means this mini-batch's own.
	ShapingStats *ShapingStats
	// Random seeds the random filter (Config.EnableRandomFiltering); its FirstRow is the index
	// of the mini-batch's first row in the step's batch.
	Random RandomKey
}

// Update runs the micro-batches of one prepared mini-batch. Create it with
// UpdateConfig.Prepare, then call MicroBatch once per micro-batch with the current policy's
// log-probs and entropies of those rows, and Release it after the last one. Metrics accumulate
// across calls.
type Update struct {
	cfg          UpdateConfig
	mb           MiniBatch
	globalTokens float64
	stats        *ShapingStats
	score        *tensor.Tensor // the mini-batch's perception score
	ownsScore    bool           // Prepare allocated score
	// Metrics holds the reference's actor metrics: one entry appended per micro-batch, except
	// actor/kl_loss, actor/kl_coef and actor/entropy_penalty_coef, which the reference
	// overwrites (they keep the last micro-batch's value, as a one-element slice).
	Metrics map[string][]float64
}

// PerceptionScore is the mini-batch's perception score [B, T] (divergence.PerceptionScore),
// MiniBatch.PerceptionScore or, when that is nil, computed once by Prepare when perception
// filtering or shaping is on (then owned by the Update and valid until Release); nil when
// neither is on.
func (u *Update) PerceptionScore() *tensor.Tensor {
	if u == nil {
		return nil
	}
	return u.score
}

// Release frees what Prepare allocated (the perception score). MicroResults are released
// separately. Releasing twice is a no-op.
func (u *Update) Release() error {
	if u == nil || !u.ownsScore {
		return nil
	}
	err := u.score.Release()
	u.score, u.ownsScore = nil, false
	return err
}

// Prepare validates the configuration and the mini-batch and computes what every micro-batch
// shares: the global token count and, with perception filtering or shaping on, the perception
// score and the shaping statistics. The Update owns the score until Release.
func (c UpdateConfig) Prepare(mb MiniBatch) (*Update, error) {
	const op = "tprl.UpdateConfig.Prepare"
	if err := c.Validate(); err != nil {
		return nil, err
	}
	needAug := c.Tokens.EnablePerceptionFiltering || c.Tokens.Shaping()
	for _, in := range []struct {
		name string
		t    *tensor.Tensor
		need bool
	}{
		{"OldLogProbs", mb.OldLogProbs, true},
		{"Advantages", mb.Advantages, true},
		{"AugLogProbs", mb.AugLogProbs, needAug && mb.PerceptionScore == nil},
		{"PerceptionScore", mb.PerceptionScore, false},
		{"RefLogProbs", mb.RefLogProbs, c.KLLoss != nil},
	} {
		if in.t == nil {
			if in.need {
				return nil, tensor.Errorf(tensor.ErrShape, op, in.name, "is nil but required by the configuration")
			}
			continue
		}
		if err := tensor.CheckSameShape(op, "ResponseMask", mb.ResponseMask, in.name, in.t); err != nil {
			return nil, err
		}
		// Checked here, not first in MicroBatch after the work of Prepare.
		if err := tensor.CheckDType(op, in.name, in.t, tensor.Float32); err != nil {
			return nil, err
		}
		if err := tensor.CheckSameBackend(op, []string{"ResponseMask", in.name}, mb.ResponseMask, in.t); err != nil {
			return nil, err
		}
	}
	if err := tensor.CheckShape(op, "ResponseMask", mb.ResponseMask, -1, -1); err != nil {
		return nil, err
	}
	if err := tensor.CheckDType(op, "ResponseMask", mb.ResponseMask, tensor.Float32); err != nil {
		return nil, err
	}
	if mb.ResponseMask.Dim(0) == 0 {
		return nil, tensor.Errorf(tensor.ErrShape, op, "ResponseMask", "is an empty mini-batch (0 rows)")
	}
	u := &Update{cfg: c, mb: mb, globalTokens: mb.GlobalTokens, stats: mb.ShapingStats, Metrics: map[string][]float64{}}
	if u.globalTokens == 0 {
		_, n, err := tensor.MaskedSum(mb.ResponseMask, mb.ResponseMask)
		if err != nil {
			return nil, err
		}
		u.globalTokens = max(n, 1) // an all-padding mini-batch has zero losses anyway
	}
	if !(u.globalTokens > 0) || math.IsInf(u.globalTokens, 0) {
		return nil, tensor.Errorf(tensor.ErrParam, op, "GlobalTokens", "is %v, want a finite value > 0", mb.GlobalTokens)
	}
	if needAug && mb.PerceptionScore != nil {
		u.score = mb.PerceptionScore
	} else if needAug {
		rows, cols := mb.ResponseMask.Dim(0), mb.ResponseMask.Dim(1)
		b := mb.ResponseMask.Backend()
		var err error
		if u.score, err = tensor.New(b, tensor.Float32, rows, cols); err != nil {
			return nil, err
		}
		u.ownsScore = true
		if err := divergence.PerceptionScore(u.score, mb.OldLogProbs, mb.AugLogProbs); err != nil {
			_ = u.Release()
			return nil, err
		}
	}
	if c.Tokens.Shaping() && u.stats == nil {
		st, err := ShapingStatsOfScore(u.score, mb.ResponseMask)
		if err != nil {
			_ = u.Release()
			return nil, err
		}
		u.stats = &st
	}
	return u, nil
}

// MicroResult is the outcome of one micro-batch.
type MicroResult struct {
	// Loss is the scaled total the caller backpropagates: (pg_loss + KL term + entropy
	// penalty) * sum(m_micro) * WorldSize / GlobalTokens.
	Loss float32
	// PGLoss is the unscaled policy loss (the reference's actor/pg_loss).
	PGLoss float32
	// LossTokenMask is the TPRL token mask of these rows (nil when no filter is on) and
	// Advantages the advantages the loss used (shaped when shaping is on). Both are owned by the
	// caller until Release.
	LossTokenMask, Advantages *tensor.Tensor

	tokens *Result // the micro-batch's Config.Apply result, which allocated them
}

// Release frees the tensors the micro-batch allocated (LossTokenMask, shaped Advantages and the
// filters' intermediates). Releasing twice is a no-op.
func (r *MicroResult) Release() error {
	if r == nil {
		return nil
	}
	return r.tokens.Release()
}

// MicroInputs are the current policy's outputs for the rows of one micro-batch, float32
// [rows, T] on the mini-batch's backend.
type MicroInputs struct {
	// LogProbs are the log-probs of the sampled tokens; required. The gradient is w.r.t. them.
	LogProbs *tensor.Tensor
	// Entropy is the per-token entropy of the policy; required with the entropy filter.
	Entropy *tensor.Tensor
}

// MicroBatch computes the loss of rows [lo, hi) of the mini-batch and writes d Loss / d
// in.LogProbs into grad ([hi-lo, T], float32, overwritten).
func (u *Update) MicroBatch(grad *tensor.Tensor, in MicroInputs, lo, hi int) (MicroResult, error) {
	const op = "tprl.Update.MicroBatch"
	if u == nil || u.mb.ResponseMask == nil {
		return MicroResult{}, tensor.Errorf(tensor.ErrParam, op, "u", "is not an Update made by UpdateConfig.Prepare")
	}
	rows := u.mb.ResponseMask.Dim(0)
	if lo < 0 || hi <= lo || hi > rows {
		return MicroResult{}, tensor.Errorf(tensor.ErrParam, op, "lo, hi", "[%d, %d) is not a non-empty row range of [0, %d)", lo, hi, rows)
	}
	view := func(t *tensor.Tensor) (*tensor.Tensor, error) {
		if t == nil {
			return nil, nil
		}
		return t.Rows(lo, hi)
	}
	var v [5]*tensor.Tensor
	for i, t := range []*tensor.Tensor{u.mb.ResponseMask, u.mb.OldLogProbs, u.mb.Advantages, u.score, u.mb.RefLogProbs} {
		var err error
		if v[i], err = view(t); err != nil {
			return MicroResult{}, err
		}
	}
	mask, old, adv, score, ref := v[0], v[1], v[2], v[3], v[4]
	logp := in.LogProbs
	if err := tensor.CheckSameShape(op, "ResponseMask rows", mask, "LogProbs", logp); err != nil {
		return MicroResult{}, err
	}

	tok, err := u.cfg.Tokens.Apply(Batch{ResponseMask: mask, Entropy: in.Entropy, PerceptionScore: score, Advantages: adv,
		ShapingStats: u.stats, Random: u.mb.Random.rows(lo)})
	if err != nil {
		return MicroResult{}, err
	}
	done := false
	defer func() {
		if !done {
			_ = tok.Release()
		}
	}()
	for k, vs := range tok.Metrics {
		u.Metrics[k] = append(u.Metrics[k], vs...)
	}

	scale, err := ppo.TokenScale(mask, u.globalTokens, max(u.cfg.WorldSize, 1))
	if err != nil {
		return MicroResult{}, err
	}
	// The policy loss overwrites grad; the optional terms add to it.
	pol, err := ppo.PolicyLoss(ppo.Grad{Dst: grad, Scale: scale}, ppo.PolicyInputs{OldLogProbs: old, LogProbs: logp,
		Advantages: tok.Advantages, ResponseMask: mask, TokenMask: tok.LossTokenMask}, u.cfg.Policy)
	if err != nil {
		return MicroResult{}, err
	}
	for k, x := range pol.Metrics() {
		u.Metrics["actor/"+k] = append(u.Metrics["actor/"+k], x)
	}
	u.Metrics["actor/pg_loss"] = append(u.Metrics["actor/pg_loss"], float64(pol.PGLoss))
	total := pol.Loss
	acc := ppo.Grad{Dst: grad, Scale: scale, Accumulate: true}
	if u.cfg.KLLoss != nil {
		kcfg := *u.cfg.KLLoss
		kcfg.Agg = u.cfg.Policy.Agg
		kl, err := ppo.KLLoss(acc, logp, ref, mask, kcfg)
		if err != nil {
			return MicroResult{}, err
		}
		total += kl.Loss
		u.Metrics["actor/kl_loss"] = []float64{float64(kl.KL)}
		u.Metrics["actor/kl_coef"] = []float64{kcfg.Coef}
	}
	if u.cfg.EntropyPenalty != nil {
		pen, err := ppo.EntropyPenalty(acc, logp, mask, *u.cfg.EntropyPenalty)
		if err != nil {
			return MicroResult{}, err
		}
		total += pen
		u.Metrics["actor/entropy_penalty_coef"] = []float64{u.cfg.EntropyPenalty.Coef}
	}
	done = true
	return MicroResult{Loss: total, PGLoss: pol.PGLoss, LossTokenMask: tok.LossTokenMask, Advantages: tok.Advantages, tokens: tok}, nil
}
