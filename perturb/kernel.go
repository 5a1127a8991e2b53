package perturb

import "github.com/mtrl-go/mtrl/tensor"

// BlackenKernel is the optional backend kernel of Blackening.ApplyBatch. dst and src are
// validated uint8 batches [N, H, W] or [N, H, W, C] on the backend (dst may be src); grids[i] is
// image i's grid, drawn on the host from (seed, ids[i]) exactly as the pure-Go path draws it, so
// the result is the same bytes. The kernel copies src to dst and zeroes every channel of each
// black patchSize×patchSize patch (edge patches cut to the image).
type BlackenKernel interface {
	BlackenBatch(dst, src *tensor.Tensor, grids []Grid, patchSize int) error
}

// batchKernel runs ApplyBatch through the backend's BlackenKernel when it has one; handled is
// false otherwise (the pure-Go path runs).
func (b Blackening) batchKernel(op string, dst, src *tensor.Tensor, seed uint64, ids []uint64) (handled bool, err error) {
	if src == nil {
		return false, nil
	}
	k, ok := tensor.KernelOf[BlackenKernel](src.Backend())
	if !ok {
		return false, nil
	}
	n, g, err := checkImages(op, dst, src, true)
	if err != nil {
		return true, err
	}
	if len(ids) != n {
		return true, tensor.Errorf(tensor.ErrShape, op, "ids", "has %d sample ids, the batch has %d images", len(ids), n)
	}
	grids := make([]Grid, n)
	for i, id := range ids {
		if grids[i], err = b.Grid(g.h, g.w, seed, id); err != nil {
			return true, err
		}
	}
	return true, k.BlackenBatch(dst, src, grids, b.PatchSize)
}
