package tprl

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/stretchr/testify/require"
)

// shapingBatch returns a random perception score, mask and advantages [rows, cols].
func shapingBatch(t *testing.T, r *rand.Rand, rows, cols int) (score, mask, adv []float32) {
	t.Helper()
	old, aug := randLogProbs(r, rows*cols), randLogProbs(r, rows*cols)
	// Make the per-row scale differ so the sensitivity scores spread.
	for i := range rows {
		s := float32(r.Float64() * 1.5)
		for tt := range cols {
			aug[i*cols+tt] = old[i*cols+tt] + s*(aug[i*cols+tt]-old[i*cols+tt])
		}
	}
	sc := zeros(t, rows, cols)
	require.NoError(t, divergence.PerceptionScore(sc, f32(t, old, rows, cols), f32(t, aug, rows, cols)))
	mask = randMask(r, rows, cols)
	adv = make([]float32, rows*cols)
	for i := range adv {
		adv[i] = float32(r.NormFloat64())
	}
	return host(t, sc), mask, adv
}

func runShapeBatch(t *testing.T, score, mask, adv []float32, rows, cols int, opt ShapingOptions) (shaped, factors, sens []float32, micro []MicroBatchShaping) {
	t.Helper()
	sh, f, s := zeros(t, rows, cols), zeros(t, rows), zeros(t, rows)
	micro, err := ShapeBatch(ShapingOutputs{Advantages: sh, Factors: f, Sensitivity: s}, ShapingInputs{Advantages: f32(t, adv, rows, cols), PerceptionScore: f32(t, score, rows, cols), ResponseMask: f32(t, mask, rows, cols)}, opt)
	require.NoError(t, err)
	return host(t, sh), host(t, f), host(t, s), micro
}

func validRows(mask []float32, cols int) []bool {
	out := make([]bool, len(mask)/cols)
	for i := range out {
		for _, w := range mask[i*cols : (i+1)*cols] {
			if w != 0 {
				out[i] = true
			}
		}
	}
	return out
}

func TestSensitivityScores(t *testing.T) {
	score := f32(t, []float32{1, 2, 3, 9, 4, 4, 4, 4, 5, 6, 7, 8}, 3, 4)
	mask := f32(t, []float32{1, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0}, 3, 4)
	dst := zeros(t, 3)
	require.NoError(t, SensitivityScores(dst, score, mask))
	require.Equal(t, []float32{2, 0, 5}, host(t, dst))
	st, err := ShapingStatsOf(dst, mask)
	require.NoError(t, err)
	require.Equal(t, ShapingStats{Count: 2, Min: 2, Max: 5, Sum: 7}, st)
	require.True(t, st.HasRange())
	require.True(t, st.Applies())
	require.InDelta(t, 0.5, st.MeanNorm(), 1e-7)
}

// Default scope: factors average to ≈1 over the valid rows of the mini-batch and do not depend
// on the micro-batch split. Reference scope: they average to ≈1 within each micro-batch.
func TestShapingFactorsAverageToOne(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for iter := range 30 {
		rows, cols := 2+r.IntN(30), 1+r.IntN(20)
		score, mask, adv := shapingBatch(t, r, rows, cols)
		valid := validRows(mask, cols)
		smin := float64(r.IntN(11)) / 10
		var ref []float32
		for _, micro := range []int{0, 1, 2, 3, 7, rows} {
			shaped, f, _, mb := runShapeBatch(t, score, mask, adv, rows, cols, ShapingOptions{ScalingMin: smin, MicroBatchSize: micro})
			if ref == nil {
				ref = f
				var sum float64
				n := 0
				for i, ok := range valid {
					if ok {
						sum += float64(f[i])
						n++
					} else {
						require.Equal(t, float32(1), f[i])
					}
				}
				if mb[0].Applied {
					require.InDelta(t, 1, sum/float64(n), 1e-5, "iter %d", iter)
				}
			}
			require.Equal(t, ref, f, "GlobalScope depends on the micro-batch size %d", micro)
			for i := range shaped {
				require.Equal(t, adv[i]*f[i/cols], shaped[i])
			}
		}
		// Reference scope: ≈1 per micro-batch with at least one valid row.
		micro := 1 + r.IntN(rows)
		_, f, _, mb := runShapeBatch(t, score, mask, adv, rows, cols, ShapingOptions{ScalingMin: smin, Scope: PerMicroBatchScope, MicroBatchSize: micro})
		for j, m := range mb {
			if !m.Applied || m.ValidRows == 0 {
				continue
			}
			var sum float64
			for i := j * micro; i < min((j+1)*micro, rows); i++ {
				if valid[i] {
					sum += float64(f[i])
				}
			}
			mean := sum / float64(m.ValidRows)
			if m.TargetMax < 1e6 { // mu == 0 (every valid row at the minimum) is the 2e7 case
				require.InDelta(t, 1, mean, 1e-4, "iter %d micro-batch %d", iter, j)
			}
		}
	}
}

