//go:build cuda

package cuda

import (
	"unsafe"

	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/tensor"
)

var _ perturb.BlackenKernel = deviceKernels{}

// BlackenBatch is the device kernel of perturb.Blackening.ApplyBatch: the host-drawn grids are
// uploaded as one byte per patch and one grid-stride pass copies and blackens every image.
func (b deviceKernels) BlackenBatch(dst, src *tensor.Tensor, grids []perturb.Grid, patchSize int) error {
	const op = "perturb.Blackening.ApplyBatch"
	s := src.Shape()
	n, h, w, c := s[0], s[1], s[2], 1
	if len(s) == 4 {
		c = s[3]
	}
	if n == 0 || h*w*c == 0 {
		return nil
	}
	rows, cols := perturb.GridSize(h, w, patchSize)
	if len(grids) != n {
		return tensor.Errorf(tensor.ErrShape, op, "grids", "has %d grids, the batch has %d images", len(grids), n)
	}
	black := make([]byte, n*rows*cols)
	for i, g := range grids {
		if g.Rows != rows || g.Cols != cols || len(g.Black) != rows*cols {
			return tensor.Errorf(tensor.ErrShape, op, "grids", "grid %d is %d×%d, a %d×%d image in %d-pixel patches needs %d×%d", i, g.Rows, g.Cols, h, w, patchSize, rows, cols)
		}
		for j, v := range g.Black {
			if v {
				black[i*rows*cols+j] = 1
			}
		}
	}
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"dst", "src"}, dst, src)
		if err != nil {
			return err
		}
		sp, err := b.scratchPtr(op, int64(len(black)))
		if err != nil {
			return err
		}
		if err := b.upload(op, sp, unsafe.Pointer(&black[0]), len(black)); err != nil {
			return err
		}
		total := n * h * w * c
		return b.elementwise(op, "perturb_blacken_fwd_u8", total, ptrArg(p[0]), ptrArg(p[1]), ptrArg(sp),
			intArg(n), intArg(h), intArg(w), intArg(c), intArg(patchSize))
	})
}
