package hostops

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// stableTopPRow is the test oracle for TopPRow: the definition by a stable descending sort of
// the valid positions (NaN first, -0 == +0), keeping the first k. The threshold is the score
// at sorted position k-1 and the sums run in position order, as TopPRow documents.
func stableTopPRow(sel, scores, mask []float32, p float32) RowSelection {
	var idx []int32
	for t := range scores {
		sel[t] = 0
		if mask[t] != 0 {
			idx = append(idx, int32(t))
		}
	}
	r := RowSelection{Valid: len(idx), K: TopPCount(len(idx), p)}
	slices.SortStableFunc(idx, func(a, b int32) int { return compareDesc(scores[a], scores[b]) })
	for _, t := range idx[:r.K] {
		sel[t] = 1
	}
	if r.K > 0 {
		r.Threshold = scores[idx[r.K-1]]
	}
	for t, v := range scores {
		switch {
		case mask[t] == 0:
		case sel[t] != 0:
			r.SelectedSum += float64(v)
		default:
			r.RejectedSum += float64(v)
		}
	}
	return r
}

// compareDesc orders a before b (negative) when a is larger; NaN is largest.
func compareDesc(a, b float32) int {
	an, bn := a != a, b != b
	switch {
	case an && bn:
		return 0
	case an:
		return -1
	case bn:
		return 1
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// sameSelection reports how TopPRow's result sel and the statistics got of its selection differ
// from the oracle's want ("" when they do not): K and Valid equal, Threshold bit for bit (the
// same position is chosen), sums equal or both NaN.
func sameSelection(sel, got, want RowSelection) string {
	sameSum := func(a, b float64) bool { return a == b || (a != a && b != b) }
	switch {
	case sel.K != want.K || sel.Valid != want.Valid:
		return fmt.Sprintf("TopPRow K, Valid = %d, %d; want %d, %d", sel.K, sel.Valid, want.K, want.Valid)
	case got.K != want.K || got.Valid != want.Valid:
		return fmt.Sprintf("K, Valid = %d, %d; want %d, %d", got.K, got.Valid, want.K, want.Valid)
	case math.Float32bits(got.Threshold) != math.Float32bits(want.Threshold):
		return fmt.Sprintf("Threshold %v (%#x), want %v (%#x)", got.Threshold,
			math.Float32bits(got.Threshold), want.Threshold, math.Float32bits(want.Threshold))
	case !sameSum(got.SelectedSum, want.SelectedSum) || !sameSum(got.RejectedSum, want.RejectedSum):
		return fmt.Sprintf("sums %v, %v; want %v, %v", got.SelectedSum, got.RejectedSum,
			want.SelectedSum, want.RejectedSum)
	}
	return ""
}

// randTopPValues returns n scores: quantised with many ties and random-signed zeros, or
// spread out (exercising every radix digit); with rare NaN and ±Inf when special is set.
func randTopPValues(r *rand.Rand, n int, ties, special bool) []float32 {
	v := make([]float32, n)
	for i := range v {
		if ties {
			v[i] = float32(r.IntN(5)) * 0.5
			if v[i] == 0 && r.IntN(2) == 0 {
				v[i] = float32(math.Copysign(0, -1))
			}
		} else {
			v[i] = float32(r.NormFloat64() * 2)
		}
		if special {
			switch r.IntN(40) {
			case 0:
				v[i] = float32(math.NaN())
			case 1:
				v[i] = float32(math.Inf(1))
			case 2:
				v[i] = float32(math.Inf(-1))
			}
		}
	}
	return v
}

// randTopPMask returns a 0/1 mask of length n: empty, full, a prefix or with holes.
func randTopPMask(r *rand.Rand, n int) []float32 {
	m := make([]float32, n)
	switch r.IntN(6) {
	case 0: // empty
	case 1: // full
		for t := range m {
			m[t] = 1
		}
	case 2, 3: // holes
		for t := range m {
			if r.IntN(3) > 0 {
				m[t] = 1
			}
		}
	default: // prefix
		for t := range r.IntN(n + 1) {
			m[t] = 1
		}
	}
	return m
}

// The radix selection must give exactly the stable-sort result, including ties (lower index
// wins), -0 == +0, NaN first, ±Inf, k == n (threshold: the last of equal minima) and k == 0.
func TestTopPRowMatchesStableSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var sc TopPScratch // reused across rows of every length
	var kZero, kAll, kSome int
	for iter := range 3000 {
		n := 1 + r.IntN(70)
		if iter%100 == 0 {
			n = 1000 + r.IntN(300)
		}
		vals := randTopPValues(r, n, iter%2 == 0, iter%5 != 0)
		mask := randTopPMask(r, n)
		p := float32(r.IntN(11)) / 10
		if iter%3 == 0 {
			p = r.Float32()
		}
		want := make([]float32, n)
		got := make([]float32, n)
		for i := range got {
			got[i] = 7 // must be overwritten
		}
		ws := stableTopPRow(want, vals, mask, p)
		gs := TopPRow(got, vals, mask, p, &sc)
		if !slices.Equal(want, got) {
			t.Fatalf("iter %d n %d p %v: selection\n got %v\nwant %v\nvals %v\nmask %v", iter, n, p, got, want, vals, mask)
		}
		if d := sameSelection(gs, SelectionRowStats(got, vals, mask), ws); d != "" {
			t.Fatalf("iter %d n %d p %v: %s", iter, n, p, d)
		}
		switch {
		case ws.K == 0:
			kZero++
		case ws.K == ws.Valid:
			kAll++
		default:
			kSome++
		}
	}
	if kZero < 100 || kAll < 100 || kSome < 1000 {
		t.Fatalf("too few cases of a kind: k == 0: %d, k == n: %d, 0 < k < n: %d", kZero, kAll, kSome)
	}
}

func TestTopPRowEdgeCases(t *testing.T) {
	nan, inf, negZero := float32(math.NaN()), float32(math.Inf(1)), float32(math.Copysign(0, -1))
	for _, c := range []struct {
		name         string
		scores, mask []float32
		p            float32
		sel          []float32
		k            int
		thr          float32
	}{
		{"ties lower index wins", []float32{1, 3, 3, 2, 3}, []float32{1, 1, 1, 1, 1}, 0.4, []float32{0, 1, 1, 0, 0}, 2, 3},
		{"k == n takes the last of equal minima", []float32{0, negZero, 1}, []float32{1, 1, 1}, 1, []float32{1, 1, 1}, 3, negZero},
		{"-0 == +0, lower index wins", []float32{negZero, 0, -1}, []float32{1, 1, 1}, 0.6, []float32{1, 1, 0}, 2, 0},
		{"NaN ranks first", []float32{inf, nan, 1, nan}, []float32{1, 1, 1, 1}, 0.5, []float32{0, 1, 0, 1}, 2, nan},
		{"+Inf after NaN", []float32{1, inf, nan, -inf}, []float32{1, 1, 1, 1}, 0.5, []float32{0, 1, 1, 0}, 2, inf},
		{"padding never selected", []float32{9, 1, 2, 8}, []float32{0, 1, 1, 0}, 0.5, []float32{0, 0, 1, 0}, 1, 2},
		{"p == 0", []float32{1, 2}, []float32{1, 1}, 0, []float32{0, 0}, 0, 0},
		{"empty mask", []float32{1, 2}, []float32{0, 0}, 1, []float32{0, 0}, 0, 0},
		{"empty row", nil, nil, 0.5, nil, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			sel := make([]float32, len(c.scores))
			for i := range sel {
				sel[i] = 5
			}
			got := TopPRow(sel, c.scores, c.mask, c.p, nil) // nil scratch allocates
			st := SelectionRowStats(sel, c.scores, c.mask)
			if !slices.Equal(sel, c.sel) || got.K != c.k || math.Float32bits(st.Threshold) != math.Float32bits(c.thr) && !(c.thr != c.thr && st.Threshold != st.Threshold) {
				t.Fatalf("sel %v k %d thr %v; want %v %d %v", sel, got.K, st.Threshold, c.sel, c.k, c.thr)
			}
			want := stableTopPRow(make([]float32, len(c.scores)), c.scores, c.mask, c.p)
			if d := sameSelection(got, st, want); d != "" {
				t.Fatal(d)
			}
		})
	}
}

