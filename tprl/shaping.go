package tprl

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/internal/parallel"
	"github.com/mtrl-go/mtrl/tensor"
)

// rangeEps is the reference's minimum score spread for shaping, compared in float32.
const rangeEps float32 = 1e-6

// muEps is added to the mean normalised score before taking its reciprocal (float32).
const muEps float32 = 1e-8

// ShapingKernel is the optional backend kernel behind trajectory shaping (SensitivityScores,
// ShapingStatsOf, ShapeAdvantages, ShapeBatch). The host keeps the plan: the kernel measures
// per-row sums and applies per-row factors, so only [B] vectors cross between host and device,
// and the statistics, the factors and the records are computed by the same host code on every
// backend. The tensors are validated.
type ShapingKernel interface {
	// ShapingRows fills, for each row i of mask [B, T], counts[i] with the float64 sum of
	// mask[i, t] over mask != 0 and, when values [B, T] is not nil, sums[i] with the float64
	// sum of float32(values*mask) over mask != 0 (hostops.MaskedSum per row). sums is nil
	// exactly when values is.
	ShapingRows(sums, counts []float64, values, mask *tensor.Tensor) error
	// ScaleRows writes dst[i, t] = src[i, t] * factors[i] in float32 for src [B, T] (dst may be
	// src); factors has B entries.
	ScaleRows(dst, src *tensor.Tensor, factors []float32) error
}

// shapingKernel returns the backend's ShapingKernel of t, if any.
func shapingKernel(t *tensor.Tensor) (ShapingKernel, bool) {
	return tensor.KernelOf[ShapingKernel](t.Backend())
}

// hostVec copies the [B] tensor t to a host slice (B floats; t itself when on the host).
func hostVec(t *tensor.Tensor) ([]float32, error) {
	h, err := tensor.To(tensor.CPU(), t)
	if err != nil {
		return nil, err
	}
	v, err := h.Float32s()
	if err != nil {
		return nil, err
	}
	return append([]float32(nil), v...), nil
}

// setVec writes the host slice v into the [len(v)] tensor dst.
func setVec(dst *tensor.Tensor, v []float32) error {
	h, err := tensor.FromFloat32(v, len(v))
	if err != nil {
		return err
	}
	return tensor.CopyInto(dst, h)
}

// sensitivityOf computes the scores and the mask row sums of perception [B, T] with the kernel,
// finishing each score on the host as sensitivityHost does.
func sensitivityOf(kk ShapingKernel, perception, mask *tensor.Tensor) (scores, counts []float32, err error) {
	rows := mask.Dim(0)
	sums, n := make([]float64, rows), make([]float64, rows)
	if err := kk.ShapingRows(sums, n, perception, mask); err != nil {
		return nil, nil, err
	}
	scores, counts = make([]float32, rows), make([]float32, rows)
	for i := range scores {
		scores[i] = float32(sums[i]) / float32(max(n[i], 1))
		counts[i] = float32(n[i])
	}
	return scores, counts, nil
}

// countsOf returns the mask row sums of mask [B, T] with the kernel, as rowCounts.
func countsOf(kk ShapingKernel, mask *tensor.Tensor) ([]float32, error) {
	n := make([]float64, mask.Dim(0))
	if err := kk.ShapingRows(nil, n, nil, mask); err != nil {
		return nil, err
	}
	counts := make([]float32, len(n))
	for i, x := range n {
		counts[i] = float32(x)
	}
	return counts, nil
}

