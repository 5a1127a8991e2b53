package backendtest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/tensor"
)

// divergenceOps: every per-token penalty and its gradient, the full KL, the perception score
// and the KL-penalised rewards, on log-probs <= 0.
func divergenceOps(rows, cols int) []op {
	r := rand.New(rand.NewPCG(uint64(rows), uint64(cols)))
	n := rows * cols
	lp, ref := Randn(r, n, 2), Randn(r, n, 2)
	for i := range lp {
		lp[i] = -float32(math.Abs(float64(lp[i])))
		ref[i] = -float32(math.Abs(float64(ref[i])))
	}
	scores := Randn(r, n, 1)
	// d loss / d penalty for the backward: per token, or per row of V for the full KL; every
	// fifth entry 0, where the gradient must be exactly 0.
	dpen := Randn(r, n, 1)
	for i := 0; i < n; i += 5 {
		dpen[i] = 0
	}
	// low_var_kl, the full KL and the perception score call exp.
	usesExp := func(k divergence.Kind) bool { return k == divergence.LowVarKL || k == divergence.Full }
	var ops []op
	for _, kind := range []divergence.Kind{divergence.KL, divergence.Abs, divergence.MSE, divergence.LowVarKL} {
		ops = append(ops, op{"Penalty/" + kind.String(), 1e-6, 1e-6, usesExp(kind), func(t *testing.T, be tensor.Backend) [][]float32 {
			d := newF32(be, rows, cols)
			if err := divergence.Penalty(d, Upload(t, be, lp, rows, cols), Upload(t, be, ref, rows, cols), kind); err != nil {
				t.Fatal(err)
			}
			return [][]float32{Host(t, d)}
		}})
	}
	for _, kind := range []divergence.Kind{divergence.KL, divergence.Abs, divergence.MSE, divergence.LowVarKL, divergence.Full} {
		ops = append(ops, op{"PenaltyBackward/" + kind.String(), 1e-6, 1e-6, usesExp(kind), func(t *testing.T, be tensor.Backend) [][]float32 {
			d, dp := newF32(be, rows, cols), Upload(t, be, dpen, rows, cols)
			if kind == divergence.Full {
				dp = Upload(t, be, dpen[:rows], rows)
			}
			in := divergence.PenaltyGrad{LogProbs: Upload(t, be, lp, rows, cols), Ref: Upload(t, be, ref, rows, cols), DPenalty: dp, Kind: kind}
			if err := divergence.PenaltyBackward(d, in); err != nil {
				t.Fatal(err)
			}
			return [][]float32{Host(t, d)}
		}})
	}
	return append(ops,
		op{"Penalty/full", 1e-5, 1e-5, true, func(t *testing.T, be tensor.Backend) [][]float32 {
			d := newF32(be, rows)
			if err := divergence.Penalty(d, Upload(t, be, lp, rows, cols), Upload(t, be, ref, rows, cols), divergence.Full); err != nil {
				t.Fatal(err)
			}
			return [][]float32{Host(t, d)}
		}},
		op{"PerceptionScore", 1e-6, 1e-6, true, func(t *testing.T, be tensor.Backend) [][]float32 {
			d := newF32(be, rows, cols)
			if err := divergence.PerceptionScore(d, Upload(t, be, lp, rows, cols), Upload(t, be, ref, rows, cols)); err != nil {
				t.Fatal(err)
			}
			return [][]float32{Host(t, d)}
		}},
		op{"Rewards", 0, 0, false, func(t *testing.T, be tensor.Backend) [][]float32 {
			d := newF32(be, rows, cols)
			if err := divergence.Rewards(d, Upload(t, be, scores, rows, cols), Upload(t, be, lp, rows, cols), Upload(t, be, ref, rows, cols), 0.05); err != nil {
				t.Fatal(err)
			}
			return [][]float32{Host(t, d)}
		}},
	)
}
