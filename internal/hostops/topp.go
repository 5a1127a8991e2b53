package hostops

import (
	"cmp"
	"math"
	"slices"
)

// TopPCount is the number of tokens a top-p selection keeps out of n valid ones:
// ceil(float32(float32(n) * p)), computed in float32 exactly as the reference does (a float64
// product differs, e.g. n=50, p=0.3 gives 16 here and 15 in float64).
func TopPCount(n int, p float32) int {
	prod := float32(float32(n) * p)
	k := int(math.Ceil(float64(prod)))
	return max(0, min(k, n))
}

// RowSelection describes the top-p selection of one row: TopPRow fills K and Valid,
// SelectionRowStats every field.
type RowSelection struct {
	// K is the number of selected positions, TopPCount(Valid, p).
	K int
	// Valid is the number of valid positions (mask != 0).
	Valid int
	// Threshold is the K-th largest valid score: the score at position K-1 of the valid
	// positions in stable descending order (so, when K == Valid, the smallest score at the
	// highest index among equal minima); 0 when K == 0.
	Threshold float32
	// SelectedSum and RejectedSum are the float64 sums, in position order, of the selected
	// scores and of the valid scores that were not selected.
	SelectedSum, RejectedSum float64
}

// TopPScratch holds the per-goroutine buffers of TopPRow; its zero value is ready to use and it
// grows to the longest row it has seen. It must not be shared by concurrent calls.
type TopPScratch struct {
	pos  []int32  // valid positions, ascending
	keys []uint32 // order keys of the valid positions
	cand []int32  // indices into pos still in the running
	hist [1 << radixBits0]int32
}

func (s *TopPScratch) grow(n int) {
	if cap(s.pos) < n {
		s.pos = make([]int32, n)
		s.keys = make([]uint32, n)
		s.cand = make([]int32, n)
	}
}

// The radix digits of TopPRow: 11, 11 and 10 bits, most significant first.
const (
	radixShift0, radixShift1, radixShift2 = 21, 10, 0
	radixBits0, radixBits1, radixBits2    = 11, 11, 10
)

// TopPRow writes into sel (0/1) the top-p selection of one row: of the positions t with
// mask[t] != 0 (the valid ones) it selects the k = TopPCount(valid, p) with the largest
// scores[t], and writes 0 everywhere else. The result is exactly that of a stable descending
// sort of the valid positions keeping the first k, as torch's sort: ties go to the lower index,
// -0 equals +0 and NaN ranks above every number (all NaNs tie). scores gives the row length n;
// sel and mask must be at least that long. sc holds reusable buffers (nil allocates fresh
// ones).
//
// It runs in O(n): the k-th largest order key is found by a radix selection (digits of 11, 11
// and 10 bits, the later ones only over the candidates left); every position with a larger
// key is selected, and of those whose key equals it the lowest indices fill the rest.
func TopPRow(sel, scores, mask []float32, p float32, sc *TopPScratch) RowSelection {
	return TopPRowTieBreak(sel, scores, nil, mask, p, sc)
}