// A data-parallel trainer merges per-device statistics; shaping each device's rows with the
// merged statistics gives the single-device GlobalScope result.
func TestShapingStatsMergeDataParallel(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	rows, cols := 24, 16
	score, mask, adv := shapingBatch(t, r, rows, cols)
	opt := ShapingOptions{ScalingMin: 0.7}
	_, want, sens, _ := runShapeBatch(t, score, mask, adv, rows, cols, opt)

	sensT := f32(t, sens, rows)
	maskT := f32(t, mask, rows, cols)
	whole, err := ShapingStatsOf(sensT, maskT)
	require.NoError(t, err)

	merged := ShapingStats{} // the zero value is empty too
	allReduce := EmptyShapingStats()
	for dev := range 3 {
		lo, hi := dev*8, dev*8+8
		s, _ := sensT.Rows(lo, hi)
		m, _ := maskT.Rows(lo, hi)
		st, err := ShapingStatsOf(s, m)
		require.NoError(t, err)
		merged = merged.Merge(st)
		// Field-wise all-reduce: SUM, MIN, MAX, SUM.
		allReduce.Count += st.Count
		allReduce.Min = min(allReduce.Min, st.Min)
		allReduce.Max = max(allReduce.Max, st.Max)
		allReduce.Sum += st.Sum
	}
	require.Equal(t, whole.Count, merged.Count)
	require.Equal(t, whole.Min, merged.Min)
	require.Equal(t, whole.Max, merged.Max)
	require.InDelta(t, whole.Sum, merged.Sum, 1e-9)
	require.Equal(t, merged, allReduce)

	for dev := range 3 {
		lo, hi := dev*8, dev*8+8
		for _, micro := range [][2]int{{lo, lo + 3}, {lo + 3, hi}} {
			a, b := micro[0], micro[1]
			shaped, f := zeros(t, b-a, cols), zeros(t, b-a)
			s, _ := sensT.Rows(a, b)
			m, _ := maskT.Rows(a, b)
			_, err := ShapeAdvantages(ShapingOutputs{Advantages: shaped, Factors: f}, ShapingInputs{Advantages: f32(t, adv[a*cols:b*cols], b-a, cols), Sensitivity: s, ResponseMask: m}, merged, opt)
			require.NoError(t, err)
			got := host(t, f)
			for i := range got {
				require.InDelta(t, want[a+i], got[i], 1e-6)
			}
		}
	}
	// Merge with empty statistics is the identity.
	require.Equal(t, whole, whole.Merge(EmptyShapingStats()))
	require.Equal(t, whole, ShapingStats{}.Merge(whole))
}

func TestShapingMeanNormMatchesNorms(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	scores := make([]float32, 50)
	counts := make([]float32, 50)
	for i := range scores {
		scores[i] = float32(r.Float64() * 3)
		counts[i] = float32(r.IntN(3))
	}
	st := statsHost(scores, counts)
	var sum float64
	for i, s := range scores {
		if counts[i] > 0 {
			sum += float64((s - st.Min) / (st.Max - st.Min))
		}
	}
	require.InDelta(t, sum/float64(st.Count), st.MeanNorm(), 1e-6)
	require.True(t, math.IsNaN(float64(ShapingStats{}.MeanNorm())))
	require.Zero(t, ShapingStats{Count: 2, Min: 1, Max: 1, Sum: 2}.MeanNorm())
}

