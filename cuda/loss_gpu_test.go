//go:build cuda

package cuda_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
)

// lossOps are the masked statistics, PPO losses, advantage estimators and patch blackening on
// random inputs (fixed seeds); TestCrossCheck runs them beside crossOps. Their tolerance is 0:
// the device kernels reproduce the pure-Go kernels bit for bit (the same float32 operations in
// the same order with -fmad=false, hostops' exp ported, float64 sums rounded to float32 at the
// same points; a float64 sum in another order could only differ in the float32 result if it
// fell within 1e-16 of a rounding boundary, and these inputs are fixed).
func lossOps(rows, cols int) []op {
	r := rand.New(rand.NewPCG(uint64(rows)+100, uint64(cols)))
	n := rows * cols
	lp, old := randn(r, n, 1), randn(r, n, 1)
	for i := range lp {
		lp[i] = -float32(math.Abs(float64(lp[i])))
		old[i] = lp[i] + float32(r.NormFloat64()*0.3)
	}
	adv, vals, rets, ltm := randn(r, n, 1), randn(r, n, 1), randn(r, n, 1), mask01(r, n, 0.3)
	m := mask01(r, n, 0.8)
	for i := 0; i < rows; i += 7 { // right padding, and an empty row now and then
		for t := cols - cols/(1+i%3); t < cols; t++ {
			m[i*cols+t] = 0
		}
	}
	rewards := make([]float32, n)
	for i := range rows {
		rewards[i*cols+r.IntN(cols)] = float32(r.IntN(3))
	}
	baselines := randn(r, rows, 1)
	ids := make([]int32, rows)
	for i := range ids {
		ids[i] = int32((i * 7919) % max(1, rows/2)) // groups of two or more, not contiguous
	}
	if rows%2 == 1 && rows > 2 {
		ids[rows-1] = ids[0]
	}
	gradInit := randn(r, n, 0.01)
	scalars := func(xs ...float64) []float32 {
		out := make([]float32, len(xs))
		for i, x := range xs {
			out[i] = float32(x)
		}
		return out
	}

	var ops []op
	ops = append(ops,
		op{"MaskedMeanRows", 0, 0, func(t *testing.T, be tensor.Backend) [][]float32 {
			d := tensor.Must(tensor.New(be, tensor.Float32, rows))
			if err := tensor.MaskedMeanRows(d, up(t, be, lp, rows, cols), up(t, be, m, rows, cols)); err != nil {
				t.Fatal(err)
			}
			return [][]float32{host(t, d)}
		}},
		op{"MaskedVar", 0, 0, func(t *testing.T, be tensor.Backend) [][]float32 {
			v1, err := tensor.MaskedVar(up(t, be, lp, rows, cols), up(t, be, m, rows, cols), true)
			if err != nil {
				t.Fatal(err)
			}
			v0, err := tensor.MaskedVar(up(t, be, lp, rows, cols), up(t, be, m, rows, cols), false)
			if err != nil {
				t.Fatal(err)
			}
			return [][]float32{{v1, v0}}
		}},
		op{"MaskedWhiten", 0, 0, func(t *testing.T, be tensor.Backend) [][]float32 {
			d := tensor.Must(tensor.New(be, tensor.Float32, rows, cols))
			if err := tensor.MaskedWhiten(d, up(t, be, lp, rows, cols), up(t, be, m, rows, cols)); err != nil {
				t.Fatal(err)
			}
			return [][]float32{host(t, d)}
		}},
	)
	for _, mode := range []ppo.AggMode{ppo.Token, ppo.Seq, ppo.SeqMeanTokenSum, ppo.SeqMeanTokenSumNorm} {
		agg := ppo.Agg{Mode: mode, Horizon: cols}
		ops = append(ops, op{"AverageLoss/" + mode.String(), 0, 0, func(t *testing.T, be tensor.Backend) [][]float32 {
			g := tensor.Must(tensor.New(be, tensor.Float32, rows, cols))
			loss, err := agg.LossGrad(g, up(t, be, adv, rows, cols), up(t, be, m, rows, cols))
			if err != nil {
				t.Fatal(err)
			}
			return [][]float32{{loss}, host(t, g)}
		}})
		for _, lt := range []ppo.LossType{ppo.Default, ppo.GSPO, ppo.GSPOToken, ppo.CISPO, ppo.SAPO} {
			for _, v := range []struct {
				name   string
				tokens bool
				opts   ppo.GradOptions
			}{{"plain", false, ppo.GradOptions{}}, {"tokenmask+scale+acc", true, ppo.GradOptions{Scale: 0.25, Accumulate: true}}} {
				if rows > 64 && mode != ppo.Token && v.name != "plain" {
					continue // the variants are covered at the smaller sizes
				}
				cfg := ppo.PolicyConfig{LossType: lt, Agg: agg, GradOptions: v.opts}
				ops = append(ops, op{fmt.Sprintf("PolicyLoss/%v/%v/%s", lt, mode, v.name), 0, 0, func(t *testing.T, be tensor.Backend) [][]float32 {
					g := up(t, be, gradInit, rows, cols)
					in := ppo.PolicyInputs{
						OldLogProbs: up(t, be, old, rows, cols), LogProbs: up(t, be, lp, rows, cols),
						Advantages: up(t, be, adv, rows, cols), ResponseMask: up(t, be, m, rows, cols),
					}
					if v.tokens {
						in.TokenMask = up(t, be, ltm, rows, cols)
					}
					res, err := ppo.PolicyLoss(g, in, cfg)
					if err != nil {
						t.Fatal(err)
					}
					fwd, err := ppo.PolicyLoss(nil, in, cfg)
					if err != nil {
						t.Fatal(err)
					}
					if fwd != res {
						t.Errorf("forward-only %+v, with gradient %+v", fwd, res)
					}
					return [][]float32{host(t, g), scalars(float64(res.Loss), float64(res.PGLoss), res.PPOKL, res.EntropyLoss, res.ClipFracHigher, res.ClipFracLower)}
				}})
			}
		}
		for _, opts := range []ppo.GradOptions{{}, {Scale: 0.5, Accumulate: true}} {
			cfg := ppo.ValueConfig{ClipRange: 0.5, Agg: agg, GradOptions: opts}
			ops = append(ops, op{fmt.Sprintf("ValueLoss/%v/acc=%v", mode, opts.Accumulate), 0, 0, func(t *testing.T, be tensor.Backend) [][]float32 {
				g := up(t, be, gradInit, rows, cols)
				res, err := ppo.ValueLoss(g, ppo.ValueInputs{
					VPreds: up(t, be, adv, rows, cols), Returns: up(t, be, rets, rows, cols),
					Values: up(t, be, vals, rows, cols), ResponseMask: up(t, be, m, rows, cols),
				}, cfg)
				if err != nil {
					t.Fatal(err)
				}
				return [][]float32{host(t, g), scalars(float64(res.Loss), float64(res.VFLoss), res.VFClipFrac, res.VPredMean)}
			}})
		}
	}
	advOp := func(name string, rtol, atol float64, f func(adv, ret, rw, mk *tensor.Tensor, be tensor.Backend, t *testing.T) error) op {
		return op{name, rtol, atol, func(t *testing.T, be tensor.Backend) [][]float32 {
			a := tensor.Must(tensor.New(be, tensor.Float32, rows, cols))
			ret := tensor.Must(tensor.New(be, tensor.Float32, rows, cols))
			if err := f(a, ret, up(t, be, rewards, rows, cols), up(t, be, m, rows, cols), be, t); err != nil {
				t.Fatal(err)
			}
			return [][]float32{host(t, a), host(t, ret)}
		}}
	}
	dense := randn(r, n, 1) // dense rewards for the token-level estimators
	ops = append(ops,
		advOp("GAE", 0, 0, func(a, ret, _, mk *tensor.Tensor, be tensor.Backend, t *testing.T) error {
			return advantage.GAE(a, ret, up(t, be, dense, rows, cols), up(t, be, vals, rows, cols), mk, 0.99, 0.95)
		}),
		advOp("ReinforcePlusPlus", 0, 0, func(a, ret, _, mk *tensor.Tensor, be tensor.Backend, t *testing.T) error {
			return advantage.ReinforcePlusPlus(a, ret, up(t, be, dense, rows, cols), mk, 0.99)
		}),
		advOp("ReMax", 0, 0, func(a, ret, rw, mk *tensor.Tensor, be tensor.Backend, t *testing.T) error {
			return advantage.ReMax(a, ret, rw, mk, up(t, be, baselines, rows))
		}),
	)
	if rows >= 2 {
		ops = append(ops,
			advOp("GRPO", 0, 0, func(a, ret, rw, mk *tensor.Tensor, be tensor.Backend, t *testing.T) error {
				return advantage.GRPO(a, ret, rw, mk, upI(t, be, ids, rows), advantage.GRPOOptions{})
			}),
			advOp("GRPOPassK", 0, 0, func(a, ret, rw, mk *tensor.Tensor, be tensor.Backend, t *testing.T) error {
				return advantage.GRPOPassK(a, ret, rw, mk, upI(t, be, ids, rows), advantage.GRPOOptions{})
			}),
			advOp("RLOO", 0, 0, func(a, ret, rw, mk *tensor.Tensor, be tensor.Backend, t *testing.T) error {
				return advantage.RLOO(a, ret, rw, mk, upI(t, be, ids, rows))
			}),
		)
	}
	sc := randn(r, n, 1)
	for i := 0; i < n; i += 53 { // ties and NaN for the selection
		sc[i] = 0.25
	}
	sc[n/2] = float32(math.NaN())
	ops = append(ops, op{"SelectTopP", 0, 0, func(t *testing.T, be tensor.Backend) [][]float32 {
		d := tensor.Must(tensor.New(be, tensor.Float32, rows, cols))
		k := tensor.Must(tensor.New(be, tensor.Int32, rows))
		st, err := tprl.SelectTopP(d, k, up(t, be, sc, rows, cols), up(t, be, m, rows, cols), 0.3, tprl.EntropyFilter)
		if err != nil {
			t.Fatal(err)
		}
		return [][]float32{host(t, d), host(t, k), {float32(st.Valid), float32(st.Selected), st.Threshold, st.SelectedMean, st.RejectedMean}}
	}})
	// Patch blackening: a batch of rows/16+1 RGB images of about cols/4 pixels a side.
	imgs, side := rows/16+1, cols/4+5
	pix := make([]uint8, imgs*side*side*3)
	for i := range pix {
		pix[i] = uint8(r.IntN(256))
	}
	sampleIDs := make([]uint64, imgs)
	for i := range sampleIDs {
		sampleIDs[i] = uint64(i * 31)
	}
	ops = append(ops, op{"PatchBlackening", 0, 0, func(t *testing.T, be tensor.Backend) [][]float32 {
		src, err := tensor.To(be, tensor.Must(tensor.FromUint8(pix, imgs, side, side, 3)))
		if err != nil {
			t.Fatal(err)
		}
		dst := tensor.Must(tensor.NewLike(src, tensor.Uint8))
		if err := perturb.DefaultBlackening().ApplyBatch(dst, src, 42, sampleIDs); err != nil {
			t.Fatal(err)
		}
		h, err := tensor.To(tensor.CPU(), dst)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := h.Uint8s()
		out := make([]float32, len(b))
		for i, x := range b {
			out[i] = float32(x)
		}
		return [][]float32{out}
	}})
	return ops
}

