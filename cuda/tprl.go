//go:build cuda

package cuda

import (
	"unsafe"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
)

var _ tprl.SelectionStatsKernel = deviceKernels{}

// SelectionRows is the device kernel of the statistics of tprl.EntropyMask and
// tprl.PerceptionMask: one block per row counts the valid and selected positions, sums the
// selected and rejected values in float64 and finds the threshold (kernels/tprl.cu); tprl
// combines the rows on the host.
func (b deviceKernels) SelectionRows(rows []tprl.SelectionRow, sel, values, mask *tensor.Tensor) error {
	const op = "tprl.SelectionRows"
	n, cols := values.Dim(0), values.Dim(1)
	if n == 0 || cols == 0 {
		clear(rows)
		return nil
	}
	const per = 5
	st := make([]float64, per*n)
	err := b.do(op, func() error {
		ps, err := b.ptrs(op, []string{"sel", "values", "mask"}, sel, values, mask)
		if err != nil {
			return err
		}
		sp, err := b.scratchPtr(op, 8*per*int64(n))
		if err != nil {
			return err
		}
		if err := b.launch(op, "tprl_select_stats_fwd_f32", n, 1, blockSize, 0,
			ptrArg(sp), ptrArg(ps[0]), ptrArg(ps[1]), ptrArg(ps[2]), intArg(cols)); err != nil {
			return err
		}
		return b.download(op, unsafe.Pointer(&st[0]), sp, 8*per*n)
	})
	if err != nil {
		return err
	}
	for i := range rows {
		r := st[per*i : per*(i+1)]
		rows[i] = tprl.SelectionRow{Valid: int(r[0]), Selected: int(r[1]), SelectedSum: r[2],
			RejectedSum: r[3], Threshold: float32(r[4])}
	}
	return nil
}