// SensitivityScores writes the per-response sensitivity score of trajectory shaping into dst [B]:
// the masked mean sum_t(perception*mask)[i] / max(n_i, 1) of the perception score [B, T]
// (docs/semantics.md#advantage-shaping), where n_i = sum_t mask[i, t]. A row with n_i = 0 scores 0
// and is not a valid row for the shaping statistics.
func SensitivityScores(dst, perception, mask *tensor.Tensor) error {
	const op = "tprl.SensitivityScores"
	if err := checkRows(op, "perception", perception, mask); err != nil {
		return err
	}
	if err := checkVec(op, "dst", dst, perception.Dim(0)); err != nil {
		return err
	}
	if err := tensor.CheckSameBackend(op, []string{"perception", "mask", "dst"}, perception, mask, dst); err != nil {
		return err
	}
	if kk, ok := shapingKernel(perception); ok {
		scores, _, err := sensitivityOf(kk, perception, mask)
		if err != nil {
			return err
		}
		return setVec(dst, scores)
	}
	return tensor.OnHost(1, []*tensor.Tensor{dst, perception, mask}, func(h []*tensor.Tensor) error {
		d, _ := h[0].Float32s()
		v, _ := h[1].Float32s()
		m, _ := h[2].Float32s()
		sensitivityHost(d, nil, v, m, perception.Dim(1))
		return nil
	})
}

// sensitivityHost writes the scores into dst and, when counts is not nil, the mask sums n_i.
func sensitivityHost(dst, counts, v, m []float32, cols int) {
	parallel.For(len(dst), parallel.Grain(cols, 1<<15), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			sum, n := hostops.MaskedSum(v[i*cols:(i+1)*cols], m[i*cols:(i+1)*cols])
			dst[i] = float32(sum) / float32(max(n, 1))
			if counts != nil {
				counts[i] = float32(n)
			}
		}
	})
}

// ShapingStats are the normalisation statistics of trajectory shaping over a set of responses:
// the number of valid rows (n_i > 0), the min and max of their sensitivity scores and the sum
// of their scores. They are mergeable, so a data-parallel trainer computes them per device
// (ShapingStatsOf), all-reduces the fields (Count: SUM, Min: MIN, Max: MAX, Sum: SUM; the
// same as Merge) and passes the result to ShapeAdvantages on every device and micro-batch.
//
// The zero value and EmptyShapingStats both describe no rows; EmptyShapingStats has
// Min = +Inf and Max = -Inf, the identities of a MIN/MAX all-reduce, and ShapingStatsOf
// returns that form for a batch without valid rows. A NaN score makes Min and Max NaN (as
// torch.quantile does), which disables shaping.
type ShapingStats struct {
	Count    int
	Min, Max float32
	Sum      float64
}

// EmptyShapingStats returns statistics of no rows in all-reduce-ready form.
func EmptyShapingStats() ShapingStats {
	return ShapingStats{Min: float32(math.Inf(1)), Max: float32(math.Inf(-1))}
}

// ShapingStatsOf returns the statistics of the valid rows (mask row sum > 0) of sensitivity
// scores [B] computed from mask [B, T] (see SensitivityScores).
func ShapingStatsOf(sensitivity, mask *tensor.Tensor) (ShapingStats, error) {
	const op = "tprl.ShapingStatsOf"
	if err := tensor.CheckShape(op, "mask", mask, -1, -1); err != nil {
		return ShapingStats{}, err
	}
	if err := tensor.CheckDType(op, "mask", mask, tensor.Float32); err != nil {
		return ShapingStats{}, err
	}
	if err := checkVec(op, "sensitivity", sensitivity, mask.Dim(0)); err != nil {
		return ShapingStats{}, err
	}
	if err := tensor.CheckSameBackend(op, []string{"sensitivity", "mask"}, sensitivity, mask); err != nil {
		return ShapingStats{}, err
	}
	if kk, ok := shapingKernel(mask); ok {
		v, err := hostVec(sensitivity)
		if err != nil {
			return ShapingStats{}, err
		}
		counts, err := countsOf(kk, mask)
		if err != nil {
			return ShapingStats{}, err
		}
		return statsHost(v, counts), nil
	}
	var s ShapingStats
	err := tensor.OnHost(0, []*tensor.Tensor{sensitivity, mask}, func(h []*tensor.Tensor) error {
		v, _ := h[0].Float32s()
		m, _ := h[1].Float32s()
		s = statsHost(v, rowCounts(m, mask.Dim(0), mask.Dim(1)))
		return nil
	})
	return s, err
}

