package tensor

import (
	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// TopPCount is how many of n valid tokens a top-p selection keeps:
// ceil(float32(float32(n) * p)), in float32 exactly as the reference computes it.
func TopPCount(n int, p float32) int { return hostops.TopPCount(n, p) }

// TopPKernel is implemented by backends that select top-p tokens on the device. It receives
// validated tensors and must write exactly what TopPMask specifies.
type TopPKernel interface {
	TopPMask(dst, scores, mask *Tensor, p float32) error
}

// TopPMask selects, in each row of scores [B, T], the TopPCount(n_i, p) positions with mask != 0
// that have the largest scores, and writes 1 there and 0 elsewhere into dst [B, T] (float32);
// n_i is the row's number of positions with mask != 0. Ties go to the lower index (the result of
// a stable descending sort); -0 equals +0 and NaN ranks above every number. Padded positions are
// never selected. p must lie in [0, 1].
//
// It is the one top-p selection of the SDK: tprl.EntropyMask and tprl.PerceptionMask call it
// and add the reference's statistics.
func TopPMask(dst, scores, mask *Tensor, p float32) error {
	const op = "tensor.TopPMask"
	if err := checkMasked(op, scores, mask); err != nil {
		return err
	}
	if err := CheckShape(op, "scores", scores, -1, -1); err != nil {
		return err
	}
	if err := CheckSameShape(op, "scores", scores, "dst", dst); err != nil {
		return err
	}
	if err := CheckDType(op, "dst", dst, Float32); err != nil {
		return err
	}
	if err := CheckSameBackend(op, []string{"scores", "dst"}, scores, dst); err != nil {
		return err
	}
	if err := CheckUnit(op, "p", float64(p)); err != nil {
		return err
	}
	if kk, ok := KernelOf[TopPKernel](scores.Backend()); ok {
		return kk.TopPMask(dst, scores, mask, p)
	}
	return OnHost(1, []*Tensor{dst, scores, mask}, func(h []*Tensor) error {
		d, _ := h[0].Float32s()
		s, _ := h[1].Float32s()
		m, _ := h[2].Float32s()
		topPMaskHost(d, s, m, scores.Dim(1), p)
		return nil
	})
}

// topPMaskHost is the pure-Go kernel of TopPMask on row-major slices with rows of length cols:
// the O(n) radix selection of hostops.TopPRow per row, rows in parallel.
func topPMaskHost(dst, scores, mask []float32, cols int, p float32) {
	if cols == 0 {
		return
	}
	rows := len(scores) / cols
	parallel.For(rows, parallel.Grain(cols, 1<<15), func(lo, hi int) {
		var sc hostops.TopPScratch
		for i := lo; i < hi; i++ {
			a, b := i*cols, (i+1)*cols
			hostops.TopPRow(dst[a:b], scores[a:b], mask[a:b], p, &sc)
		}
	})
}

// TopPTieBreakKernel is implemented by backends that select top-p tokens with a tie-break score
// on the device. It receives validated tensors and must write exactly what TopPMaskTieBreak
// specifies; backends without it run the host kernel through OnHost.
type TopPTieBreakKernel interface {
	TopPMaskTieBreak(dst, scores, tiebreak, mask *Tensor, p float32) error
}

// TopPMaskTieBreak is TopPMask with another rule for ties at the threshold: of the valid
// positions whose score equals the k-th largest, those with the largest tiebreak [B, T]
// (float32, ordered as scores are) are selected, then the lower index among equal tiebreak
// values. Given a random permutation of the positions as tiebreak, the tied positions kept are
// a uniformly random subset of them, so a row whose scores all tie keeps each position with
// probability k/n instead of its first k (tprl's position-neutral rule).
func TopPMaskTieBreak(dst, scores, tiebreak, mask *Tensor, p float32) error {
	const op = "tensor.TopPMaskTieBreak"
	if err := checkMasked(op, scores, mask); err != nil {
		return err
	}
	if err := CheckShape(op, "scores", scores, -1, -1); err != nil {
		return err
	}
	if err := CheckSameShape(op, "scores", scores, "dst", dst); err != nil {
		return err
	}
	if err := CheckSameShape(op, "scores", scores, "tiebreak", tiebreak); err != nil {
		return err
	}
	if err := CheckDType(op, "dst", dst, Float32); err != nil {
		return err
	}
	if err := CheckDType(op, "tiebreak", tiebreak, Float32); err != nil {
		return err
	}
	if err := CheckSameBackend(op, []string{"scores", "dst", "tiebreak"}, scores, dst, tiebreak); err != nil {
		return err
	}
	if err := CheckUnit(op, "p", float64(p)); err != nil {
		return err
	}
	if kk, ok := KernelOf[TopPTieBreakKernel](scores.Backend()); ok {
		return kk.TopPMaskTieBreak(dst, scores, tiebreak, mask, p)
	}
	return OnHost(1, []*Tensor{dst, scores, tiebreak, mask}, func(h []*Tensor) error {
		d, _ := h[0].Float32s()
		s, _ := h[1].Float32s()
		tb, _ := h[2].Float32s()
		m, _ := h[3].Float32s()
		cols := scores.Dim(1)
		if cols == 0 {
			return nil
		}
		parallel.For(len(s)/cols, parallel.Grain(cols, 1<<15), func(lo, hi int) {
			var sc hostops.TopPScratch
			for i := lo; i < hi; i++ {
				a, b := i*cols, (i+1)*cols
				hostops.TopPRowTieBreak(d[a:b], s[a:b], tb[a:b], m[a:b], p, &sc)
			}
		})
		return nil
	})
}
