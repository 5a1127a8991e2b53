package tprl

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/stretchr/testify/require"
)

func TestEntropyMaskBasic(t *testing.T) {
	ent := f32(t, []float32{
		0.1, 0.9, 0.5, 0.9, 3, // row 0: last token padded, ties at 0.9
		1, 2, 3, 4, 5, // row 1: empty
	}, 2, 5)
	mask := f32(t, []float32{1, 1, 1, 1, 0, 0, 0, 0, 0, 0}, 2, 5)
	dst := zeros(t, 2, 5)
	s, err := EntropyMask(dst, ent, mask, 0.5)
	require.NoError(t, err)
	require.Equal(t, []float32{0, 1, 0, 1, 0, 0, 0, 0, 0, 0}, host(t, dst))
	require.Equal(t, 4, s.Valid)
	require.Equal(t, 2, s.Selected)
	require.InDelta(t, 0.9, s.Threshold, 1e-7)
	require.InDelta(t, 0.9, s.SelectedMean, 1e-7)
	require.InDelta(t, 0.3, s.RejectedMean, 1e-7)
	require.Equal(t, map[string]float64{
		"actor/entropy_token_fraction": 0.5,
		"actor/entropy_threshold":      float64(s.Threshold),
		"actor/entropy_mean_selected":  float64(s.SelectedMean),
		"actor/entropy_mean_rejected":  float64(s.RejectedMean),
	}, s.Metrics())

	// Ties: lower index wins.
	_, err = EntropyMask(dst, ent, mask, 0.25)
	require.NoError(t, err)
	require.Equal(t, []float32{0, 1, 0, 0, 0, 0, 0, 0, 0, 0}, host(t, dst))
}

func TestSelectionMetricsPresence(t *testing.T) {
	vals := f32(t, []float32{1, 2, 3, 4}, 2, 2)
	empty := f32(t, []float32{0, 0, 0, 0}, 2, 2)
	full := f32(t, []float32{1, 1, 1, 1}, 2, 2)
	dst := zeros(t, 2, 2)

	s, err := PerceptionMask(dst, vals, empty, 0.5)
	require.NoError(t, err)
	require.Empty(t, s.Metrics(), "S == 0: nothing logged")

	s, err = PerceptionMask(dst, vals, full, 0)
	require.NoError(t, err)
	m := s.Metrics()
	require.Len(t, m, 3)
	require.NotContains(t, m, "actor/low_var_kl_mean_selected")
	require.Equal(t, 0.0, m["actor/low_var_kl_threshold"], "no row with k > 0: threshold 0")

	s, err = PerceptionMask(dst, vals, full, 1)
	require.NoError(t, err)
	m = s.Metrics()
	require.Len(t, m, 3)
	require.NotContains(t, m, "actor/low_var_kl_mean_rejected")
	require.Equal(t, 1.0, m["actor/perception_token_fraction"])
	require.InDelta(t, 2.0, m["actor/low_var_kl_threshold"], 1e-7, "mean of row minima 1 and 3")

	lists := map[string][]float64{}
	s.AppendMetrics(lists)
	s.AppendMetrics(lists)
	require.Len(t, lists["actor/low_var_kl_threshold"], 2)
}

// bruteSelection recomputes SelectionStats from a mask and k by definition.
func bruteSelection(vals, mask, sel []float32, ks []int32, cols int) SelectionStats {
	var s SelectionStats
	var selSum, rejSum, thrSum float64
	var thrRows int
	for i, k := range ks {
		row := []float32{}
		for t := i * cols; t < (i+1)*cols; t++ {
			if mask[t] != 0 {
				s.Valid++
				row = append(row, vals[t])
				if sel[t] != 0 {
					s.Selected++
					selSum += float64(vals[t])
				} else {
					rejSum += float64(vals[t])
				}
			}
		}
		if k > 0 {
			slices.SortFunc(row, func(a, b float32) int { return -cmpFloat(a, b) })
			thrSum += float64(row[k-1])
			thrRows++
		}
	}
	if thrRows > 0 {
		s.Threshold = float32(thrSum / float64(thrRows))
	}
	s.SelectedMean = meanOrNaN(selSum, s.Selected)
	s.RejectedMean = meanOrNaN(rejSum, s.Valid-s.Selected)
	return s
}