// ShapingStatsOfScore returns the shaping statistics of a perception score [B, T] under mask
// [B, T]: SensitivityScores, then ShapingStatsOf, through a temporary [B] it releases.
func ShapingStatsOfScore(score, mask *tensor.Tensor) (ShapingStats, error) {
	if err := tensor.CheckShape("tprl.ShapingStatsOfScore", "mask", mask, -1, -1); err != nil {
		return ShapingStats{}, err
	}
	sens, err := tensor.New(mask.Backend(), tensor.Float32, mask.Dim(0))
	if err != nil {
		return ShapingStats{}, err
	}
	defer sens.Release()
	if err := SensitivityScores(sens, score, mask); err != nil {
		return ShapingStats{}, err
	}
	return ShapingStatsOf(sens, mask)
}

// rowCounts returns the row sums of the [rows, cols] mask m (zeros when cols == 0: rows of
// no tokens).
func rowCounts(m []float32, rows, cols int) []float32 {
	out := make([]float32, rows)
	for i := range out {
		var n float64
		for _, w := range m[i*cols : (i+1)*cols] {
			n += float64(w)
		}
		out[i] = float32(n)
	}
	return out
}

func statsHost(scores, counts []float32) ShapingStats {
	s := EmptyShapingStats()
	for i, x := range scores {
		if counts[i] > 0 {
			s.Count++
			s.Sum += float64(x)
			s.Min, s.Max = min32(s.Min, x), max32(s.Max, x)
		}
	}
	return s
}

// min32 and max32 propagate NaN, as torch.quantile does.
func min32(a, b float32) float32 {
	if a != a || b != b {
		return float32(math.NaN())
	}
	return min(a, b)
}

func max32(a, b float32) float32 {
	if a != a || b != b {
		return float32(math.NaN())
	}
	return max(a, b)
}

// Merge returns the statistics of the union of the two row sets.
func (s ShapingStats) Merge(o ShapingStats) ShapingStats {
	switch {
	case o.Count == 0:
		return s
	case s.Count == 0:
		return o
	}
	return ShapingStats{Count: s.Count + o.Count, Min: min32(s.Min, o.Min), Max: max32(s.Max, o.Max), Sum: s.Sum + o.Sum}
}

// HasRange reports whether there is a normalisation range: more than one valid row (the
// reference's condition for logging global min and max).
func (s ShapingStats) HasRange() bool { return s.Count > 1 }

// Applies reports whether shaping changes any factor: a range exists and Max - Min > 1e-6 in
// float32.
func (s ShapingStats) Applies() bool { return s.HasRange() && s.Max-s.Min > rangeEps }

// MeanNorm is mu of GlobalScope: the mean normalised score (Sum/Count - Min)/(Max - Min) of the
// rows described, clamped to [0, 1]; it equals the mean of clamp((score-Min)/(Max-Min), 0, 1)
// over those rows. NaN when Count == 0, 0 when Max == Min.
func (s ShapingStats) MeanNorm() float32 {
	if s.Count == 0 {
		return float32(math.NaN())
	}
	lo, hi := float64(s.Min), float64(s.Max)
	if hi == lo {
		return 0
	}
	mu := (s.Sum/float64(s.Count) - lo) / (hi - lo)
	return float32(math.Max(0, math.Min(1, mu)))
}

// ShapingOptions parameterise trajectory advantage shaping.
type ShapingOptions struct {
	// ScalingMin is the smallest factor smin (reference advantage_scaling_min), in [0, 1].
	ScalingMin float64
	// Scope selects where mu comes from (GlobalScope: the ShapingStats; PerMicroBatchScope:
	// the rows of each micro-batch, as the reference).
	Scope ShapingScope
	// MiniBatchSize is the number of rows per mini-batch for ShapeBatch (contiguous, the last
	// one may be shorter); 0 means the whole batch is one mini-batch. The range (and, with
	// GlobalScope, mu) is taken per mini-batch.
	MiniBatchSize int
	// MicroBatchSize is the number of rows per micro-batch inside a mini-batch for ShapeBatch
	// (contiguous, the last one may be shorter); 0 means one micro-batch per mini-batch.
	MicroBatchSize int
}

