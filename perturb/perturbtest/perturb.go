package perturbtest

import (
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/backendtest"
)

// opsAt: patch blackening of a batch of rows/16+1 RGB images about cols/4 pixels a side.
func opsAt(rows, cols int) []backendtest.Op {
	r := rand.New(rand.NewPCG(uint64(rows)+500, uint64(cols)))
	imgs, side := rows/16+1, cols/4+5
	pix := make([]uint8, imgs*side*side*3)
	for i := range pix {
		pix[i] = uint8(r.IntN(256))
	}
	sampleIDs := make([]uint64, imgs)
	for i := range sampleIDs {
		sampleIDs[i] = uint64(i * 31)
	}
	return []backendtest.Op{{Name: "PatchBlackening", Run: func(t *testing.T, be tensor.Backend) [][]float32 {
		src, err := tensor.To(be, tensor.Must(tensor.FromUint8(pix, imgs, side, side, 3)))
		if err != nil {
			t.Fatal(err)
		}
		dst := tensor.Must(tensor.NewLike(src, tensor.Uint8))
		if err := perturb.DefaultBlackening().ApplyBatch(dst, src, 42, sampleIDs); err != nil {
			t.Fatal(err)
		}
		return [][]float32{backendtest.Host(t, dst)}
	}}}
}
