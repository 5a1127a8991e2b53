package tprltest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/backendtest"
	"github.com/mtrl-go/mtrl/tprl"
)

// opsAt: the top-p token selection with its statistics (ties and a NaN score included), the
// union of two selections with its statistics (in place), and
// trajectory shaping: the sensitivity scores, the shaping statistics and the shaped
// advantages with their factors and per-micro-batch records, in both scopes, with mini- and
// micro-batches and a fully padded row (row 0 of paddedMask).
func opsAt(rows, cols int) []backendtest.Op {
	r := rand.New(rand.NewPCG(uint64(rows)+400, uint64(cols)))
	n := rows * cols
	m := backendtest.PaddedMask(r, rows, cols)
	sc := backendtest.Randn(r, n, 1)
	for i := 0; i < n; i += 53 {
		sc[i] = 0.25
	}
	sc[n/2] = float32(math.NaN())
	ops := []backendtest.Op{{Name: "EntropyMask", RTol: 1e-6, ATol: 1e-7, Run: func(t *testing.T, be tensor.Backend) [][]float32 {
		d := backendtest.NewF32(be, rows, cols)
		st, err := tprl.EntropyMask(d, backendtest.Upload(t, be, sc, rows, cols), backendtest.Upload(t, be, m, rows, cols), 0.3)
		if err != nil {
			t.Fatal(err)
		}
		return [][]float32{backendtest.Host(t, d), {float32(st.Valid), float32(st.Selected), st.Threshold, st.SelectedMean, st.RejectedMean}}
	}}}
	ops = append(ops, backendtest.Op{Name: "UnionMask", RTol: 1e-6, ATol: 1e-7, Run: func(t *testing.T, be tensor.Backend) [][]float32 {
		// The entropy mask of sc and a perception mask of -sc, their union in place of the
		// first.
		mask, ent := backendtest.Upload(t, be, m, rows, cols), backendtest.Upload(t, be, sc, rows, cols)
		neg := make([]float32, n)
		for i, x := range sc {
			neg[i] = -x
		}
		score := backendtest.Upload(t, be, neg, rows, cols)
		em, pm := backendtest.NewF32(be, rows, cols), backendtest.NewF32(be, rows, cols)
		if _, err := tprl.EntropyMask(em, ent, mask, 0.2); err != nil {
			t.Fatal(err)
		}
		if _, err := tprl.PerceptionMask(pm, score, mask, 0.3); err != nil {
			t.Fatal(err)
		}
		st, err := tprl.UnionMask(em, tprl.UnionInputs{EntropyMask: em, PerceptionMask: pm, Entropy: ent, PerceptionScore: score, ResponseMask: mask})
		if err != nil {
			t.Fatal(err)
		}
		return [][]float32{backendtest.Host(t, em), {float32(st.Valid), float32(st.Selected), st.EntropySelectedMean,
			st.EntropyRejectedMean, st.PerceptionSelectedMean, st.PerceptionRejectedMean}}
	}})
	// A non-negative perception score (low_var_kl is >= 0) and the advantages to shape.
	perc := make([]float32, n)
	for i, x := range backendtest.Randn(r, n, 1) {
		perc[i] = x * x
	}
	adv := backendtest.Randn(r, n, 1)
	mini := (rows + 1) / 2
	opt := tprl.ShapingOptions{ScalingMin: 0.3, MiniBatchSize: mini, MicroBatchSize: max(mini/2, 1)}
	for _, scope := range []tprl.ShapingScope{tprl.GlobalScope, tprl.PerMicroBatchScope} {
		opt := opt
		opt.Scope = scope
		ops = append(ops, backendtest.Op{Name: "ShapeBatch/" + scope.String(), RTol: 1e-6, ATol: 1e-7, Run: func(t *testing.T, be tensor.Backend) [][]float32 {
			shaped, fac, sens := backendtest.NewF32(be, rows, cols), backendtest.NewF32(be, rows), backendtest.NewF32(be, rows)
			recs, err := tprl.ShapeBatch(tprl.ShapingOutputs{Advantages: shaped, Factors: fac, Sensitivity: sens},
				tprl.ShapingInputs{Advantages: backendtest.Upload(t, be, adv, rows, cols), PerceptionScore: backendtest.Upload(t, be, perc, rows, cols),
					ResponseMask: backendtest.Upload(t, be, m, rows, cols)}, opt)
			if err != nil {
				t.Fatal(err)
			}
			return [][]float32{backendtest.Host(t, shaped), backendtest.Host(t, fac), backendtest.Host(t, sens), shapingRecords(recs...)}
		}})
	}
	ops = append(ops, backendtest.Op{Name: "ShapeAdvantages", RTol: 1e-6, ATol: 1e-7, Run: func(t *testing.T, be tensor.Backend) [][]float32 {
		// Statistics of the whole batch (ShapingStatsOfScore), shaping in place of rows 1..
		mask, a := backendtest.Upload(t, be, m, rows, cols), backendtest.Upload(t, be, adv, rows, cols)
		sens := backendtest.NewF32(be, rows)
		if err := tprl.SensitivityScores(sens, backendtest.Upload(t, be, perc, rows, cols), mask); err != nil {
			t.Fatal(err)
		}
		st, err := tprl.ShapingStatsOf(sens, mask)
		if err != nil {
			t.Fatal(err)
		}
		fac := backendtest.NewF32(be, rows)
		views := make([]*tensor.Tensor, 4)
		for i, x := range []*tensor.Tensor{a, sens, mask, fac} {
			if views[i], err = x.Rows(1, rows); err != nil {
				t.Fatal(err)
			}
		}
		rec, err := tprl.ShapeAdvantages(tprl.ShapingOutputs{Advantages: views[0], Factors: views[3]},
			tprl.ShapingInputs{Advantages: views[0], Sensitivity: views[1], ResponseMask: views[2]}, st, opt)
		if err != nil {
			t.Fatal(err)
		}
		return [][]float32{backendtest.Host(t, a), backendtest.Host(t, fac), backendtest.Host(t, sens),
			{float32(st.Count), st.Min, st.Max, float32(st.Sum)}, shapingRecords(rec)}
	}})
	return ops
}

// shapingRecords flattens shaping records for comparison.
func shapingRecords(recs ...tprl.MicroBatchShaping) []float32 {
	b := func(x bool) float32 {
		if x {
			return 1
		}
		return 0
	}
	var out []float32
	for _, r := range recs {
		out = append(out, float32(r.Rows), float32(r.ValidRows), b(r.HasRange), r.GlobalMin, r.GlobalMax,
			b(r.Applied), r.TargetMax, r.ScoreMean, r.FactorMean)
	}
	return out
}
