package divergencetest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/backendtest"
)

// opsAt: every per-token penalty and its gradient, the full KL, the perception score
// and the KL-penalised rewards, on log-probs <= 0.
func opsAt(rows, cols int) []backendtest.Op {
	r := rand.New(rand.NewPCG(uint64(rows), uint64(cols)))
	n := rows * cols
	lp, ref := backendtest.Randn(r, n, 2), backendtest.Randn(r, n, 2)
	for i := range lp {
		lp[i] = -float32(math.Abs(float64(lp[i])))
		ref[i] = -float32(math.Abs(float64(ref[i])))
	}
	scores := backendtest.Randn(r, n, 1)
	// d loss / d penalty for the backward: per token, or per row of V for the full KL; every
	// fifth entry 0, where the gradient must be exactly 0.
	dpen := backendtest.Randn(r, n, 1)
	for i := 0; i < n; i += 5 {
		dpen[i] = 0
	}
	// low_var_kl, the full KL and the perception score call exp.
	usesExp := func(k divergence.Kind) bool { return k == divergence.LowVarKL || k == divergence.Full }
	var ops []backendtest.Op
	for _, kind := range []divergence.Kind{divergence.KL, divergence.Abs, divergence.MSE, divergence.LowVarKL} {
		ops = append(ops, backendtest.Op{Name: "Penalty/" + kind.String(), RTol: 1e-6, ATol: 1e-6, Libm: usesExp(kind), Run: func(t *testing.T, be tensor.Backend) [][]float32 {
			d := backendtest.NewF32(be, rows, cols)
			if err := divergence.Penalty(d, backendtest.Upload(t, be, lp, rows, cols), backendtest.Upload(t, be, ref, rows, cols), kind); err != nil {
				t.Fatal(err)
			}
			return [][]float32{backendtest.Host(t, d)}
		}})
	}
	for _, kind := range []divergence.Kind{divergence.KL, divergence.Abs, divergence.MSE, divergence.LowVarKL, divergence.Full} {
		ops = append(ops, backendtest.Op{Name: "PenaltyBackward/" + kind.String(), RTol: 1e-6, ATol: 1e-6, Libm: usesExp(kind), Run: func(t *testing.T, be tensor.Backend) [][]float32 {
			d, dp := backendtest.NewF32(be, rows, cols), backendtest.Upload(t, be, dpen, rows, cols)
			if kind == divergence.Full {
				dp = backendtest.Upload(t, be, dpen[:rows], rows)
			}
			in := divergence.PenaltyGrad{LogProbs: backendtest.Upload(t, be, lp, rows, cols), Ref: backendtest.Upload(t, be, ref, rows, cols), DPenalty: dp, Kind: kind}
			if err := divergence.PenaltyBackward(d, in); err != nil {
				t.Fatal(err)
			}
			return [][]float32{backendtest.Host(t, d)}
		}})
	}
	return append(ops,
		backendtest.Op{Name: "Penalty/full", RTol: 1e-5, ATol: 1e-5, Libm: true, Run: func(t *testing.T, be tensor.Backend) [][]float32 {
			d := backendtest.NewF32(be, rows)
			if err := divergence.Penalty(d, backendtest.Upload(t, be, lp, rows, cols), backendtest.Upload(t, be, ref, rows, cols), divergence.Full); err != nil {
				t.Fatal(err)
			}
			return [][]float32{backendtest.Host(t, d)}
		}},
		backendtest.Op{Name: "PerceptionScore", RTol: 1e-6, ATol: 1e-6, Libm: true, Run: func(t *testing.T, be tensor.Backend) [][]float32 {
			d := backendtest.NewF32(be, rows, cols)
			if err := divergence.PerceptionScore(d, backendtest.Upload(t, be, lp, rows, cols), backendtest.Upload(t, be, ref, rows, cols)); err != nil {
				t.Fatal(err)
			}
			return [][]float32{backendtest.Host(t, d)}
		}},
		backendtest.Op{Name: "Rewards", Run: func(t *testing.T, be tensor.Backend) [][]float32 {
			d := backendtest.NewF32(be, rows, cols)
			if err := divergence.Rewards(d, backendtest.Upload(t, be, scores, rows, cols), backendtest.Upload(t, be, lp, rows, cols), backendtest.Upload(t, be, ref, rows, cols), 0.05); err != nil {
				t.Fatal(err)
			}
			return [][]float32{backendtest.Host(t, d)}
		}},
	)
}
