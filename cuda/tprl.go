//go:build cuda

package cuda

import (
	"unsafe"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
)

var (
	_ tprl.SelectionStatsKernel = deviceKernels{}
	_ tprl.ShapingKernel        = deviceKernels{}
	_ tprl.UnionKernel          = deviceKernels{}
)

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

// ShapingRows is the device kernel of trajectory shaping's per-row sums: ppo_rowsums_fwd_f32,
// one block per row, float64 sums in a fixed block order; the 2B float64 results come down.
func (b deviceKernels) ShapingRows(sums, counts []float64, values, mask *tensor.Tensor) error {
	const op = "tprl.ShapingRows"
	rows, cols := mask.Dim(0), mask.Dim(1)
	if rows == 0 || cols == 0 {
		clear(sums)
		clear(counts)
		return nil
	}
	return b.do(op, func() error {
		ps, err := b.ptrs(op, []string{"values", "mask"}, values, mask)
		if err != nil {
			return err
		}
		sp, err := b.scratchPtr(op, 16*int64(rows))
		if err != nil {
			return err
		}
		s, c, err := b.rowSums(op, sp, ps[0], ps[1], rows, cols)
		if err != nil {
			return err
		}
		if sums != nil {
			copy(sums, s)
		}
		copy(counts, c)
		return nil
	})
}

// ScaleRows is the device kernel of trajectory shaping's row scaling: the B factors go up,
// tprl_scale_rows_fwd_f32 multiplies every row of src by its factor into dst.
func (b deviceKernels) ScaleRows(dst, src *tensor.Tensor, factors []float32) error {
	const op = "tprl.ScaleRows"
	rows, cols := src.Dim(0), src.Dim(1)
	n := rows * cols
	if n == 0 {
		return nil
	}
	return b.do(op, func() error {
		ps, err := b.ptrs(op, []string{"dst", "src"}, dst, src)
		if err != nil {
			return err
		}
		sp, err := b.scratchPtr(op, 4*int64(rows))
		if err != nil {
			return err
		}
		if err := b.upload(op, sp, unsafe.Pointer(&factors[0]), 4*rows); err != nil {
			return err
		}
		return b.elementwise(op, "tprl_scale_rows_fwd_f32", n, ptrArg(ps[0]), ptrArg(ps[1]), ptrArg(sp), intArg(n), intArg(cols))
	})
}

// UnionRows is the device kernel of tprl.UnionMask: tprl_union_fwd_f32 writes the union and
// each row's counts and float64 sums (7 doubles per row come down); tprl combines the rows.
func (b deviceKernels) UnionRows(rows []tprl.UnionRow, dst *tensor.Tensor, in tprl.UnionInputs) error {
	const op = "tprl.UnionRows"
	n, cols := in.ResponseMask.Dim(0), in.ResponseMask.Dim(1)
	if n == 0 || cols == 0 {
		clear(rows)
		return nil
	}
	const per = 7
	st := make([]float64, per*n)
	err := b.do(op, func() error {
		ps, err := b.ptrs(op, []string{"dst", "EntropyMask", "PerceptionMask", "Entropy", "PerceptionScore", "ResponseMask"},
			dst, in.EntropyMask, in.PerceptionMask, in.Entropy, in.PerceptionScore, in.ResponseMask)
		if err != nil {
			return err
		}
		sp, err := b.scratchPtr(op, 8*per*int64(n))
		if err != nil {
			return err
		}
		if err := b.launch(op, "tprl_union_fwd_f32", n, 1, blockSize, 0, ptrArg(sp), ptrArg(ps[0]), ptrArg(ps[1]),
			ptrArg(ps[2]), ptrArg(ps[3]), ptrArg(ps[4]), ptrArg(ps[5]), intArg(cols)); err != nil {
			return err
		}
		return b.download(op, unsafe.Pointer(&st[0]), sp, 8*per*n)
	})
	if err != nil {
		return err
	}
	for i := range rows {
		r := st[per*i : per*(i+1)]
		rows[i] = tprl.UnionRow{Valid: int(r[0]), Selected: int(r[1]), Rejected: int(r[2]),
			EntSel: r[3], EntRej: r[4], PercSel: r[5], PercRej: r[6]}
	}
	return nil
}
