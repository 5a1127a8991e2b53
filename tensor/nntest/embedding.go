package nntest

import (
	"testing"

	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/tensor"
)

// Embedding checks the gather and the scatter-add (repeated ids, accumulation) against the
// float64 reference.
func Embedding(t *testing.T, b tensor.Backend) {
	e := newEnv(t, b, 27)
	const v, d = 50, 64
	ids := make([]int32, 2*40)
	for i := range ids {
		ids[i] = int32(e.r.IntN(v / 5)) // many repeats
	}
	tv, dyv, dt0 := e.randn(v*d, 1, false), e.randn(len(ids)*d, 1, false), e.randn(v*d, 1, false)
	got := twice(t, func() [][]float32 {
		id := e.i32(ids, 2, 40)
		y, dt := e.zeros(2, 40, d), e.f32(append([]float32(nil), dt0...), v, d)
		e.ok(tensor.Embedding(y, e.f32(tv, v, d), id))
		e.ok(tensor.EmbeddingBackward(dt, tensor.EmbeddingGrad{IDs: id, DY: e.f32(dyv, 2, 40, d), Accumulate: true}))
		return [][]float32{e.host(y), e.host(dt)}
	})
	y, dt := make([]float64, len(ids)*d), f64(dt0)
	nnref.Embedding(d, f64(tv), ids, y)
	nnref.EmbeddingBackward(d, ids, f64(dyv), dt, true)
	near(t, "y", got[0], y, 0, 0)
	near(t, "dtable", got[1], dt, rtol, 1e-5)
}