// TestGroupOfOne checks that the device group kernel rejects a group of one as the CPU does.
func TestGroupOfOne(t *testing.T) {
	b := device(t)
	rw := up(t, b, []float32{1, 2, 3, 4, 5, 6}, 3, 2)
	m := up(t, b, []float32{1, 1, 1, 1, 1, 1}, 3, 2)
	a := tensor.Must(tensor.New(b, tensor.Float32, 3, 2))
	err := advantage.GRPO(a, nil, rw, m, upI(t, b, []int32{5, 5, 9}, 3), advantage.GRPOOptions{})
	if err == nil {
		t.Fatal("GRPO with a group of one succeeded")
	}
	if e, ok := err.(*tensor.Error); !ok || e.Arg != "index" || e.Op != "advantage.GRPO" {
		t.Fatalf("error %v does not name advantage.GRPO and index", err)
	}
}

// BenchmarkLossOps times the per-token loss, statistics and advantage ops on [512, 2048] and on
// 4M tokens.
func BenchmarkLossOps(b *testing.B) {
	be := device(b)
	b.Logf("device %s", be.Name())
	for _, s := range tokenShapes {
		rows, cols := s[0], s[1]
		n := rows * cols
		r := rand.New(rand.NewPCG(3, 4))
		lp, old, adv := up(b, be, randn(r, n, 1), rows, cols), up(b, be, randn(r, n, 1), rows, cols), up(b, be, randn(r, n, 1), rows, cols)
		m := up(b, be, mask01(r, n, 0.8), rows, cols)
		ids := make([]int32, rows)
		for i := range ids {
			ids[i] = int32(i / 8)
		}
		index := upI(b, be, ids, rows)
		dst := tensor.Must(tensor.New(be, tensor.Float32, rows, cols))
		ret := tensor.Must(tensor.New(be, tensor.Float32, rows, cols))
		rowsOut := tensor.Must(tensor.New(be, tensor.Float32, rows))
		in := ppo.PolicyInputs{OldLogProbs: old, LogProbs: lp, Advantages: adv, ResponseMask: m}
		bench := func(name string, bytes int, f func() error) {
			b.Run(fmt.Sprintf("%s/%s/shape=%dx%d", name, be.Name(), rows, cols), func(b *testing.B) {
				b.SetBytes(int64(bytes))
				for b.Loop() {
					if err := f(); err != nil {
						b.Fatal(err)
					}
					if err := be.Sync(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
		bench("MaskedMeanRows", 8*n, func() error { return tensor.MaskedMeanRows(rowsOut, lp, m) })
		bench("MaskedVar", 16*n, func() error { _, err := tensor.MaskedVar(lp, m, true); return err })
		for _, lt := range []ppo.LossType{ppo.Default, ppo.GSPO, ppo.SAPO} {
			cfg := ppo.PolicyConfig{LossType: lt}
			bench("PolicyLoss/"+lt.String(), 24*n, func() error { _, err := ppo.PolicyLoss(dst, in, cfg); return err })
		}
		bench("ValueLoss", 24*n, func() error {
			_, err := ppo.ValueLoss(dst, ppo.ValueInputs{VPreds: lp, Returns: old, Values: adv, ResponseMask: m}, ppo.ValueConfig{ClipRange: 0.5})
			return err
		})
		bench("AverageLossGrad", 16*n, func() error { _, err := ppo.AverageLossGrad(dst, adv, m, ppo.Seq); return err })
		bench("GAE", 32*n, func() error { return advantage.GAE(dst, ret, adv, old, m, 0.99, 0.95) })
		bench("ReinforcePlusPlus", 28*n, func() error { return advantage.ReinforcePlusPlus(dst, ret, adv, m, 0.99) })
		bench("SelectTopP", 12*n, func() error {
			_, err := tprl.SelectTopP(dst, nil, adv, m, 0.2, tprl.EntropyFilter)
			return err
		})
		bench("GRPO", 16*n, func() error { return advantage.GRPO(dst, ret, adv, m, index, advantage.GRPOOptions{}) })
	}
}
