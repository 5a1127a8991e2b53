package nnref

import "github.com/mtrl-go/mtrl/internal/parallel"

// Embedding writes row ids[i] of table [v, d] into row i of y [len(ids), d].
func Embedding[F Float](d int, table []F, ids []int32, y []F) {
	parallel.For(len(ids), parallel.Grain(d, 1<<14), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			id := int(ids[i])
			copy(y[i*d:i*d+d], table[id*d:id*d+d])
		}
	})
}

// EmbeddingBackward adds row i of dy into row ids[i] of dtable (scatter-add), zeroing dtable
// first unless acc. Rows are added in ascending i, in parallel over column blocks, so repeated
// ids sum in a fixed order.
func EmbeddingBackward[F Float](d int, ids []int32, dy, dtable []F, acc bool) {
	if !acc {
		clear(dtable)
	}
	parallel.For(d, 256, func(lo, hi int) {
		for i, id := range ids {
			dst, src := dtable[int(id)*d+lo:int(id)*d+hi], dy[i*d+lo:i*d+hi]
			for j, g := range src {
				dst[j] += g
			}
		}
	})
}
