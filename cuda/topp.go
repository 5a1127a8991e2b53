//go:build cuda

package cuda

import (
	"github.com/mtrl-go/mtrl/tensor"
)

// The per-row top-p mask: tensor.TopPMask (kernels/topp.cu).
var _ tensor.TopPKernel = deviceKernels{}

// TopPMask is the device kernel of tensor.TopPMask: one block per row, a radix selection of the
// k-th largest order key and an ordered pass for the ties (lower index first, NaN first).
func (b deviceKernels) TopPMask(dst, scores, mask *tensor.Tensor, p float32) error {
	const op = "tensor.TopPMask"
	rows, cols := scores.Dim(0), scores.Dim(1)
	if rows == 0 {
		return nil
	}
	return b.do(op, func() error {
		ps, err := b.ptrs(op, []string{"dst", "scores", "mask"}, dst, scores, mask)
		if err != nil {
			return err
		}
		return b.launch(op, "topp_mask_fwd_f32", rows, 1, blockSize, 0,
			ptrArg(ps[0]), ptrArg(ps[1]), ptrArg(ps[2]), intArg(cols), f32Arg(p))
	})
}

var _ tensor.TopPTieBreakKernel = deviceKernels{}

// TopPMaskTieBreak is the device kernel of tensor.TopPMaskTieBreak: topp_mask_fwd_f32's radix
// selection, then a second one over the tied positions by (tiebreak, lower index).
func (b deviceKernels) TopPMaskTieBreak(dst, scores, tiebreak, mask *tensor.Tensor, p float32) error {
	const op = "tensor.TopPMaskTieBreak"
	rows, cols := scores.Dim(0), scores.Dim(1)
	if rows == 0 {
		return nil
	}
	return b.do(op, func() error {
		ps, err := b.ptrs(op, []string{"dst", "scores", "tiebreak", "mask"}, dst, scores, tiebreak, mask)
		if err != nil {
			return err
		}
		return b.launch(op, "topp_mask_tiebreak_fwd_f32", rows, 1, blockSize, 0,
			ptrArg(ps[0]), ptrArg(ps[1]), ptrArg(ps[2]), ptrArg(ps[3]), intArg(cols), f32Arg(p))
	})
}