func (o ShapingOptions) validate(op string) error {
	if err := tensor.CheckUnit(op, "ScalingMin", o.ScalingMin); err != nil {
		return err
	}
	if !o.Scope.Valid() {
		return tensor.Errorf(tensor.ErrParam, op, "Scope", "unknown shaping scope %d", int(o.Scope))
	}
	if o.MiniBatchSize < 0 {
		return tensor.Errorf(tensor.ErrParam, op, "MiniBatchSize", "is %d, want >= 0", o.MiniBatchSize)
	}
	if o.MicroBatchSize < 0 {
		return tensor.Errorf(tensor.ErrParam, op, "MicroBatchSize", "is %d, want >= 0", o.MicroBatchSize)
	}
	return nil
}

// MicroBatchShaping records what shaping did in one micro-batch
// (docs/semantics.md#advantage-shaping).
type MicroBatchShaping struct {
	// Rows and ValidRows count the micro-batch's rows and those with n_i > 0.
	Rows, ValidRows int
	// HasRange: the statistics had more than one valid row; then GlobalMin/GlobalMax are their
	// min and max, otherwise NaN.
	HasRange             bool
	GlobalMin, GlobalMax float32
	// Applied: the range exceeded 1e-6 and the factors were mapped (the reference logs
	// actor/dynamic_scaling_max exactly then).
	Applied bool
	// TargetMax is smin + (1 - smin)/(mu + 1e-8); NaN when not applied or when mu is NaN (a
	// micro-batch without valid rows in PerMicroBatchScope).
	TargetMax float32
	// ScoreMean is the mean sensitivity score of the valid rows (NaN when none); FactorMean is
	// the mean factor over all rows.
	ScoreMean, FactorMean float32
}

// Metrics returns what the reference logs for this micro-batch: actor/dynamic_scaling_max when
// applied, actor/sensitivity_score_mean when a row is valid, actor/global_sensitivity_score_min
// and _max when a range exists, and always actor/scaling_factor_mean.
func (m MicroBatchShaping) Metrics() map[string]float64 {
	out := map[string]float64{}
	m.each(func(k string, v float32) { out[k] = float64(v) })
	return out
}

// AppendMetrics appends Metrics to the per-key lists of dst. A nil dst is an ErrParam error.
func (m MicroBatchShaping) AppendMetrics(dst map[string][]float64) error {
	return appendMetrics("tprl.MicroBatchShaping.AppendMetrics", dst, m.each)
}

func (m MicroBatchShaping) each(fn func(string, float32)) {
	if m.Applied {
		fn("actor/dynamic_scaling_max", m.TargetMax)
	}
	if m.ValidRows > 0 {
		fn("actor/sensitivity_score_mean", m.ScoreMean)
	}
	if m.HasRange {
		fn("actor/global_sensitivity_score_min", m.GlobalMin)
		fn("actor/global_sensitivity_score_max", m.GlobalMax)
	}
	fn("actor/scaling_factor_mean", m.FactorMean)
}

// ShapingInputs are the tensors trajectory shaping reads, float32 on one backend.
type ShapingInputs struct {
	// Advantages [B, T] are the advantages to shape; ResponseMask [B, T] the response mask.
	Advantages, ResponseMask *tensor.Tensor
	// Sensitivity [B] are the per-response scores of SensitivityScores (ShapeAdvantages).
	Sensitivity *tensor.Tensor
	// PerceptionScore [B, T] is the perception score the sensitivity is computed from
	// (ShapeBatch).
	PerceptionScore *tensor.Tensor
}

// ShapingOutputs are where trajectory shaping writes, float32 on the inputs' backend.
type ShapingOutputs struct {
	// Advantages [B, T] receives the shaped advantages; it may be the input advantages.
	Advantages *tensor.Tensor
	// Factors [B] receives the per-response factors; optional.
	Factors *tensor.Tensor
	// Sensitivity [B] receives the per-response sensitivity scores; optional, ShapeBatch only.
	Sensitivity *tensor.Tensor
}

