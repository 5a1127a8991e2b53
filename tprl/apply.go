package tprl

import (
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/tensor"
)

// Batch is the per-token input of one mini-batch for Config.Apply. All tensors are float32
// [B, T] on one backend.
type Batch struct {
	// ResponseMask is the response mask (1 = valid token); required.
	ResponseMask *tensor.Tensor
	// Entropy is the per-token entropy of the policy; required with entropy filtering.
	Entropy *tensor.Tensor
	// PerceptionScore is the perception score of divergence.PerceptionScore, needed with
	// perception filtering or shaping. Pass it when the caller has it (UpdateConfig.Prepare
	// computes it once per mini-batch); when nil, Apply computes it from OldLogProbs and
	// AugLogProbs.
	PerceptionScore *tensor.Tensor
	// OldLogProbs and AugLogProbs are the log-probs of the sampled tokens with the original
	// and with the perturbed image; required with perception filtering or shaping when
	// PerceptionScore is nil.
	OldLogProbs, AugLogProbs *tensor.Tensor
	// Advantages are the per-token advantages; required with shaping, otherwise returned as
	// they are (and may be nil).
	Advantages *tensor.Tensor
	// MicroBatchSize is the number of rows per micro-batch (contiguous, the last may be
	// shorter): metrics are appended once per micro-batch, and with PerMicroBatchScope mu is
	// taken per micro-batch. 0 means the whole batch is one micro-batch.
	MicroBatchSize int
	// ShapingStats, when not nil, are the shaping statistics to use instead of this batch's own:
	// for example the all-reduced statistics of every device's mini-batch (see ShapingStats).
	ShapingStats *ShapingStats
	// Random seeds the random filter and the random tie order of the entropy and perception
	// masks (its FirstRow is the index of this batch's first row in the step's batch); unused
	// with TiesToLowerIndex and no random filter.
	Random RandomKey
}

// Result is what Config.Apply produces. Its tensors are newly allocated on the mask's backend
// and owned by the caller (Release frees them), except Advantages when shaping is off, which is
// the caller's Batch.Advantages.
type Result struct {
	// LossTokenMask is the token mask of the loss (float32 0/1 [B, T]): the entropy mask, the
	// perception mask, their union, or the random mask; nil when no filter is enabled.
	LossTokenMask *tensor.Tensor
	// EntropyMask, PerceptionMask and RandomMask are the individual masks, nil when that filter
	// is off.
	EntropyMask, PerceptionMask, RandomMask *tensor.Tensor
	// PerceptionScore is low_var_kl [B, T] when perception filtering or shaping is on:
	// Batch.PerceptionScore when given (then not owned by the Result), otherwise computed.
	PerceptionScore *tensor.Tensor
	// Advantages are the shaped advantages, or Batch.Advantages when shaping is off.
	Advantages *tensor.Tensor
	// Sensitivity and ScalingFactors ([B]) and Shaping (one record per micro-batch) are set when
	// shaping is on; ShapingStats are the statistics it used.
	Sensitivity, ScalingFactors *tensor.Tensor
	Shaping                     []MicroBatchShaping
	ShapingStats                ShapingStats
	// Metrics holds the reference's metrics, one entry appended per micro-batch as the
	// reference appends them (keys missing where the reference logs nothing).
	Metrics map[string][]float64

	owned []*tensor.Tensor // what Apply allocated, each once
}

// Release frees the tensors Apply allocated (device memory; host tensors are left to the
// garbage collector). The Result's tensors must not be used afterwards. Releasing twice, or a
// nil Result, is a no-op.
func (r *Result) Release() error {
	if r == nil {
		return nil
	}
	var first error
	for _, t := range r.owned {
		if err := t.Release(); err != nil && first == nil {
			first = err
		}
	}
	r.owned = nil
	return first
}

