//go:build cuda

package cuda

import (
	"math"
	"unsafe"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
)

var _ tprl.SelectionKernel = deviceKernels{}

// SelectTopP is the device kernel of tprl.SelectTopP (and so EntropyMask and PerceptionMask):
// the selection of TopPMask, then one block per row for the counts, the float64 sums of the
// selected and rejected scores and the threshold; the rows are combined in order on the host as
// tprl.SelectHost does.
func (b deviceKernels) SelectTopP(dst, k, values, mask *tensor.Tensor, p float32) (tprl.SelectionStats, error) {
	const op = "tprl.SelectTopP"
	rows, cols := values.Dim(0), values.Dim(1)
	var s tprl.SelectionStats
	nan := float32(math.NaN())
	if rows == 0 || cols == 0 {
		if rows > 0 && k != nil {
			if err := b.TopPMask(dst, k, values, mask, p); err != nil { // writes k = 0
				return s, err
			}
		}
		s.SelectedMean, s.RejectedMean = nan, nan
		return s, nil
	}
	if err := b.TopPMask(dst, k, values, mask, p); err != nil {
		return s, err
	}
	const per = 5
	st := make([]float64, per*rows)
	err := b.do(op, func() error {
		ps, err := b.ptrs(op, []string{"dst", "values", "mask"}, dst, values, mask)
		if err != nil {
			return err
		}
		sp, err := b.scratchPtr(op, 8*per*int64(rows))
		if err != nil {
			return err
		}
		if err := b.launch(op, "tprl_select_stats_fwd_f32", rows, 1, blockSize, 0,
			ptrArg(sp), ptrArg(ps[0]), ptrArg(ps[1]), ptrArg(ps[2]), intArg(cols)); err != nil {
			return err
		}
		return b.download(op, unsafe.Pointer(&st[0]), sp, 8*per*rows)
	})
	if err != nil {
		return s, err
	}
	var thrSum, selS, rejS float64
	thrRows := 0
	for i := range rows {
		r := st[per*i : per*(i+1)]
		kk := int(r[1])
		s.Valid += int(r[0])
		s.Selected += kk
		selS += r[2]
		rejS += r[3]
		if kk > 0 {
			thrSum += float64(float32(r[4]))
			thrRows++
		}
	}
	if thrRows > 0 {
		s.Threshold = float32(thrSum / float64(thrRows))
	}
	s.SelectedMean = meanOrNaN(selS, s.Selected)
	s.RejectedMean = meanOrNaN(rejS, s.Valid-s.Selected)
	return s, nil
}

func meanOrNaN(sum float64, n int) float32 {
	if n <= 0 {
		return float32(math.NaN())
	}
	return float32(sum / float64(n))
}