// ShapeAdvantages shapes one micro-batch with precomputed statistics: for every valid row (mask
// row sum > 0) norm_i = clamp((s_i - Min)/(Max - Min), 0, 1) and factor_i = smin + norm_i *
// (target_max - smin), target_max = smin + (1 - smin)/(mu + 1e-8) in float32 (as the reference:
// smin + reciprocal(mu + 1e-8)*(1 - smin)); other rows, and every row when !stats.Applies(), keep
// factor 1. mu is stats.MeanNorm() with GlobalScope, or the mean of norm over this call's valid
// rows with PerMicroBatchScope. It reads in.Advantages, in.Sensitivity and in.ResponseMask and
// writes adv*factor_i into out.Advantages and the factors into out.Factors (if set).
// opt.MiniBatchSize and opt.MicroBatchSize are ignored.
func ShapeAdvantages(out ShapingOutputs, in ShapingInputs, stats ShapingStats, opt ShapingOptions) (MicroBatchShaping, error) {
	const op = "tprl.ShapeAdvantages"
	shaped, factors, adv, sensitivity, mask := out.Advantages, out.Factors, in.Advantages, in.Sensitivity, in.ResponseMask
	if err := checkShape(op, shaped, factors, adv, mask, opt); err != nil {
		return MicroBatchShaping{}, err
	}
	if out.Sensitivity != nil {
		return MicroBatchShaping{}, tensor.Errorf(tensor.ErrParam, op, "out.Sensitivity", "is set, but ShapeAdvantages reads the sensitivity (in.Sensitivity) instead of writing it")
	}
	if err := checkVec(op, "Sensitivity", sensitivity, adv.Dim(0)); err != nil {
		return MicroBatchShaping{}, err
	}
	if err := tensor.CheckSameBackend(op, []string{"Advantages", "Sensitivity"}, adv, sensitivity); err != nil {
		return MicroBatchShaping{}, err
	}
	if kk, ok := shapingKernel(adv); ok {
		scores, err := hostVec(sensitivity)
		if err != nil {
			return MicroBatchShaping{}, err
		}
		counts, err := countsOf(kk, mask)
		if err != nil {
			return MicroBatchShaping{}, err
		}
		f := make([]float32, len(scores))
		res := shapePlan(f, scores, counts, stats, opt)
		return res, applyFactors(kk, shaped, factors, adv, f)
	}
	var res MicroBatchShaping
	err := tensor.OnHost(2, []*tensor.Tensor{shaped, factors, adv, sensitivity, mask}, func(h []*tensor.Tensor) error {
		sh, _ := h[0].Float32s()
		var f []float32
		if h[1] != nil {
			f, _ = h[1].Float32s()
		} else {
			f = make([]float32, adv.Dim(0))
		}
		a, _ := h[2].Float32s()
		s, _ := h[3].Float32s()
		m, _ := h[4].Float32s()
		cols := adv.Dim(1)
		res = shapeHost(sh, f, a, s, rowCounts(m, adv.Dim(0), cols), cols, stats, opt)
		return nil
	})
	return res, err
}

