package tprl

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/internal/parallel"
	"github.com/mtrl-go/mtrl/tensor"
)

// SelectionStats summarises one top-p selection over a [B, T] batch; it carries what the
// reference logs (docs/semantics.md#entropy-mask,
// docs/semantics.md#perception-mask).
type SelectionStats struct {
	// Filter selects the metric names (entropy_*, perception/low_var_kl_*, or
	// random_token_fraction alone: a random selection has no threshold and no means).
	Filter Filter
	// Valid is S, the number of valid tokens (mask != 0).
	Valid int
	// Selected is the number of selected tokens.
	Selected int
	// Threshold is the mean, over rows with k > 0, of the k-th largest valid value of the row;
	// 0 when no row has k > 0.
	Threshold float32
	// SelectedMean is the mean value over selected tokens, NaN when none is selected.
	SelectedMean float32
	// RejectedMean is the mean value over valid tokens that were not selected, NaN when there
	// are none.
	RejectedMean float32
}

// TokenFraction is Selected/Valid in float32 (NaN when Valid == 0).
func (s SelectionStats) TokenFraction() float32 { return float32(s.Selected) / float32(s.Valid) }

var selectionKeys = [...][4]string{
	EntropyFilter: {"actor/entropy_token_fraction", "actor/entropy_threshold",
		"actor/entropy_mean_selected", "actor/entropy_mean_rejected"},
	PerceptionFilter: {"actor/perception_token_fraction", "actor/low_var_kl_threshold",
		"actor/low_var_kl_mean_selected", "actor/low_var_kl_mean_rejected"},
	RandomFilter: {"actor/random_token_fraction"}, // no values: no threshold or means
}

// Metrics returns the metrics the reference logs for this selection, under its names: none
// when Valid == 0; otherwise the token fraction and threshold, the selected mean only when a
// token was selected and the rejected mean only when a valid token was rejected.
func (s SelectionStats) Metrics() map[string]float64 {
	m := map[string]float64{}
	s.each(func(k string, v float32) { m[k] = float64(v) })
	return m
}

// AppendMetrics appends Metrics to the per-key lists of dst, as the reference does once per
// micro-batch. A nil dst is an ErrParam error.
func (s SelectionStats) AppendMetrics(dst map[string][]float64) error {
	return appendMetrics("tprl.SelectionStats.AppendMetrics", dst, s.each)
}

// appendMetrics appends each metric of a record to the per-key lists of dst.
func appendMetrics(op string, dst map[string][]float64, each func(func(string, float32))) error {
	if dst == nil {
		return tensor.Errorf(tensor.ErrParam, op, "dst", "is a nil map")
	}
	each(func(k string, v float32) { dst[k] = append(dst[k], float64(v)) })
	return nil
}

func (s SelectionStats) each(fn func(string, float32)) {
	if s.Valid <= 0 || !s.Filter.Valid() {
		return
	}
	keys := selectionKeys[s.Filter]
	fn(keys[0], s.TokenFraction())
	if s.Filter == RandomFilter {
		return
	}
	fn(keys[1], s.Threshold)
	if s.Selected > 0 {
		fn(keys[2], s.SelectedMean)
	}
	if s.Valid > s.Selected {
		fn(keys[3], s.RejectedMean)
	}
}

// SelectionRow is one row's part of SelectionStats: what a SelectionStatsKernel measures per
// row, combined in row order by the host so every backend reports the same statistics.
type SelectionRow struct {
	// Valid counts the positions with mask != 0; Selected those of them the selection kept.
	Valid, Selected int
	// SelectedSum and RejectedSum are float64 sums of the selected values and of the valid
	// values that were not selected.
	SelectedSum, RejectedSum float64
	// Threshold is the selected value with the smallest order key (the k-th largest valid
	// value; +0 for a zero, NaN when every selected value is NaN); 0 when nothing is selected.
	Threshold float32
}

// SelectionStatsKernel is the optional backend kernel behind the statistics of EntropyMask and
// PerceptionMask. After tensor.TopPMask wrote the 0/1 selection sel [B, T], it fills rows (len
// B) from sel, the selected values [B, T] and the mask [B, T]; the tensors are validated.
type SelectionStatsKernel interface {
	SelectionRows(rows []SelectionRow, sel, values, mask *tensor.Tensor) error
}

// EntropyMask writes into dst [B, T] the entropy top-p mask (docs/semantics.md#entropy-mask): per
// row the tensor.TopPCount(n_i, p) valid tokens with the largest entropy, n_i the row's number
// of positions with mask != 0 (selection as tensor.TopPMask: ties to the lower index, NaN
// first, padding never selected, so dst ⊆ mask). entropy and mask are float32 [B, T]; p lies in
// [0, 1]. The statistics carry the reference's actor/entropy_* metrics.
func EntropyMask(dst, entropy, mask *tensor.Tensor, p float32) (SelectionStats, error) {
	return selectTokens("tprl.EntropyMask", "entropy", dst, entropy, mask, p, EntropyFilter)
}

// PerceptionMask writes into dst [B, T] the perception top-p mask
// (docs/semantics.md#perception-mask): per row the tensor.TopPCount(n_i, p) valid tokens with
// the largest perception score, selected as EntropyMask does. score [B, T] is the perception
// score of divergence.PerceptionScore (low_var_kl of the log-probs with the perturbed and the
// original image), computed once per mini-batch by the caller. The statistics carry the
// reference's actor/perception_token_fraction and actor/low_var_kl_* metrics.
func PerceptionMask(dst, score, mask *tensor.Tensor, p float32) (SelectionStats, error) {
	return selectTokens("tprl.PerceptionMask", "score", dst, score, mask, p, PerceptionFilter)
}

