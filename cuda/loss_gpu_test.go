//go:build cuda

package cuda_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
)

// TestGroupOfOne checks that the device group kernel rejects a group of one as the CPU does.
func TestGroupOfOne(t *testing.T) {
	b := device(t)
	rw := up(t, b, []float32{1, 2, 3, 4, 5, 6}, 3, 2)
	m := up(t, b, []float32{1, 1, 1, 1, 1, 1}, 3, 2)
	a := tensor.Must(tensor.New(b, tensor.Float32, 3, 2))
	err := advantage.Compute(a, advantage.Inputs{Rewards: rw, ResponseMask: m, Index: upI(t, b, []int32{5, 5, 9}, 3)}, advantage.Config{Estimator: advantage.EstimatorGRPO})
	if err == nil {
		t.Fatal("GRPO with a group of one succeeded")
	}
	if e, ok := err.(*tensor.Error); !ok || e.Arg != "Inputs.Index" || e.Op != "advantage.Compute" {
		t.Fatalf("error %v does not name advantage.Compute and Inputs.Index", err)
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
		for _, lt := range []ppo.LossType{ppo.Vanilla, ppo.GSPO, ppo.SAPO} {
			cfg := ppo.DefaultPolicyConfig(lt)
			bench("PolicyLoss/"+lt.String(), 24*n, func() error { _, err := ppo.PolicyLoss(ppo.Grad{Dst: dst}, in, cfg); return err })
		}
		bench("ValueLoss", 24*n, func() error {
			_, err := ppo.ValueLoss(ppo.Grad{Dst: dst}, ppo.ValueInputs{VPreds: lp, Returns: old, Values: adv, ResponseMask: m}, ppo.ValueConfig{ClipRange: 0.5})
			return err
		})
		bench("Agg.LossGrad", 16*n, func() error { _, err := ppo.Agg{Mode: ppo.Seq}.LossGrad(dst, adv, m); return err })
		bench("GAE", 32*n, func() error {
			return advantage.ComputeWithReturns(dst, ret, advantage.Inputs{Rewards: adv, Values: old, ResponseMask: m}, advantage.Config{Estimator: advantage.EstimatorGAE, Gamma: 0.99, Lambda: 0.95})
		})
		bench("ReinforcePlusPlus", 28*n, func() error {
			return advantage.ComputeWithReturns(dst, ret, advantage.Inputs{Rewards: adv, ResponseMask: m}, advantage.Config{Estimator: advantage.EstimatorReinforcePlusPlus, Gamma: 0.99})
		})
		bench("SelectTopP", 12*n, func() error {
			_, err := tprl.EntropyMask(dst, adv, m, 0.2)
			return err
		})
		bench("GRPO", 16*n, func() error {
			return advantage.ComputeWithReturns(dst, ret, advantage.Inputs{Rewards: adv, ResponseMask: m, Index: index}, advantage.Config{Estimator: advantage.EstimatorGRPO})
		})
	}
}