// TopPRowTieBreak is TopPRow with the ties at the threshold broken by a second score: of the
// valid positions whose score ties with the k-th largest, those with the largest tiebreak
// value are selected (ordered as scores are; equal tiebreak values go to the lower index).
// A nil tiebreak is TopPRow's rule, the lower index. With a random permutation as tiebreak the
// tied positions kept are a uniformly random subset of them: no position is favoured.
func TopPRowTieBreak(sel, scores, tiebreak, mask []float32, p float32, sc *TopPScratch) RowSelection {
	if sc == nil {
		sc = new(TopPScratch)
	}
	n := len(scores)
	sc.grow(n)
	pos, keys := sc.pos[:0], sc.keys[:0]
	hist := &sc.hist
	clear(hist[:])
	for t, w := range mask[:n] {
		sel[t] = 0
		if w != 0 {
			key := orderKey(scores[t])
			pos = append(pos, int32(t))
			keys = append(keys, key)
			hist[key>>radixShift0]++
		}
	}
	nv := len(pos)
	r := RowSelection{Valid: nv, K: TopPCount(nv, p)}
	k := r.K
	switch {
	case k == 0:
		return r
	case k == nv:
		for _, t := range pos {
			sel[t] = 1
		}
		return r
	}
	// Radix selection, most significant digit first. need is the rank of the wanted key among
	// the candidates, counted from the largest.
	need := k
	b := radixBucket(hist[:1<<radixBits0], &need)
	cand := sc.cand[:0]
	for i, key := range keys {
		if key>>radixShift0 == b {
			cand = append(cand, int32(i))
		}
	}
	shifts, bits := [2]uint32{radixShift1, radixShift2}, [2]uint32{radixBits1, radixBits2}
	for d := 0; d < len(shifts) && len(cand) > 1; d++ {
		shift, width := shifts[d], uint32(1)<<bits[d]
		h := hist[:width]
		clear(h)
		for _, i := range cand {
			h[(keys[i]>>shift)&(width-1)]++
		}
		b := radixBucket(h, &need)
		j := 0
		for _, i := range cand {
			if (keys[i]>>shift)&(width-1) == b {
				cand[j] = i
				j++
			}
		}
		cand = cand[:j]
	}
	kth := keys[cand[0]]
	if tiebreak != nil {
		selectTies(sel, pos, keys, kth, need, tiebreak, cand[:0])
		return r
	}
	// need is now the number of positions with key == kth to take (lowest indices first).
	for i, t := range pos {
		switch key := keys[i]; {
		case key > kth:
		case key == kth && need > 0:
			need--
		default:
			continue
		}
		sel[t] = 1
	}
	return r
}

// selectTies selects every position whose key exceeds kth and, of those whose key equals it,
// the need with the largest tiebreak order key (lower index first among equal ones). tied is
// scratch with room for len(pos) entries.
func selectTies(sel []float32, pos []int32, keys []uint32, kth uint32, need int, tiebreak []float32, tied []int32) {
	for i, t := range pos {
		switch key := keys[i]; {
		case key > kth:
			sel[t] = 1
		case key == kth:
			tied = append(tied, t)
		}
	}
	if need < len(tied) {
		// tied is in ascending position order; a stable sort by descending tiebreak keeps the
		// lower index first among equal tiebreak values.
		slices.SortStableFunc(tied, func(a, b int32) int {
			return cmp.Compare(orderKey(tiebreak[b]), orderKey(tiebreak[a]))
		})
	}
	for _, t := range tied[:need] {
		sel[t] = 1
	}
}

// radixBucket walks the histogram from the largest bucket down and returns the bucket holding
// the need-th largest candidate, reducing need by the candidates in larger buckets.
func radixBucket(h []int32, need *int) uint32 {
	b := len(h) - 1
	for ; b > 0 && int(h[b]) < *need; b-- {
		*need -= int(h[b])
	}
	return uint32(b)
}

// orderKey maps a float32 to a uint32 whose unsigned order is the order of selection: larger
// numbers give larger keys, -0 equals +0 and every NaN gets the largest key (NaN ranks first,
// as in torch's descending sort; all NaNs tie).
func orderKey(x float32) uint32 {
	if x != x {
		return math.MaxUint32
	}
	b := math.Float32bits(x)
	if b == 1<<31 { // -0
		b = 0
	}
	if b&(1<<31) != 0 {
		return ^b
	}
	return b | 1<<31
}

// SelectionRowStats measures a finished selection sel (0/1) of one row: the valid positions
// (mask != 0), how many of them are selected (K), the float64 sums in position order of the
// selected and of the rejected valid scores, and the threshold: the K-th largest valid score,
// i.e. the selected score with the smallest order key, the last in position order among equal
// keys as in a stable descending sort (0 when nothing is selected). Device kernels compute the
// same per row (cuda/kernels/tprl.cu; there a tie of -0 and +0 reads +0 and a NaN threshold is
// the quiet NaN).
func SelectionRowStats(sel, scores, mask []float32) RowSelection {
	var r RowSelection
	least := uint32(math.MaxUint32)
	for t, w := range mask[:len(scores)] {
		if w == 0 {
			continue
		}
		r.Valid++
		v := scores[t]
		if sel[t] == 0 {
			r.RejectedSum += float64(v)
			continue
		}
		r.K++
		r.SelectedSum += float64(v)
		if key := orderKey(v); key <= least {
			least, r.Threshold = key, v
		}
	}
	return r
}
