package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestNormBackwardColumnBlocks: with more than two cores the norms' second backward pass runs
// blocks of columns in parallel (normBackwardPasses); dx, dw and db are the one-block pass's
// bits, for a width whose last block is not a multiple of the vector lanes, float32 and
// bfloat16, statistics recomputed or saved.
func TestNormBackwardColumnBlocks(t *testing.T) {
	const rows, d = 70, 2*normColumnBlock + 76
	r := rand.New(rand.NewPCG(5, 6))
	v := func(n int, off float64) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = BF16FromFloat32(float32(off + r.NormFloat64())).Float32()
		}
		return out
	}
	xv, dyv, wv, bv := v(rows*d, 0.7), v(rows*d, 0), v(d, 1), v(d, 0)
	for _, bf := range []bool{false, true} {
		for _, layer := range []bool{false, true} {
			for _, saved := range []bool{false, true} {
				t.Run(fmt.Sprintf("bf16=%v/layer=%v/saved=%v", bf, layer, saved), func(t *testing.T) {
					run := func(procs int) [][]float32 {
						defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
						mk := func(v []float32, s ...int) *Tensor {
							if !bf {
								return Must(FromFloat32(append([]float32(nil), v...), s...))
							}
							b := make([]BF16, len(v))
							for i, f := range v {
								b[i] = BF16FromFloat32(f)
							}
							return Must(FromBF16(b, s...))
						}
						x, dy, w, b := mk(xv, rows, d), mk(dyv, rows, d), Must(FromFloat32(wv, d)), Must(FromFloat32(bv, d))
						y, dx := mk(make([]float32, rows*d), rows, d), mk(make([]float32, rows*d), rows, d)
						mean, rstd := Must(New(CPU(), Float32, rows)), Must(New(CPU(), Float32, rows))
						dw, db := Must(FromFloat32(v(d, 0), d)), Must(FromFloat32(v(d, 0), d))
						in := NormGrad{X: x, Weight: w, DY: dy, Eps: 1e-6, Accumulate: true}
						var err error
						if layer {
							if err = LayerNormStats(y, mean, rstd, x, w, b, 1e-6); err == nil {
								if saved {
									in.Mean, in.Rstd = mean, rstd
								}
								err = LayerNormBackward(dx, dw, db, in)
							}
						} else if err = RMSNormStats(y, rstd, x, w, 1e-6); err == nil {
							if saved {
								in.Rstd = rstd
							}
							err = RMSNormBackward(dx, dw, in)
						}
						if err != nil {
							t.Fatal(err)
						}
						var out [][]float32
						for _, o := range []*Tensor{dx, dw, db}[:map[bool]int{false: 2, true: 3}[layer]] {
							h, err := HostFloat32s(o)
							if err != nil {
								t.Fatal(err)
							}
							out = append(out, h)
						}
						return out
					}
					r = rand.New(rand.NewPCG(7, 8)) // the same dw, db starting values in both runs
					one := run(1)
					r = rand.New(rand.NewPCG(7, 8))
					blocks := run(8)
					for k := range one {
						for i := range one[k] {
							if math.Float32bits(one[k][i]) != math.Float32bits(blocks[k][i]) {
								t.Fatalf("output %d [%d]: %v with column blocks, %v without", k, i, blocks[k][i], one[k][i])
							}
						}
					}
				})
			}
		}
	}
}