// ShapeBatch is trajectory advantage shaping of a whole batch [N, T] split into mini-batches
// and micro-batches of opt.MiniBatchSize and opt.MicroBatchSize rows: it computes the
// sensitivity scores of in.PerceptionScore (written to out.Sensitivity if set), takes
// ShapingStats per mini-batch, shapes every micro-batch of in.Advantages with ShapeAdvantages'
// rule into out.Advantages (and out.Factors if set), and returns one record per micro-batch in
// order. With PerMicroBatchScope it reproduces the reference on one device; with GlobalScope
// the result does not depend on opt.MicroBatchSize.
func ShapeBatch(out ShapingOutputs, in ShapingInputs, opt ShapingOptions) ([]MicroBatchShaping, error) {
	const op = "tprl.ShapeBatch"
	shaped, factors, sensitivity, adv, perception, mask := out.Advantages, out.Factors, out.Sensitivity, in.Advantages, in.PerceptionScore, in.ResponseMask
	if err := checkShape(op, shaped, factors, adv, mask, opt); err != nil {
		return nil, err
	}
	if in.Sensitivity != nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, "in.Sensitivity", "is set, but ShapeBatch computes the sensitivity from in.PerceptionScore")
	}
	if err := tensor.CheckSameShape(op, "Advantages", adv, "PerceptionScore", perception); err != nil {
		return nil, err
	}
	if err := tensor.CheckDType(op, "PerceptionScore", perception, tensor.Float32); err != nil {
		return nil, err
	}
	if sensitivity != nil {
		if err := checkVec(op, "Sensitivity", sensitivity, adv.Dim(0)); err != nil {
			return nil, err
		}
	}
	if err := tensor.CheckSameBackend(op, []string{"Advantages", "PerceptionScore", "Sensitivity"}, adv, perception, sensitivity); err != nil {
		return nil, err
	}
	if kk, ok := shapingKernel(adv); ok {
		scores, counts, err := sensitivityOf(kk, perception, mask)
		if err != nil {
			return nil, err
		}
		if sensitivity != nil {
			if err := setVec(sensitivity, scores); err != nil {
				return nil, err
			}
		}
		f := make([]float32, len(scores))
		res := shapeBatchPlan(f, scores, counts, opt)
		return res, applyFactors(kk, shaped, factors, adv, f)
	}
	var res []MicroBatchShaping
	err := tensor.OnHost(3, []*tensor.Tensor{shaped, factors, sensitivity, adv, perception, mask}, func(h []*tensor.Tensor) error {
		rows, cols := adv.Dim(0), adv.Dim(1)
		sh, _ := h[0].Float32s()
		f := make([]float32, rows)
		if h[1] != nil {
			f, _ = h[1].Float32s()
		}
		s := make([]float32, rows)
		if h[2] != nil {
			s, _ = h[2].Float32s()
		}
		a, _ := h[3].Float32s()
		v, _ := h[4].Float32s()
		m, _ := h[5].Float32s()
		counts := make([]float32, rows)
		sensitivityHost(s, counts, v, m, cols)
		res = shapeBatchHost(sh, f, a, s, counts, cols, opt)
		return nil
	})
	return res, err
}

func shapeBatchHost(shaped, factors, adv, scores, counts []float32, cols int, opt ShapingOptions) []MicroBatchShaping {
	out := shapeBatchPlan(factors, scores, counts, opt)
	scaleRowsHost(shaped, adv, factors, cols)
	return out
}

// shapeBatchPlan writes the factors of every row of a batch and returns the micro-batches'
// records: ShapeBatch's plan, shared by the host and the kernel paths.
func shapeBatchPlan(factors, scores, counts []float32, opt ShapingOptions) []MicroBatchShaping {
	rows := len(scores)
	mini := opt.MiniBatchSize
	if mini == 0 {
		mini = max(rows, 1)
	}
	var out []MicroBatchShaping
	for lo := 0; lo < rows; lo += mini {
		hi := min(lo+mini, rows)
		stats := statsHost(scores[lo:hi], counts[lo:hi])
		micro := opt.MicroBatchSize
		if micro == 0 {
			micro = hi - lo
		}
		for a := lo; a < hi; a += micro {
			b := min(a+micro, hi)
			out = append(out, shapePlan(factors[a:b], scores[a:b], counts[a:b], stats, opt))
		}
	}
	return out
}

// applyFactors scales the advantages by the factors with the kernel and writes the factors to
// factors when it is set.
func applyFactors(kk ShapingKernel, shaped, factors, adv *tensor.Tensor, f []float32) error {
	if factors != nil {
		if err := setVec(factors, f); err != nil {
			return err
		}
	}
	if len(f) == 0 || adv.Dim(1) == 0 {
		return nil
	}
	return kk.ScaleRows(shaped, adv, f)
}

// shapeHost shapes one micro-batch on host slices.
func shapeHost(shaped, factors, adv, scores, counts []float32, cols int, stats ShapingStats, opt ShapingOptions) MicroBatchShaping {
	out := shapePlan(factors, scores, counts, stats, opt)
	scaleRowsHost(shaped, adv, factors, cols)
	return out
}