// EntropyMaskRandomTies is EntropyMask with the position-neutral tie rule: of the valid tokens
// tied at the threshold, a uniformly random subset is kept (tensor.TopPMaskTieBreak with a
// random order of the row's positions drawn from key, as RandomKey describes) instead of the
// lowest positions. Config.Apply uses it unless Config.TiesToLowerIndex is set.
func EntropyMaskRandomTies(dst, entropy, mask *tensor.Tensor, p float32, key RandomKey) (SelectionStats, error) {
	return selectTokensRandomTies("tprl.EntropyMaskRandomTies", "entropy", dst, entropy, mask, p, EntropyFilter, key)
}

// PerceptionMaskRandomTies is PerceptionMask with the position-neutral tie rule of
// EntropyMaskRandomTies. It matters where perception scores tie, above all in a row whose
// scores are all equal (for example all zero when the image does not move the log-probs):
// PerceptionMask keeps that row's first tokens, this keeps each token with probability k/n.
func PerceptionMaskRandomTies(dst, score, mask *tensor.Tensor, p float32, key RandomKey) (SelectionStats, error) {
	return selectTokensRandomTies("tprl.PerceptionMaskRandomTies", "score", dst, score, mask, p, PerceptionFilter, key)
}

func selectTokensRandomTies(op, valuesArg string, dst, values, mask *tensor.Tensor, p float32, f Filter, key RandomKey) (SelectionStats, error) {
	if err := checkSelect(op, valuesArg, dst, values, mask, p); err != nil {
		return SelectionStats{}, err
	}
	if key.Step < 0 || key.FirstRow < 0 {
		return SelectionStats{}, tensor.Errorf(tensor.ErrParam, op, "key", "step %d and first row %d must be >= 0", key.Step, key.FirstRow)
	}
	tiebreak, err := key.order(mask, tiesStream)
	if err != nil {
		return SelectionStats{}, err
	}
	defer tiebreak.Release()
	return selectWith(dst, values, mask, f, func() error {
		return tensor.TopPMaskTieBreak(dst, values, tiebreak, mask, p)
	})
}

func checkSelect(op, valuesArg string, dst, values, mask *tensor.Tensor, p float32) error {
	if err := tensor.CheckShape(op, valuesArg, values, -1, -1); err != nil {
		return err
	}
	if err := tensor.CheckSameShape(op, valuesArg, values, "mask", mask); err != nil {
		return err
	}
	if err := tensor.CheckSameShape(op, valuesArg, values, "dst", dst); err != nil {
		return err
	}
	for _, a := range []struct {
		name string
		t    *tensor.Tensor
	}{{valuesArg, values}, {"mask", mask}, {"dst", dst}} {
		if err := tensor.CheckDType(op, a.name, a.t, tensor.Float32); err != nil {
			return err
		}
	}
	if err := tensor.CheckSameBackend(op, []string{valuesArg, "mask", "dst"}, values, mask, dst); err != nil {
		return err
	}
	return tensor.CheckUnit(op, "p", float64(p))
}

func selectTokens(op, valuesArg string, dst, values, mask *tensor.Tensor, p float32, f Filter) (SelectionStats, error) {
	if err := checkSelect(op, valuesArg, dst, values, mask, p); err != nil {
		return SelectionStats{}, err
	}
	return selectWith(dst, values, mask, f, func() error {
		return tensor.TopPMask(dst, values, mask, p)
	})
}

// selectWith runs sel, the selection into dst of checked arguments, and measures it.
func selectWith(dst, values, mask *tensor.Tensor, f Filter, sel func() error) (SelectionStats, error) {
	if err := sel(); err != nil {
		return SelectionStats{}, err
	}
	rows := make([]SelectionRow, values.Dim(0))
	if kk, ok := tensor.KernelOf[SelectionStatsKernel](values.Backend()); ok {
		if err := kk.SelectionRows(rows, dst, values, mask); err != nil {
			return SelectionStats{}, err
		}
	} else if err := tensor.OnHost(0, []*tensor.Tensor{dst, values, mask}, func(h []*tensor.Tensor) error {
		d, _ := h[0].Float32s()
		v, _ := h[1].Float32s()
		m, _ := h[2].Float32s()
		cols := values.Dim(1)
		parallel.For(len(rows), parallel.Grain(cols, 1<<15), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				a, b := i*cols, (i+1)*cols
				r := hostops.SelectionRowStats(d[a:b], v[a:b], m[a:b])
				rows[i] = SelectionRow{Valid: r.Valid, Selected: r.K, SelectedSum: r.SelectedSum,
					RejectedSum: r.RejectedSum, Threshold: r.Threshold}
			}
		})
		return nil
	}); err != nil {
		return SelectionStats{}, err
	}
	return combineSelection(rows, f), nil
}

// combineSelection reduces the per-row statistics in row order.
func combineSelection(rows []SelectionRow, f Filter) SelectionStats {
	s := SelectionStats{Filter: f}
	var thrSum, selS, rejS float64
	thrRows := 0
	for _, r := range rows {
		s.Valid += r.Valid
		s.Selected += r.Selected
		selS += r.SelectedSum
		rejS += r.RejectedSum
		if r.Selected > 0 {
			thrSum += float64(r.Threshold)
			thrRows++
		}
	}
	if thrRows > 0 {
		s.Threshold = float32(thrSum / float64(thrRows))
	}
	s.SelectedMean = meanOrNaN(selS, s.Selected)
	s.RejectedMean = meanOrNaN(rejS, s.Valid-s.Selected)
	return s
}

func meanOrNaN(sum float64, n int) float32 {
	if n <= 0 {
		return float32(math.NaN())
	}
	return float32(sum / float64(n))
}
