package ppotest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/backendtest"
)

// opsAt: the aggregated average loss, the policy loss of every loss type and aggregation mode
// (with and without a token mask, Scale and Accumulate; the forward-only call must agree), and
// the clipped value loss, the KL loss (token kinds and full, written and accumulated) and the
// entropy penalty (written, accumulated, forward only).
func opsAt(rows, cols int) []backendtest.Op {
	r := rand.New(rand.NewPCG(uint64(rows)+100, uint64(cols)))
	n := rows * cols
	lp, old := backendtest.Randn(r, n, 1), backendtest.Randn(r, n, 1)
	for i := range lp {
		lp[i] = -float32(math.Abs(float64(lp[i])))
		old[i] = lp[i] + float32(r.NormFloat64()*0.3)
	}
	adv, vals, rets, ltm := backendtest.Randn(r, n, 1), backendtest.Randn(r, n, 1), backendtest.Randn(r, n, 1), backendtest.Mask01(r, n, 0.3)
	m := backendtest.PaddedMask(r, rows, cols)
	gradInit := backendtest.Randn(r, n, 0.01)
	var ops []backendtest.Op
	for _, mode := range []ppo.AggMode{ppo.Token, ppo.Seq, ppo.SeqMeanTokenSum, ppo.SeqMeanTokenSumNorm} {
		agg := ppo.Agg{Mode: mode, Horizon: cols}
		ops = append(ops, backendtest.Op{Name: "AverageLoss/" + mode.String(), RTol: 1e-6, ATol: 1e-12, Run: func(t *testing.T, be tensor.Backend) [][]float32 {
			g := backendtest.NewF32(be, rows, cols)
			loss, err := agg.LossGrad(g, backendtest.Upload(t, be, adv, rows, cols), backendtest.Upload(t, be, m, rows, cols))
			if err != nil {
				t.Fatal(err)
			}
			return [][]float32{{loss}, backendtest.Host(t, g)}
		}})
		for _, lt := range []ppo.LossType{ppo.Vanilla, ppo.GSPO, ppo.GSPOToken, ppo.CISPO, ppo.SAPO} {
			for _, v := range []struct {
				name   string
				tokens bool
				opts   ppo.Grad // Dst set per run
			}{{"plain", false, ppo.Grad{}}, {"tokenmask+scale+acc", true, ppo.Grad{Scale: 0.25, Accumulate: true}}} {
				if rows > 64 && mode != ppo.Token && v.name != "plain" {
					continue // the variants are covered at the smaller sizes
				}
				cfg := ppo.DefaultPolicyConfig(lt)
				cfg.Agg = agg
				// Per-token gradients are about 1/S: an absolute tolerance must be far below that.
				ops = append(ops, backendtest.Op{Name: fmt.Sprintf("PolicyLoss/%v/%v/%s", lt, mode, v.name), RTol: 2e-5, ATol: 1e-12, Run: func(t *testing.T, be tensor.Backend) [][]float32 {
					g := backendtest.Upload(t, be, gradInit, rows, cols)
					in := ppo.PolicyInputs{
						OldLogProbs: backendtest.Upload(t, be, old, rows, cols), LogProbs: backendtest.Upload(t, be, lp, rows, cols),
						Advantages: backendtest.Upload(t, be, adv, rows, cols), ResponseMask: backendtest.Upload(t, be, m, rows, cols),
					}
					if v.tokens {
						in.TokenMask = backendtest.Upload(t, be, ltm, rows, cols)
					}
					res, err := ppo.PolicyLoss(withDst(v.opts, g), in, cfg)
					if err != nil {
						t.Fatal(err)
					}
					fwd, err := ppo.PolicyLoss(withDst(v.opts, nil), in, cfg)
					if err != nil {
						t.Fatal(err)
					}
					if fwd != res {
						t.Errorf("forward-only %+v, with gradient %+v", fwd, res)
					}
					return [][]float32{backendtest.Host(t, g), backendtest.Scalars(float64(res.Loss), float64(res.PGLoss), res.PPOKL, res.EntropyLoss, res.ClipFracHigher, res.ClipFracLower)}
				}})
			}
		}
		for _, opts := range gradVariants {
			cfg := ppo.ValueConfig{ClipRange: 0.5, Agg: agg}
			ops = append(ops, backendtest.Op{Name: fmt.Sprintf("ValueLoss/%v/acc=%v", mode, opts.Accumulate), RTol: 1e-6, ATol: 1e-12, Run: func(t *testing.T, be tensor.Backend) [][]float32 {
				g := backendtest.Upload(t, be, gradInit, rows, cols)
				res, err := ppo.ValueLoss(withDst(opts, g), ppo.ValueInputs{
					VPreds: backendtest.Upload(t, be, adv, rows, cols), Returns: backendtest.Upload(t, be, rets, rows, cols),
					Values: backendtest.Upload(t, be, vals, rows, cols), ResponseMask: backendtest.Upload(t, be, m, rows, cols),
				}, cfg)
				if err != nil {
					t.Fatal(err)
				}
				return [][]float32{backendtest.Host(t, g), backendtest.Scalars(float64(res.Loss), float64(res.VFLoss), res.VFClipFrac, res.VPredMean)}
			}})
		}
	}
	ref := make([]float32, n)
	for i := range ref {
		ref[i] = lp[i] + float32(r.NormFloat64()*0.2)
	}
	for _, kind := range []divergence.Kind{divergence.KL, divergence.LowVarKL} {
		for _, opts := range gradVariants {
			cfg := ppo.KLConfig{Kind: kind, Coef: 0.1, Agg: ppo.Agg{Mode: ppo.Seq, Horizon: cols}}
			ops = append(ops, backendtest.Op{Name: fmt.Sprintf("KLLoss/%v/acc=%v", kind, opts.Accumulate), RTol: 1e-6, ATol: 1e-6, Libm: kind == divergence.LowVarKL, Run: func(t *testing.T, be tensor.Backend) [][]float32 {
				g := backendtest.Upload(t, be, gradInit, rows, cols)
				res, err := ppo.KLLoss(withDst(opts, g), backendtest.Upload(t, be, lp, rows, cols), backendtest.Upload(t, be, ref, rows, cols), backendtest.Upload(t, be, m, rows, cols), cfg)
				if err != nil {
					t.Fatal(err)
				}
				return [][]float32{backendtest.Host(t, g), {res.Loss, res.KL}}
			}})
		}
	}
	for _, opts := range gradVariants {
		cfg := ppo.EntropyConfig{Coef: 0.01}
		ops = append(ops, backendtest.Op{Name: fmt.Sprintf("EntropyPenalty/acc=%v", opts.Accumulate), RTol: 1e-6, ATol: 1e-12, Run: func(t *testing.T, be tensor.Backend) [][]float32 {
			g := backendtest.Upload(t, be, gradInit, rows, cols)
			logp, mask := backendtest.Upload(t, be, lp, rows, cols), backendtest.Upload(t, be, m, rows, cols)
			loss, err := ppo.EntropyPenalty(withDst(opts, g), logp, mask, cfg)
			if err != nil {
				t.Fatal(err)
			}
			fwd, err := ppo.EntropyPenalty(withDst(opts, nil), logp, mask, cfg)
			if err != nil {
				t.Fatal(err)
			}
			return [][]float32{backendtest.Host(t, g), {loss, fwd}}
		}})
	}
	return ops
}

// gradVariants are the gradient options every loss is checked with: plain, and scaled into a
// non-zero destination.
var gradVariants = []ppo.Grad{{}, {Scale: 0.5, Accumulate: true}}

// withDst returns opts writing into dst (nil: the loss only).
func withDst(opts ppo.Grad, dst *tensor.Tensor) ppo.Grad {
	opts.Dst = dst
	return opts
}
