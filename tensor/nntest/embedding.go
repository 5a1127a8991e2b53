package nntest

import (
	"fmt"
	"testing"

	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/tensor"
)

// Embedding checks the gather and the scatter-add (repeated ids, accumulation) against the
// float64 reference, then with bfloat16 rows (checkBF16).
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

	// bfloat16 rows (y, DY) with a float32 or bfloat16 table, the gradient float32: the gather
	// and the ordered float32 scatter-add are bit for bit.
	for _, t16 := range []bool{false, true} {
		t.Run(fmt.Sprint("bf16/table bf16=", t16), func(t *testing.T) {
			e := env{t: t, b: e.b, r: e.r} // failures end this subtest
			tv, dyv := e.randn(v*d, 1, t16), e.randn(len(ids)*d, 1, true)
			run := func(bf16 bool) [][]float32 {
				id := e.i32(ids, 2, 40)
				y, dt := e.zerosOf(dtype(bf16), 2, 40, d), e.f32(append([]float32(nil), dt0...), v, d)
				e.ok(tensor.Embedding(y, e.put(tv, bf16 && t16, v, d), id))
				e.ok(tensor.EmbeddingBackward(dt, tensor.EmbeddingGrad{IDs: id, DY: e.put(dyv, bf16, 2, 40, d), Accumulate: true}))
				return [][]float32{e.values(y), e.values(dt)}
			}
			y, dt := make([]float32, len(ids)*d), append([]float32(nil), dt0...)
			nnref.Embedding(d, tv, ids, y)
			nnref.EmbeddingBackward(d, ids, dyv, dt, true)
			checkBF16(t, []string{"y", "dtable"}, []bool{true, false}, twice(t, func() [][]float32 { return run(true) }), run(false),
				[][]float32{y, dt}, []tol{{}, {}})
		})
	}
}