// Reference quirk (case micro_1): single-row micro-batches get factor ≈1, except the
// minimum-score row, which gets smin with target_max ≈ 2e7.
func TestShapingPerMicroBatchSingleRows(t *testing.T) {
	score := []float32{1, 1, 2, 2, 3, 3}
	mask := []float32{1, 1, 1, 1, 1, 1}
	adv := []float32{1, 1, 1, 1, 1, 1}
	_, f, sens, mb := runShapeBatch(t, score, mask, adv, 3, 2, ShapingOptions{ScalingMin: 0.8, Scope: PerMicroBatchScope, MicroBatchSize: 1})
	require.Equal(t, []float32{1, 2, 3}, sens)
	require.InDelta(t, 0.8, f[0], 1e-7)
	require.InDelta(t, 1, f[1], 1e-6)
	require.InDelta(t, 1, f[2], 1e-6)
	require.InDelta(t, 2e7, mb[0].TargetMax, 1)
	// The default scope gives the whole-batch mapping instead.
	_, f, _, mb = runShapeBatch(t, score, mask, adv, 3, 2, ShapingOptions{ScalingMin: 0.8, MicroBatchSize: 1})
	require.InDelta(t, 0.8, f[0], 1e-7)
	require.InDelta(t, 1, f[1], 1e-6)
	require.InDelta(t, 1.2, f[2], 1e-6)
	for _, m := range mb {
		require.InDelta(t, 1.2, m.TargetMax, 1e-6)
	}
}

func TestShapingNoRange(t *testing.T) {
	// One valid row: no range, factors 1, global min/max NaN and not logged.
	score := []float32{1, 1, 5, 5}
	mask := []float32{1, 1, 0, 0}
	adv := []float32{2, 3, 4, 5}
	shaped, f, _, mb := runShapeBatch(t, score, mask, adv, 2, 2, ShapingOptions{ScalingMin: 0.5})
	require.Equal(t, []float32{1, 1}, f)
	require.Equal(t, adv, shaped)
	require.Len(t, mb, 1)
	require.False(t, mb[0].HasRange)
	require.True(t, math.IsNaN(float64(mb[0].GlobalMin)))
	require.Equal(t, map[string]float64{"actor/sensitivity_score_mean": 1, "actor/scaling_factor_mean": 1}, mb[0].Metrics())

	// Equal scores: range logged, not applied.
	mask = []float32{1, 0, 1, 0}
	score = []float32{2, 0, 2, 0}
	_, f, _, mb = runShapeBatch(t, score, mask, adv, 2, 2, ShapingOptions{ScalingMin: 0.5})
	require.Equal(t, []float32{1, 1}, f)
	require.True(t, mb[0].HasRange)
	require.False(t, mb[0].Applied)
	require.True(t, math.IsNaN(float64(mb[0].TargetMax)))
	m := mb[0].Metrics()
	require.NotContains(t, m, "actor/dynamic_scaling_max")
	require.Equal(t, 2.0, m["actor/global_sensitivity_score_min"])

	// A NaN score makes the range NaN and disables shaping, as torch.quantile does.
	score = []float32{2, 0, float32(math.NaN()), 0}
	_, f, _, mb = runShapeBatch(t, score, mask, adv, 2, 2, ShapingOptions{ScalingMin: 0.5})
	require.Equal(t, []float32{1, 1}, f)
	require.False(t, mb[0].Applied)
	require.True(t, math.IsNaN(float64(mb[0].GlobalMax)))
}

func TestShapingMiniBatches(t *testing.T) {
	// Two mini-batches take separate ranges.
	score := []float32{0, 1, 10, 20}
	mask := []float32{1, 1, 1, 1}
	adv := []float32{1, 1, 1, 1}
	_, f, _, mb := runShapeBatch(t, score, mask, adv, 4, 1, ShapingOptions{ScalingMin: 0.5, MiniBatchSize: 2})
	require.Len(t, mb, 2)
	require.Equal(t, float32(0), mb[0].GlobalMin)
	require.Equal(t, float32(10), mb[1].GlobalMin)
	require.Equal(t, f[0], f[2])
	require.Equal(t, f[1], f[3])
	require.InDelta(t, 0.5, f[0], 1e-7)
	require.InDelta(t, 1.5, f[1], 1e-6)
	// shaped may alias adv.
	a := f32(t, []float32{2, 2, 2, 2}, 4, 1)
	_, err := ShapeBatch(ShapingOutputs{Advantages: a}, ShapingInputs{Advantages: a, PerceptionScore: f32(t, score, 4, 1), ResponseMask: f32(t, mask, 4, 1)}, ShapingOptions{ScalingMin: 0.5})
	require.NoError(t, err)
	require.InDelta(t, 1.0, host(t, a)[0], 1e-6)
}
