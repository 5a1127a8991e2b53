package tprl

import (
	"github.com/mtrl-go/mtrl/internal/parallel"
	"github.com/mtrl-go/mtrl/tensor"
)

// CombinedStats summarise the union of the entropy and perception masks
// (docs/semantics.md#combined-mask).
type CombinedStats struct {
	// Valid is S, the number of valid tokens; Selected the number of tokens in the union.
	Valid, Selected int
	// Mean entropy / perception score where the union is 1, and where the token is valid but
	// not in the union. NaN for an empty set, as the reference logs them.
	EntropySelectedMean, EntropyRejectedMean       float32
	PerceptionSelectedMean, PerceptionRejectedMean float32
}

// TokenFraction is Selected/Valid in float32 (NaN when Valid == 0, as in the reference).
func (s CombinedStats) TokenFraction() float32 { return float32(s.Selected) / float32(s.Valid) }

// Metrics returns the reference's actor/combined_* metrics. They are always present, NaN where
// the reference takes the mean of an empty set.
func (s CombinedStats) Metrics() map[string]float64 {
	m := map[string]float64{}
	s.each(func(k string, v float32) { m[k] = float64(v) })
	return m
}

// AppendMetrics appends Metrics to the per-key lists of dst. A nil dst is an ErrParam error.
func (s CombinedStats) AppendMetrics(dst map[string][]float64) error {
	return appendMetrics("tprl.CombinedStats.AppendMetrics", dst, s.each)
}

func (s CombinedStats) each(fn func(string, float32)) {
	fn("actor/combined_token_fraction", s.TokenFraction())
	fn("actor/combined_entropy_mean_selected", s.EntropySelectedMean)
	fn("actor/combined_entropy_mean_rejected", s.EntropyRejectedMean)
	fn("actor/combined_perception_mean_selected", s.PerceptionSelectedMean)
	fn("actor/combined_perception_mean_rejected", s.PerceptionRejectedMean)
}

// UnionInputs are the tensors of UnionMask, all float32 [B, T] on one backend.
type UnionInputs struct {
	// EntropyMask and PerceptionMask are the masks to OR (nonzero = set), as EntropyMask and
	// PerceptionMask write them.
	EntropyMask, PerceptionMask *tensor.Tensor
	// Entropy and PerceptionScore are the values behind the masks; the statistics report their
	// means over the selected and rejected tokens.
	Entropy, PerceptionScore *tensor.Tensor
	// ResponseMask is the response mask (1 = valid token).
	ResponseMask *tensor.Tensor
}

// UnionMask writes the logical OR of the entropy and perception masks into dst [B, T] as
// float32 0/1 and returns the statistics of the union against the response mask, with the mean
// entropy and perception score of its selected and rejected tokens
// (docs/semantics.md#combined-mask). dst may be one of the input masks. The union is not
// intersected with the response mask again: both masks already are subsets of it when they
// come from EntropyMask and PerceptionMask.
func UnionMask(dst *tensor.Tensor, in UnionInputs) (CombinedStats, error) {
	const op = "tprl.UnionMask"
	mask := in.ResponseMask
	names := []string{"ResponseMask", "dst", "EntropyMask", "PerceptionMask", "Entropy", "PerceptionScore"}
	ts := []*tensor.Tensor{mask, dst, in.EntropyMask, in.PerceptionMask, in.Entropy, in.PerceptionScore}
	if err := tensor.CheckShape(op, "ResponseMask", mask, -1, -1); err != nil {
		return CombinedStats{}, err
	}
	for i := 1; i < len(ts); i++ {
		if err := tensor.CheckSameShape(op, "ResponseMask", mask, names[i], ts[i]); err != nil {
			return CombinedStats{}, err
		}
	}
	for i, t := range ts {
		if err := tensor.CheckDType(op, names[i], t, tensor.Float32); err != nil {
			return CombinedStats{}, err
		}
	}
	if err := tensor.CheckSameBackend(op, names, ts...); err != nil {
		return CombinedStats{}, err
	}
	if kk, ok := tensor.KernelOf[UnionKernel](mask.Backend()); ok {
		rows := make([]UnionRow, mask.Dim(0))
		if err := kk.UnionRows(rows, dst, in); err != nil {
			return CombinedStats{}, err
		}
		return combineUnion(rows), nil
	}
	var s CombinedStats
	err := tensor.OnHost(1, []*tensor.Tensor{dst, in.EntropyMask, in.PerceptionMask, in.Entropy, in.PerceptionScore, mask}, func(h []*tensor.Tensor) error {
		var v [6][]float32
		for i := range v {
			v[i], _ = h[i].Float32s()
		}
		s = unionHost(v[0], v[1], v[2], v[3], v[4], v[5], mask.Dim(1))
		return nil
	})
	return s, err
}

// UnionRow is one row's part of CombinedStats: what a UnionKernel measures per row, combined in
// row order by the host so every backend reports the same statistics.
type UnionRow struct {
	// Valid counts the positions with mask != 0, Selected those in the union (mask or not),
	// Rejected the valid positions not in it.
	Valid, Selected, Rejected int
	// Float64 sums of the entropy and the perception score over the selected and the rejected
	// positions.
	EntSel, EntRej, PercSel, PercRej float64
}

// UnionKernel is the optional backend kernel behind UnionMask: it writes the union into dst
// and fills rows (len B) with each row's statistics; the tensors are validated.
type UnionKernel interface {
	UnionRows(rows []UnionRow, dst *tensor.Tensor, in UnionInputs) error
}

func unionHost(dst, a, b, ent, score, mask []float32, cols int) CombinedStats {
	rows := 0
	if cols > 0 {
		rows = len(mask) / cols // with cols == 0 there is no token: the statistics are empty
	}
	per := make([]UnionRow, rows)
	parallel.For(rows, parallel.Grain(cols, 1<<15), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			var r UnionRow
			for t := i * cols; t < (i+1)*cols; t++ {
				on := a[t] != 0 || b[t] != 0
				if on {
					dst[t] = 1
					r.Selected++
					r.EntSel += float64(ent[t])
					r.PercSel += float64(score[t])
				} else {
					dst[t] = 0
				}
				if mask[t] != 0 {
					r.Valid++
					if !on {
						r.Rejected++
						r.EntRej += float64(ent[t])
						r.PercRej += float64(score[t])
					}
				}
			}
			per[i] = r
		}
	})
	return combineUnion(per)
}

// combineUnion reduces the per-row statistics of UnionMask in row order.
func combineUnion(per []UnionRow) CombinedStats {
	var (
		s                                CombinedStats
		entSel, entRej, percSel, percRej float64
		rejected                         int
	)
	for _, r := range per {
		s.Valid += r.Valid
		s.Selected += r.Selected
		rejected += r.Rejected
		entSel += r.EntSel
		entRej += r.EntRej
		percSel += r.PercSel
		percRej += r.PercRej
	}
	s.EntropySelectedMean = meanOrNaN(entSel, s.Selected)
	s.EntropyRejectedMean = meanOrNaN(entRej, rejected)
	s.PerceptionSelectedMean = meanOrNaN(percSel, s.Selected)
	s.PerceptionRejectedMean = meanOrNaN(percRej, rejected)
	return s
}