// shapePlan writes the factors of one micro-batch and returns its record: the host plan of
// ShapeAdvantages, shared by the host and the kernel paths.
func shapePlan(factors, scores, counts []float32, stats ShapingStats, opt ShapingOptions) MicroBatchShaping {
	nan := float32(math.NaN())
	out := MicroBatchShaping{Rows: len(scores), GlobalMin: nan, GlobalMax: nan, TargetMax: nan}
	var scoreSum float64
	for i, s := range scores {
		factors[i] = 1
		if counts[i] > 0 {
			out.ValidRows++
			scoreSum += float64(s)
		}
	}
	out.ScoreMean = meanOrNaN(scoreSum, out.ValidRows)
	if stats.HasRange() {
		out.HasRange = true
		out.GlobalMin, out.GlobalMax = stats.Min, stats.Max
		if rng := stats.Max - stats.Min; rng > rangeEps {
			out.Applied = true
			var normSum float64
			for i, s := range scores {
				if counts[i] > 0 {
					norm := min(max((s-stats.Min)/rng, 0), 1) // NaN stays NaN
					factors[i] = norm                         // the normalised score, mapped below
					normSum += float64(norm)
				}
			}
			var mu float32
			if opt.Scope == PerMicroBatchScope {
				mu = meanOrNaN(normSum, out.ValidRows)
			} else {
				mu = stats.MeanNorm()
			}
			smin := float32(opt.ScalingMin)
			target := smin + (1/(mu+muEps))*float32(1-opt.ScalingMin)
			out.TargetMax = target
			for i := range scores {
				if counts[i] > 0 {
					factors[i] = smin + factors[i]*(target-smin)
				}
			}
		}
	}
	var fsum float64
	for _, f := range factors {
		fsum += float64(f)
	}
	out.FactorMean = meanOrNaN(fsum, len(factors))
	return out
}

// scaleRowsHost is the pure-Go kernel of ShapingKernel.ScaleRows: shaped[i, t] = adv[i, t] *
// factors[i].
func scaleRowsHost(shaped, adv, factors []float32, cols int) {
	parallel.For(len(factors), parallel.Grain(cols, 1<<15), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			f := factors[i]
			row := adv[i*cols : (i+1)*cols]
			dst := shaped[i*cols : (i+1)*cols]
			for t, x := range row {
				dst[t] = x * f
			}
		}
	})
}

func checkShape(op string, shaped, factors, adv, mask *tensor.Tensor, opt ShapingOptions) error {
	if err := opt.validate(op); err != nil {
		return err
	}
	if err := checkRows(op, "Advantages", adv, mask); err != nil {
		return err
	}
	if err := tensor.CheckSameShape(op, "Advantages", adv, "out.Advantages", shaped); err != nil {
		return err
	}
	if err := tensor.CheckDType(op, "out.Advantages", shaped, tensor.Float32); err != nil {
		return err
	}
	if factors != nil {
		if err := checkVec(op, "Factors", factors, adv.Dim(0)); err != nil {
			return err
		}
	}
	return tensor.CheckSameBackend(op, []string{"Advantages", "ResponseMask", "out.Advantages", "Factors"}, adv, mask, shaped, factors)
}

// checkRows checks that v is float32 [B, T] and mask float32 of the same shape, on one backend.
func checkRows(op, arg string, v, mask *tensor.Tensor) error {
	if err := tensor.CheckShape(op, arg, v, -1, -1); err != nil {
		return err
	}
	if err := tensor.CheckSameShape(op, arg, v, "mask", mask); err != nil {
		return err
	}
	if err := tensor.CheckDType(op, arg, v, tensor.Float32); err != nil {
		return err
	}
	if err := tensor.CheckDType(op, "mask", mask, tensor.Float32); err != nil {
		return err
	}
	return tensor.CheckSameBackend(op, []string{arg, "mask"}, v, mask)
}

// checkVec checks that t is float32 [n].
func checkVec(op, arg string, t *tensor.Tensor, n int) error {
	if err := tensor.CheckShape(op, arg, t, n); err != nil {
		return err
	}
	return tensor.CheckDType(op, arg, t, tensor.Float32)
}