// Apply runs the token filters and trajectory shaping of c on one mini-batch, per micro-batch as
// the reference's update_policy does (docs/semantics.md#policy-update, steps 1-2): entropy mask,
// perception mask, their union when both are on (or the random mask instead), and shaping when
// c.Shaping(). The mask of a row does not depend on the micro-batch split; with GlobalScope
// neither do the shaped advantages.
//
// Unlike the reference, shaping runs whenever EnableTrajectoryReweighting is set, computing
// the perception score itself if the perception filter is off; set ShapingRequiresPerception
// to reproduce the reference, where shaping without perception filtering silently does
// nothing.
func (c Config) Apply(b Batch) (res *Result, err error) {
	const op = "tprl.Config.Apply"
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := tensor.CheckShape(op, "ResponseMask", b.ResponseMask, -1, -1); err != nil {
		return nil, err
	}
	if err := tensor.CheckDType(op, "ResponseMask", b.ResponseMask, tensor.Float32); err != nil {
		return nil, err
	}
	if b.MicroBatchSize < 0 {
		return nil, tensor.Errorf(tensor.ErrParam, op, "MicroBatchSize", "is %d, want >= 0", b.MicroBatchSize)
	}
	shaping := c.Shaping()
	needScore := c.EnablePerceptionFiltering || shaping
	given := b.PerceptionScore != nil
	need := []struct {
		name string
		t    *tensor.Tensor
		on   bool
	}{
		{"Entropy", b.Entropy, c.EnableEntropyFiltering},
		{"PerceptionScore", b.PerceptionScore, needScore && given},
		{"OldLogProbs", b.OldLogProbs, needScore && !given},
		{"AugLogProbs", b.AugLogProbs, needScore && !given},
		{"Advantages", b.Advantages, shaping},
	}
	for _, n := range need {
		if !n.on {
			continue
		}
		if n.t == nil {
			return nil, tensor.Errorf(tensor.ErrShape, op, n.name, "is nil but required by the configuration")
		}
		if err := tensor.CheckSameShape(op, "ResponseMask", b.ResponseMask, n.name, n.t); err != nil {
			return nil, err
		}
		if err := tensor.CheckDType(op, n.name, n.t, tensor.Float32); err != nil {
			return nil, err
		}
		if err := tensor.CheckSameBackend(op, []string{"ResponseMask", n.name}, b.ResponseMask, n.t); err != nil {
			return nil, err
		}
	}

	res = &Result{Advantages: b.Advantages, Metrics: map[string][]float64{}}
	partial := res // the return statements below set res to nil
	defer func() {
		if err != nil {
			_ = partial.Release()
		}
	}()
	alloc := func(shape ...int) (*tensor.Tensor, error) {
		t, err := tensor.New(b.ResponseMask.Backend(), tensor.Float32, shape...)
		if err == nil {
			res.owned = append(res.owned, t)
		}
		return t, err
	}
	rows, cols := b.ResponseMask.Dim(0), b.ResponseMask.Dim(1)
	if c.EnableEntropyFiltering {
		if res.EntropyMask, err = alloc(rows, cols); err != nil {
			return nil, err
		}
	}
	if needScore && given {
		res.PerceptionScore = b.PerceptionScore
	} else if needScore {
		if res.PerceptionScore, err = alloc(rows, cols); err != nil {
			return nil, err
		}
		if err := divergence.PerceptionScore(res.PerceptionScore, b.OldLogProbs, b.AugLogProbs); err != nil {
			return nil, err
		}
	}
	if c.EnablePerceptionFiltering {
		if res.PerceptionMask, err = alloc(rows, cols); err != nil {
			return nil, err
		}
	}
	if c.EnableRandomFiltering {
		if res.RandomMask, err = alloc(rows, cols); err != nil {
			return nil, err
		}
		res.LossTokenMask = res.RandomMask // Validate: no other filter is on
	}
	switch {
	case c.EnableEntropyFiltering && c.EnablePerceptionFiltering:
		if res.LossTokenMask, err = alloc(rows, cols); err != nil {
			return nil, err
		}
	case c.EnableEntropyFiltering:
		res.LossTokenMask = res.EntropyMask
	case c.EnablePerceptionFiltering:
		res.LossTokenMask = res.PerceptionMask
	}
	opt := ShapingOptions{ScalingMin: c.TrajectoryScalingMin, Scope: c.TrajectoryShapingScope}
	if shaping {
		if res.Advantages, err = alloc(rows, cols); err != nil {
			return nil, err
		}
		if res.Sensitivity, err = alloc(rows); err != nil {
			return nil, err
		}
		if res.ScalingFactors, err = alloc(rows); err != nil {
			return nil, err
		}
		if err := SensitivityScores(res.Sensitivity, res.PerceptionScore, b.ResponseMask); err != nil {
			return nil, err
		}
		if b.ShapingStats != nil {
			res.ShapingStats = *b.ShapingStats
		} else if res.ShapingStats, err = ShapingStatsOf(res.Sensitivity, b.ResponseMask); err != nil {
			return nil, err
		}
	}

	micro := b.MicroBatchSize
	if micro == 0 {
		micro = max(rows, 1)
	}
	for lo := 0; lo < rows; lo += micro {
		hi := min(lo+micro, rows)
		v, err := views(lo, hi, b.ResponseMask, b.Entropy, res.PerceptionScore, res.EntropyMask, res.PerceptionMask,
			res.LossTokenMask, b.Advantages, res.Advantages, res.Sensitivity, res.ScalingFactors, res.RandomMask)
		if err != nil {
			return nil, err
		}
		mask, ent, score, em, pm, ltm, adv, shaped, sens, fac, rm := v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10]
		if c.EnableEntropyFiltering {
			s, err := c.entropyMask(em, ent, mask, b.Random.rows(lo))
			if err != nil {
				return nil, err
			}
			_ = s.AppendMetrics(res.Metrics) // res.Metrics is not nil
		}
		if c.EnablePerceptionFiltering {
			s, err := c.perceptionMask(pm, score, mask, b.Random.rows(lo))
			if err != nil {
				return nil, err
			}
			_ = s.AppendMetrics(res.Metrics) // res.Metrics is not nil
		}
		if c.EnableRandomFiltering {
			s, err := RandomMask(rm, mask, float32(c.TopPRandomTokens), b.Random.rows(lo))
			if err != nil {
				return nil, err
			}
			s.AppendMetrics(res.Metrics)
		}
		if c.EnableEntropyFiltering && c.EnablePerceptionFiltering {
			s, err := UnionMask(ltm, UnionInputs{EntropyMask: em, PerceptionMask: pm, Entropy: ent, PerceptionScore: score, ResponseMask: mask})
			if err != nil {
				return nil, err
			}
			_ = s.AppendMetrics(res.Metrics) // res.Metrics is not nil
		}
		if shaping {
			s, err := ShapeAdvantages(ShapingOutputs{Advantages: shaped, Factors: fac},
				ShapingInputs{Advantages: adv, Sensitivity: sens, ResponseMask: mask}, res.ShapingStats, opt)
			if err != nil {
				return nil, err
			}
			_ = s.AppendMetrics(res.Metrics) // res.Metrics is not nil
			res.Shaping = append(res.Shaping, s)
		}
	}
	return res, nil
}

// views returns the row views [lo, hi) of ts (nil stays nil).
func views(lo, hi int, ts ...*tensor.Tensor) ([]*tensor.Tensor, error) {
	out := make([]*tensor.Tensor, len(ts))
	for i, t := range ts {
		if t == nil {
			continue
		}
		v, err := t.Rows(lo, hi)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// entropyMask and perceptionMask select with the configured tie rule.
func (c Config) entropyMask(dst, entropy, mask *tensor.Tensor, key RandomKey) (SelectionStats, error) {
	if c.TiesToLowerIndex {
		return EntropyMask(dst, entropy, mask, float32(c.TopPEntropyTokens))
	}
	return EntropyMaskRandomTies(dst, entropy, mask, float32(c.TopPEntropyTokens), key)
}

func (c Config) perceptionMask(dst, score, mask *tensor.Tensor, key RandomKey) (SelectionStats, error) {
	if c.TiesToLowerIndex {
		return PerceptionMask(dst, score, mask, float32(c.TopPPerceptionTokens))
	}
	return PerceptionMaskRandomTies(dst, score, mask, float32(c.TopPPerceptionTokens), key)
}
