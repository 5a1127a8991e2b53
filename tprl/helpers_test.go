package tprl

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/tensor"
)

// f32 wraps data as a CPU float32 tensor.
func f32(t testing.TB, data []float32, shape ...int) *tensor.Tensor {
	t.Helper()
	x, err := tensor.FromFloat32(data, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func zeros(t testing.TB, shape ...int) *tensor.Tensor {
	t.Helper()
	x, err := tensor.New(tensor.CPU(), tensor.Float32, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func host(t testing.TB, x *tensor.Tensor) []float32 {
	t.Helper()
	v, err := x.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// randMask returns a [rows, cols] 0/1 mask with ragged lengths, holes and empty rows.
func randMask(r *rand.Rand, rows, cols int) []float32 {
	m := make([]float32, rows*cols)
	for i := range rows {
		switch r.IntN(6) {
		case 0: // empty row
		case 1: // holes
			for t := range cols {
				if r.IntN(3) > 0 {
					m[i*cols+t] = 1
				}
			}
		default: // prefix
			n := r.IntN(cols + 1)
			for t := range n {
				m[i*cols+t] = 1
			}
		}
	}
	return m
}

// randValues returns values with many ties (quantised), occasional -0, and garbage in padding.
func randValues(r *rand.Rand, n int, ties bool) []float32 {
	v := make([]float32, n)
	for i := range v {
		if ties {
			v[i] = float32(r.IntN(5)) * 0.5
			if v[i] == 0 && r.IntN(2) == 0 {
				v[i] = float32(math.Copysign(0, -1))
			}
		} else {
			v[i] = float32(r.NormFloat64() * 2)
		}
	}
	return v
}

func randLogProbs(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = -float32(r.ExpFloat64() * 2)
	}
	return v
}

func sameNaN(a, b float32) bool { return a == b || (a != a && b != b) }

// percMask computes the perception score of old and aug into score (a temporary when nil) and
// the perception mask by it into dst, as a trainer does once per mini-batch.
func percMask(score, dst, old, aug, mask *tensor.Tensor, p float32) (SelectionStats, error) {
	if score == nil {
		var err error
		if score, err = tensor.NewLike(old, tensor.Float32); err != nil {
			return SelectionStats{}, err
		}
	}
	if err := divergence.PerceptionScore(score, old, aug); err != nil {
		return SelectionStats{}, err
	}
	return PerceptionMask(dst, score, mask, p)
}