func cmpFloat(a, b float32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkSelectionInvariants asserts the properties every selection must have.
func checkSelectionInvariants(t *testing.T, vals, mask, sel []float32, cols int, p float32) {
	t.Helper()
	rows := 0
	if cols > 0 {
		rows = len(mask) / cols
	}
	for i := range rows {
		n, c := 0, 0
		var minSel, maxRej float32 = float32(math.Inf(1)), float32(math.Inf(-1))
		for tt := i * cols; tt < (i+1)*cols; tt++ {
			require.True(t, sel[tt] == 0 || sel[tt] == 1, "mask is 0/1")
			if mask[tt] == 0 {
				require.Zero(t, sel[tt], "row %d pos %d: padded token selected", i, tt-i*cols)
				continue
			}
			n++
			if sel[tt] == 1 {
				c++
				minSel = min(minSel, vals[tt])
			} else {
				maxRej = max(maxRej, vals[tt])
			}
		}
		require.Equal(t, hostops.TopPCount(n, p), c, "row %d: |mask row| = TopPCount(n, p)", i)
		if c > 0 && c < n {
			require.GreaterOrEqual(t, minSel, maxRej, "row %d: a rejected token beats a selected one", i)
		}
		// Stable tie rule: of equal values the lower index is selected first.
		row, srow, mrow := vals[i*cols:(i+1)*cols], sel[i*cols:(i+1)*cols], mask[i*cols:(i+1)*cols]
		for a := range row {
			if srow[a] == 0 {
				continue
			}
			for c := range a {
				require.False(t, mrow[c] != 0 && srow[c] == 0 && row[c] == row[a],
					"row %d: position %d selected over the equal value at %d", i, a, c)
			}
		}
	}
}

func TestSelectionProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for iter := range 200 {
		rows, cols := 1+r.IntN(9), 1+r.IntN(40)
		vals := randValues(r, rows*cols, iter%2 == 0)
		mask := randMask(r, rows, cols)
		v, m := f32(t, vals, rows, cols), f32(t, mask, rows, cols)
		var prev []float32
		for _, p := range []float32{0, 0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 0.99, 1} {
			dst := zeros(t, rows, cols)
			s, err := EntropyMask(dst, v, m, p)
			require.NoError(t, err)
			sel := host(t, dst)
			checkSelectionInvariants(t, vals, mask, sel, cols, p)
			want := bruteSelection(vals, mask, sel, rowCounts32(mask, cols, p), cols)
			want.Filter = EntropyFilter
			require.Equal(t, want.Valid, s.Valid)
			require.Equal(t, want.Selected, s.Selected)
			require.InDelta(t, want.Threshold, s.Threshold, 1e-5)
			require.True(t, sameNaN(want.SelectedMean, s.SelectedMean) || math.Abs(float64(want.SelectedMean-s.SelectedMean)) < 1e-5)
			require.True(t, sameNaN(want.RejectedMean, s.RejectedMean) || math.Abs(float64(want.RejectedMean-s.RejectedMean)) < 1e-5)
			// Monotone in p: a larger p keeps every token a smaller p kept (stable tie rule).
			if prev != nil {
				for i := range sel {
					require.GreaterOrEqual(t, sel[i], prev[i], "not monotone in p at %d (p=%v)", i, p)
				}
			}
			prev = sel
		}
	}
}

