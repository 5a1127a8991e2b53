package backendtest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// statsOps: the masked sums, means, variance and whitening, and the per-row top-p mask (ties,
// a NaN score, right padding and empty rows included).
func statsOps(rows, cols int) []Op {
	r := rand.New(rand.NewPCG(uint64(rows)+200, uint64(cols)))
	n := rows * cols
	v, m := Randn(r, n, 2), PaddedMask(r, rows, cols)
	scores := Randn(r, n, 1)
	for i := 0; i < n; i += 97 {
		scores[i] = 0.5
	}
	scores[min(3, n-1)] = float32(math.NaN())
	return []Op{
		{Name: "MaskedMean", RTol: 1e-6, ATol: 1e-7, Run: func(t *testing.T, be tensor.Backend) [][]float32 {
			s, c, err := tensor.MaskedSum(Upload(t, be, v, rows, cols), Upload(t, be, m, rows, cols))
			if err != nil {
				t.Fatal(err)
			}
			mean, err := tensor.MaskedMean(Upload(t, be, v, rows, cols), Upload(t, be, m, rows, cols))
			if err != nil {
				t.Fatal(err)
			}
			return [][]float32{{float32(s), float32(c), mean}}
		}},
		{Name: "MaskedMeanRows", RTol: 1e-6, ATol: 1e-7, Run: func(t *testing.T, be tensor.Backend) [][]float32 {
			d := NewF32(be, rows)
			if err := tensor.MaskedMeanRows(d, Upload(t, be, v, rows, cols), Upload(t, be, m, rows, cols)); err != nil {
				t.Fatal(err)
			}
			return [][]float32{Host(t, d)}
		}},
		{Name: "MaskedVar", RTol: 1e-6, ATol: 1e-7, Run: func(t *testing.T, be tensor.Backend) [][]float32 {
			v1, err := tensor.MaskedVar(Upload(t, be, v, rows, cols), Upload(t, be, m, rows, cols), true)
			if err != nil {
				t.Fatal(err)
			}
			v0, err := tensor.MaskedVar(Upload(t, be, v, rows, cols), Upload(t, be, m, rows, cols), false)
			if err != nil {
				t.Fatal(err)
			}
			return [][]float32{{v1, v0}}
		}},
		{Name: "MaskedWhiten", RTol: 1e-6, ATol: 1e-6, Run: func(t *testing.T, be tensor.Backend) [][]float32 {
			d := NewF32(be, rows, cols)
			if err := tensor.MaskedWhiten(d, Upload(t, be, v, rows, cols), Upload(t, be, m, rows, cols)); err != nil {
				t.Fatal(err)
			}
			return [][]float32{Host(t, d)}
		}},
		{Name: "TopPMask", Run: func(t *testing.T, be tensor.Backend) [][]float32 {
			d := NewF32(be, rows, cols)
			if err := tensor.TopPMask(d, Upload(t, be, scores, rows, cols), Upload(t, be, m, rows, cols), 0.4); err != nil {
				t.Fatal(err)
			}
			return [][]float32{Host(t, d)}
		}},
	}
}

// PaddedMask is a random 0/1 mask (80% ones) with right padding on every seventh row (row 0
// included), of a third to all of the row.
func PaddedMask(r *rand.Rand, rows, cols int) []float32 {
	m := Mask01(r, rows*cols, 0.8)
	for i := 0; i < rows; i += 7 {
		for t := cols - cols/(1+i%3); t < cols; t++ {
			m[i*cols+t] = 0
		}
	}
	return m
}
