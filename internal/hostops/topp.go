package hostops

import (
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

// TopPRow marks in sel (0/1) the k = TopPCount(valid, p) valid positions of scores with the
// largest values, where valid positions have mask != 0. Ties go to the lower index; NaN ranks
// above every number, as in torch's descending sort. idx is scratch of at least len(scores).
// It returns k and the k-th largest valid score (0 when k == 0).
func TopPRow(sel, scores, mask []float32, p float32, idx []int32) (k int, threshold float32) {
	idx = idx[:0]
	for t, w := range mask {
		sel[t] = 0
		if w != 0 {
			idx = append(idx, int32(t))
		}
	}
	k = TopPCount(len(idx), p)
	if k == 0 {
		return 0, 0
	}
	if k < len(idx) {
		slices.SortStableFunc(idx, func(a, b int32) int { return compareDesc(scores[a], scores[b]) })
		threshold = scores[idx[k-1]]
	} else {
		threshold = scores[idx[0]]
		for _, t := range idx[1:] {
			if compareDesc(scores[t], threshold) > 0 {
				threshold = scores[t]
			}
		}
	}
	for _, t := range idx[:k] {
		sel[t] = 1
	}
	return k, threshold
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