// orderKey orders numbers as compareDesc does (reversed), with -0 == +0 and all NaNs equal.
func TestOrderKey(t *testing.T) {
	nan := float32(math.NaN())
	vals := []float32{float32(math.Inf(-1)), -math.MaxFloat32, -1, -math.SmallestNonzeroFloat32,
		float32(math.Copysign(0, -1)), 0, math.SmallestNonzeroFloat32, 1, math.MaxFloat32,
		float32(math.Inf(1)), nan, -nan, math.Float32frombits(0x7fc00001)}
	for _, a := range vals {
		for _, b := range vals {
			ka, kb := orderKey(a), orderKey(b)
			want := -compareDesc(a, b)
			got := 0
			if ka < kb {
				got = -1
			} else if ka > kb {
				got = 1
			}
			if got != want {
				t.Fatalf("orderKey(%v) = %#x, orderKey(%v) = %#x: order %d, want %d", a, ka, b, kb, got, want)
			}
		}
	}
}

func FuzzTopPRow(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 0, 0, 0x80, 0x3f}, []byte{1, 1, 1}, float32(0.5))
	f.Add([]byte{0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0xc0, 0x7f}, []byte{1, 0, 1}, float32(1))
	f.Add([]byte{}, []byte{}, float32(0.3))
	f.Fuzz(func(t *testing.T, raw, maskBytes []byte, p float32) {
		if !(p >= 0 && p <= 1) {
			return
		}
		n := len(raw) / 4
		scores, mask := make([]float32, n), make([]float32, n)
		for i := range n {
			scores[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			if i < len(maskBytes) && maskBytes[i]&1 != 0 {
				mask[i] = 1
			}
		}
		got, want := make([]float32, n), make([]float32, n)
		gs := TopPRow(got, scores, mask, p, nil)
		ws := stableTopPRow(want, scores, mask, p)
		if !slices.Equal(got, want) {
			t.Fatalf("selection %v, want %v", got, want)
		}
		if d := sameSelection(gs, SelectionRowStats(got, scores, mask), ws); d != "" {
			t.Fatal(d)
		}
	})
}

