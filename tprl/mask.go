package tprl

import (
	"math"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/internal/parallel"
	"github.com/mtrl-go/mtrl/tensor"
)

// SelectionStats summarises one top-p selection over a [B, T] batch; it carries what the
// reference logs (docs/semantics.md#entropy-mask,
// docs/semantics.md#perception-mask).
type SelectionStats struct {
	// Filter selects the metric names (entropy_* or perception/low_var_kl_*).
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
// micro-batch.
func (s SelectionStats) AppendMetrics(dst map[string][]float64) {
	s.each(func(k string, v float32) { dst[k] = append(dst[k], float64(v)) })
}

func (s SelectionStats) each(fn func(string, float32)) {
	if s.Valid <= 0 || !s.Filter.valid() {
		return
	}
	keys := selectionKeys[s.Filter]
	fn(keys[0], s.TokenFraction())
	fn(keys[1], s.Threshold)
	if s.Selected > 0 {
		fn(keys[2], s.SelectedMean)
	}
	if s.Valid > s.Selected {
		fn(keys[3], s.RejectedMean)
	}
}

// SelectionKernel is the optional backend kernel for SelectTopP (and so EntropyMask and
// PerceptionMask). It receives validated tensors and must write dst (and k when not nil) with
// the exact semantics of SelectTopP and return the statistics (Filter is set by the caller).
type SelectionKernel interface {
	SelectTopP(dst, k, values, mask *tensor.Tensor, p float32) (SelectionStats, error)
}

// SelectTopP is the top-p token selection behind EntropyMask and PerceptionMask. In each row i
// of values [B, T] it marks with 1 in dst [B, T] the k_i = tensor.TopPCount(n_i, p) positions
// with mask != 0 that have the largest values, and writes 0 elsewhere; n_i is the number of
// positions with mask != 0. Ties go to the lower index (stable), NaN ranks above every number.
// Padded positions are never selected, so dst ⊆ mask (for p ≤ 1 this is exactly the
// reference). k, when not nil, receives k_i as int32 [B]. p must lie in [0, 1]. f names the
// metrics of the returned statistics.
func SelectTopP(dst, k, values, mask *tensor.Tensor, p float32, f Filter) (SelectionStats, error) {
	return selectTopP("tprl.SelectTopP", "values", dst, k, values, mask, p, f)
}

// EntropyMask writes into dst [B, T] the entropy top-p mask (docs/semantics.md#entropy-mask): per
// row the TopPCount(n_i, p) valid tokens with the largest entropy (see SelectTopP for ties and
// padding), and k_i into k (int32 [B], may be nil). entropy and mask are float32 [B, T].
func EntropyMask(dst, k, entropy, mask *tensor.Tensor, p float32) (SelectionStats, error) {
	return selectTopP("tprl.EntropyMask", "entropy", dst, k, entropy, mask, p, EntropyFilter)
}

// PerceptionMask computes the perception score s = clamp(exp(d)-d-1, 0, 10) with
// d = clamp(aug-old, -20, 20) into score [B, T] (every position, padding included; see
// divergence.PerceptionScore) and writes the top-p mask by that score into dst [B, T], with
// padded positions excluded and the result ANDed with mask (docs/semantics.md#perception-mask); k
// as in EntropyMask. score may be nil when the caller does not need it (a temporary is used).
func PerceptionMask(score, dst, k, old, aug, mask *tensor.Tensor, p float32) (SelectionStats, error) {
	const op = "tprl.PerceptionMask"
	if err := checkSelect(op, "old", dst, k, old, mask, p, PerceptionFilter); err != nil {
		return SelectionStats{}, err
	}
	if err := tensor.CheckSameShape(op, "old", old, "aug", aug); err != nil {
		return SelectionStats{}, err
	}
	if err := tensor.CheckDType(op, "aug", aug, tensor.Float32); err != nil {
		return SelectionStats{}, err
	}
	if score == nil {
		var err error
		if score, err = tensor.NewLike(old, tensor.Float32); err != nil {
			return SelectionStats{}, err
		}
		defer score.Release()
	} else {
		if err := tensor.CheckSameShape(op, "old", old, "score", score); err != nil {
			return SelectionStats{}, err
		}
		if err := tensor.CheckDType(op, "score", score, tensor.Float32); err != nil {
			return SelectionStats{}, err
		}
	}
	if err := tensor.CheckSameBackend(op, []string{"old", "aug", "score"}, old, aug, score); err != nil {
		return SelectionStats{}, err
	}
	if err := divergence.PerceptionScore(score, old, aug); err != nil {
		return SelectionStats{}, err
	}
	return runSelect(dst, k, score, mask, p, PerceptionFilter)
}

func checkSelect(op, valuesArg string, dst, k, values, mask *tensor.Tensor, p float32, f Filter) error {
	if !f.valid() {
		return tensor.Errorf(tensor.ErrParam, op, "f", "unknown filter %d", int(f))
	}
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
	if k != nil {
		if err := tensor.CheckShape(op, "k", k, values.Dim(0)); err != nil {
			return err
		}
		if err := tensor.CheckDType(op, "k", k, tensor.Int32); err != nil {
			return err
		}
	}
	if err := tensor.CheckSameBackend(op, []string{valuesArg, "mask", "dst", "k"}, values, mask, dst, k); err != nil {
		return err
	}
	return tensor.CheckUnit(op, "p", float64(p))
}

func selectTopP(op, valuesArg string, dst, k, values, mask *tensor.Tensor, p float32, f Filter) (SelectionStats, error) {
	if err := checkSelect(op, valuesArg, dst, k, values, mask, p, f); err != nil {
		return SelectionStats{}, err
	}
	return runSelect(dst, k, values, mask, p, f)
}

// runSelect runs validated arguments on the backend kernel or the host kernel.
func runSelect(dst, k, values, mask *tensor.Tensor, p float32, f Filter) (SelectionStats, error) {
	if kk, ok := tensor.KernelOf[SelectionKernel](values.Backend()); ok {
		s, err := kk.SelectTopP(dst, k, values, mask, p)
		s.Filter = f
		return s, err
	}
	var s SelectionStats
	err := tensor.OnHost(2, []*tensor.Tensor{dst, k, values, mask}, func(h []*tensor.Tensor) error {
		d, _ := h[0].Float32s()
		var ks []int32
		if h[1] != nil {
			ks, _ = h[1].Int32s()
		}
		v, _ := h[2].Float32s()
		m, _ := h[3].Float32s()
		s = SelectHost(d, ks, v, m, values.Dim(1), p)
		return nil
	})
	s.Filter = f
	return s, err
}

// SelectHost is the pure-Go kernel behind SelectTopP on plain row-major slices with rows of
// length cols: it writes the 0/1 mask into dst and the per-row counts into ks (may be nil) and
// returns the statistics (Filter left zero). It does no validation.
func SelectHost(dst []float32, ks []int32, values, mask []float32, cols int, p float32) SelectionStats {
	rows := 0
	if cols > 0 {
		rows = len(values) / cols
	} else {
		clear(ks) // rows of length 0 keep nothing
	}
	per := make([]hostops.RowSelection, rows)
	parallel.For(rows, parallel.Grain(cols, 1<<14), func(lo, hi int) {
		var sc hostops.TopPScratch
		for i := lo; i < hi; i++ {
			a, b := i*cols, (i+1)*cols
			per[i] = hostops.TopPRow(dst[a:b], values[a:b], mask[a:b], p, &sc)
			if ks != nil {
				ks[i] = int32(per[i].K)
			}
		}
	})
	var (
		s                  SelectionStats
		thrSum, selS, rejS float64
		thrRows            int
	)
	for _, r := range per {
		s.Valid += r.Valid
		s.Selected += r.K
		selS += r.SelectedSum
		rejS += r.RejectedSum
		if r.K > 0 {
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
