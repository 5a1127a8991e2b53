package tensor

import (
	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// TopPCount is how many of n valid tokens a top-p selection keeps:
// ceil(float32(float32(n) * p)), in float32 exactly as the reference computes it.
func TopPCount(n int, p float32) int { return hostops.TopPCount(n, p) }

// TopPKernel is implemented by backends that select top-p tokens on the device.
type TopPKernel interface {
	TopPMask(dst, k, scores, mask *Tensor, p float32) error
}

// TopPMask selects, in each row of scores [B, T], the TopPCount(n_i, p) positions with mask != 0
// that have the largest scores, and writes 1 there and 0 elsewhere into dst [B, T] (float32).
// Ties go to the lower index; NaN ranks above every number. k, when not nil, receives the
// per-row counts as int32 [B]. p must lie in [0, 1].
func TopPMask(dst, k, scores, mask *Tensor, p float32) error {
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
	if k != nil {
		if err := CheckShape(op, "k", k, scores.Dim(0)); err != nil {
			return err
		}
		if err := CheckDType(op, "k", k, Int32); err != nil {
			return err
		}
	}
	if err := CheckSameBackend(op, []string{"scores", "dst", "k"}, scores, dst, k); err != nil {
		return err
	}
	if err := CheckUnit(op, "p", float64(p)); err != nil {
		return err
	}
	if kk, ok := KernelOf[TopPKernel](scores.Backend()); ok {
		return kk.TopPMask(dst, k, scores, mask, p)
	}
	return OnHost(2, []*Tensor{dst, k, scores, mask}, func(h []*Tensor) error {
		d, _ := h[0].Float32s()
		var ks []int32
		if h[1] != nil {
			ks, _ = h[1].Int32s()
		}
		s, _ := h[2].Float32s()
		m, _ := h[3].Float32s()
		TopPMaskHost(d, ks, nil, s, m, scores.Dim(1), p)
		return nil
	})
}

// TopPMaskHost is the host kernel behind TopPMask on plain slices of rows of length cols (the
// O(n) radix selection of hostops.TopPRow, with the stable-sort result). ks and thresholds (the
// k-th largest valid score per row, 0 when k == 0) may be nil.
func TopPMaskHost(dst []float32, ks []int32, thresholds, scores, mask []float32, cols int, p float32) {
	rows := 0
	if cols > 0 {
		rows = len(scores) / cols
	} else { // rows of length 0 keep nothing
		clear(ks)
		clear(thresholds)
	}
	parallel.For(rows, parallel.Grain(cols, 1<<15), func(lo, hi int) {
		var sc hostops.TopPScratch
		for i := lo; i < hi; i++ {
			a, b := i*cols, (i+1)*cols
			r := hostops.TopPRow(dst[a:b], scores[a:b], mask[a:b], p, &sc)
			if ks != nil {
				ks[i] = int32(r.K)
			}
			if thresholds != nil {
				thresholds[i] = r.Threshold
			}
		}
	})
}