func BenchmarkTopPRow(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 2))
	cols := 1024
	vals := randTopPValues(r, cols, false, false)
	mask := make([]float32, cols)
	for i := range mask {
		mask[i] = 1
	}
	sel := make([]float32, cols)
	run := func(b *testing.B, fn func()) {
		b.SetBytes(int64(cols * 12)) // scores and mask read, sel written
		for b.Loop() {
			fn()
		}
		b.ReportMetric(float64(cols)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	}
	b.Run(fmt.Sprintf("radix/cols=%d", cols), func(b *testing.B) {
		var sc TopPScratch
		run(b, func() { TopPRow(sel, vals, mask, 0.2, &sc) })
	})
	b.Run(fmt.Sprintf("stable_sort/cols=%d", cols), func(b *testing.B) {
		run(b, func() { stableTopPRow(sel, vals, mask, 0.2) })
	})
}

// TestTopPRowTieBreak checks TopPRowTieBreak against its definition: a stable descending sort
// by (score, tiebreak), keeping the first k. Scores come from a few values so ties are common.
func TestTopPRowTieBreak(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	var sc TopPScratch
	for trial := range 2000 {
		n := 1 + r.IntN(70)
		scores, tb, mask := make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range n {
			scores[i] = float32(r.IntN(1 + trial%4))
			tb[i] = float32(r.IntN(3 + trial%5)) // ties in the tiebreak too: lower index wins
			if r.Float32() < 0.8 {
				mask[i] = 1
			}
		}
		if trial%7 == 0 {
			scores[r.IntN(n)] = float32(math.NaN())
		}
		p := r.Float32()
		got, want := make([]float32, n), make([]float32, n)
		TopPRowTieBreak(got, scores, tb, mask, p, &sc)
		var idx []int32
		for i := range n {
			if mask[i] != 0 {
				idx = append(idx, int32(i))
			}
		}
		slices.SortStableFunc(idx, func(a, b int32) int {
			if c := compareDesc(scores[a], scores[b]); c != 0 {
				return c
			}
			return compareDesc(tb[a], tb[b])
		})
		for _, i := range idx[:TopPCount(len(idx), p)] {
			want[i] = 1
		}
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: scores %v tiebreak %v mask %v p %v:\ngot  %v\nwant %v", trial, scores, tb, mask, p, got, want)
		}
	}
}

// TestTopPRowTieBreakPositionNeutral: in an all-tied row with a fresh random permutation as the
// tiebreak, each position is kept with probability k/n; the lower-index rule keeps exactly the
// first k. 4000 rows of n = 20, k = 5: each position's count is Binomial(4000, 1/4), sd 27.4;
// a bound of 5 sd fails by chance with probability ~1e-5 over the 20 positions.
func TestTopPRowTieBreakPositionNeutral(t *testing.T) {
	const n, rows = 20, 4000
	r := rand.New(rand.NewPCG(13, 14))
	scores, mask, sel := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range n {
		scores[i], mask[i] = 0.5, 1
	}
	var counts [n]int
	tb := make([]float32, n)
	for range rows {
		for i, v := range r.Perm(n) {
			tb[i] = float32(v)
		}
		TopPRowTieBreak(sel, scores, tb, mask, 0.25, nil)
		for i, s := range sel {
			counts[i] += int(s)
		}
	}
	mean, sd := float64(rows)/4, math.Sqrt(float64(rows)*0.25*0.75)
	for i, c := range counts {
		if math.Abs(float64(c)-mean) > 5*sd {
			t.Errorf("position %d kept %d times of %d, want %.0f ± %.0f", i, c, rows, mean, 5*sd)
		}
	}
	TopPRow(sel, scores, mask, 0.25, nil)
	for i, s := range sel {
		if want := float32(b2f(i < 5)); s != want {
			t.Errorf("lower-index rule: sel[%d] = %v, want %v", i, s, want)
		}
	}
}

func b2f(b bool) float32 {
	if b {
		return 1
	}
	return 0
}