// The perception mask keeps the tokens whose log-prob changes most under the perturbation.
func TestPerceptionMaskPicksLargestChange(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	rows, cols := 4, 50
	old := randLogProbs(r, rows*cols)
	aug := slices.Clone(old)
	mask := make([]float32, rows*cols)
	for i := range mask {
		mask[i] = 1
	}
	// In each row, perturb 10 distinct tokens by distinct amounts (both signs); the rest are
	// unchanged.
	changed := map[int]bool{}
	for i := range rows {
		for j, tt := range r.Perm(cols)[:10] {
			d := float32(0.5 + 0.25*float64(j))
			if j%2 == 1 {
				d = -d
			}
			aug[i*cols+tt] += d
			changed[i*cols+tt] = true
		}
	}
	score, dst := zeros(t, rows, cols), zeros(t, rows, cols)
	s, err := percMask(score, dst, f32(t, old, rows, cols), f32(t, aug, rows, cols), f32(t, mask, rows, cols), 0.2)
	require.NoError(t, err)
	require.Equal(t, PerceptionFilter, s.Filter)
	sel := host(t, dst)
	for i, x := range sel {
		require.Equal(t, changed[i], x == 1, "position %d", i)
	}
	require.InDelta(t, 0, s.RejectedMean, 1e-7)
	// score = clamp(exp(d)-d-1, 0, 10)
	sc := host(t, score)
	for i := range sc {
		d := float64(aug[i] - old[i])
		want := math.Min(10, math.Max(0, math.Exp(d)-d-1))
		require.InDelta(t, want, sc[i], 1e-5*math.Max(1, want))
	}
	// Without a score output it gives the same mask.
	dst2 := zeros(t, rows, cols)
	_, err = percMask(nil, dst2, f32(t, old, rows, cols), f32(t, aug, rows, cols), f32(t, mask, rows, cols), 0.2)
	require.NoError(t, err)
	require.Equal(t, sel, host(t, dst2))
}

func TestSelectionDeterministicAcrossParallelism(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	rows, cols := 300, 257
	vals := randValues(r, rows*cols, false)
	mask := randMask(r, rows, cols)
	run := func() (SelectionStats, []float32) {
		dst := zeros(t, rows, cols)
		s, err := EntropyMask(dst, f32(t, vals, rows, cols), f32(t, mask, rows, cols), 0.3)
		require.NoError(t, err)
		return s, host(t, dst)
	}
	s1, m1 := run()
	var per []SelectionStats
	for range 3 {
		s, m := run()
		require.Equal(t, m1, m)
		per = append(per, s)
	}
	for _, s := range per {
		require.Equal(t, s1, s)
	}
}

func FuzzSelectTopP(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint8(7), float32(0.3), false)
	f.Add(uint64(2), uint8(1), uint8(1), float32(1), true)
	f.Add(uint64(3), uint8(0), uint8(5), float32(0.5), false)
	f.Add(uint64(4), uint8(8), uint8(0), float32(0.2), true)
	f.Add(uint64(5), uint8(5), uint8(64), float32(0), true)
	f.Add(uint64(6), uint8(2), uint8(33), float32(1.5), false)
	f.Add(uint64(7), uint8(2), uint8(33), float32(math.NaN()), false)
	f.Fuzz(func(t *testing.T, seed uint64, rows8, cols8 uint8, p float32, ties bool) {
		rows, cols := int(rows8%16), int(cols8%80)
		r := rand.New(rand.NewPCG(seed, 99))
		vals := randValues(r, rows*cols, ties)
		mask := randMask(r, rows, cols)
		dst := zeros(t, rows, cols)
		s, err := EntropyMask(dst, f32(t, vals, rows, cols), f32(t, mask, rows, cols), p)
		if !(p >= 0 && p <= 1) {
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		checkSelectionInvariants(t, vals, mask, host(t, dst), cols, p)
		require.LessOrEqual(t, s.Selected, s.Valid)
		// tensor.TopPMask (no statistics) selects the same tokens.
		want := zeros(t, rows, cols)
		require.NoError(t, tensor.TopPMask(want, f32(t, vals, rows, cols), f32(t, mask, rows, cols), p))
		require.Equal(t, host(t, want), host(t, dst))
	})
}

// rowCounts32 is k_i = TopPCount(n_i, p) of each row of mask: what every row must select.
func rowCounts32(mask []float32, cols int, p float32) []int32 {
	if cols == 0 {
		return nil
	}
	ks := make([]int32, len(mask)/cols)
	for i := range ks {
		n := 0
		for _, w := range mask[i*cols : (i+1)*cols] {
			if w != 0 {
				n++
			}
		}
		ks[i] = int32(hostops.TopPCount(n, p))
	}
	return ks
}
