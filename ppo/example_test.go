package ppo_test

import (
	"fmt"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
)

func ExamplePolicyLoss() {
	// Two responses of three tokens; the second has one padding token.
	old := tensor.Must(tensor.FromFloat32([]float32{-1, -1, -1, -2, -2, -2}, 2, 3))
	lp := tensor.Must(tensor.FromFloat32([]float32{-0.5, -1, -1.5, -2, -1.9, -2}, 2, 3))
	adv := tensor.Must(tensor.FromFloat32([]float32{1, 1, 1, -1, -1, -1}, 2, 3))
	mask := tensor.Must(tensor.FromFloat32([]float32{1, 1, 1, 1, 1, 0}, 2, 3))
	grad := tensor.Must(tensor.NewLike(lp, tensor.Float32))

	res, err := ppo.PolicyLoss(ppo.Grad{Dst: grad}, ppo.PolicyInputs{OldLogProbs: old, LogProbs: lp, Advantages: adv, ResponseMask: mask},
		ppo.PolicyConfig{ClipLow: 0.2, ClipHigh: 0.28, ClipDual: 3, TauPos: 1, TauNeg: 1})
	if err != nil {
		panic(err)
	}
	g, _ := grad.Float32s()
	fmt.Printf("pg_loss %.4f\n", res.PGLoss)
	fmt.Printf("grad %.4f\n", g)
	fmt.Printf("clipfrac_higher %.2f ppo_kl %.2f\n", res.ClipFracHigher, res.PPOKL)
	// Output:
	// pg_loss -0.1563
	// grad [-0.0000 -0.2000 -0.1213 0.2000 0.2210 0.0000]
	// clipfrac_higher 0.20 ppo_kl -0.02
}

func ExampleValueLoss() {
	vpreds := tensor.Must(tensor.FromFloat32([]float32{1.0, 0.5, 2.0}, 1, 3))
	returns := tensor.Must(tensor.FromFloat32([]float32{0.5, 0.5, 0.5}, 1, 3))
	values := tensor.Must(tensor.FromFloat32([]float32{0.9, 1.5, 0.9}, 1, 3))
	mask := tensor.Must(tensor.FromFloat32([]float32{1, 1, 1}, 1, 3))
	grad := tensor.Must(tensor.NewLike(vpreds, tensor.Float32))
	res, err := ppo.ValueLoss(ppo.Grad{Dst: grad}, ppo.ValueInputs{VPreds: vpreds, Returns: returns, Values: values, ResponseMask: mask},
		ppo.ValueConfig{ClipRange: 0.5})
	if err != nil {
		panic(err)
	}
	g, _ := grad.Float32s()
	fmt.Printf("vf_loss %.4f clipfrac %.3f grad %.4f\n", res.VFLoss, res.VFClipFrac, g)
	// Output:
	// vf_loss 0.4583 clipfrac 0.333 grad [0.1667 0.0000 0.5000]
}

func ExampleAgg_Loss() {
	v := tensor.Must(tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3))
	m := tensor.Must(tensor.FromFloat32([]float32{1, 1, 0, 1, 0, 0}, 2, 3))
	for _, mode := range []ppo.AggMode{ppo.Token, ppo.Seq, ppo.SeqMeanTokenSum} {
		l, _ := ppo.Agg{Mode: mode}.Loss(v, m)
		fmt.Printf("%s %.4f\n", mode, l)
	}
	l, _ := ppo.Agg{Mode: ppo.SeqMeanTokenSumNorm, Horizon: 4}.Loss(v, m)
	fmt.Printf("%s %.4f\n", ppo.SeqMeanTokenSumNorm, l)
	// Output:
	// token 2.3333
	// seq 2.7500
	// seq-mean-token-sum 3.5000
	// seq-mean-token-sum-norm 1.7500
}

// A micro-batch step: policy loss, KL loss and entropy penalty share one gradient buffer, all
// scaled by the global token factor.
func ExampleTokenScale() {
	old := tensor.Must(tensor.FromFloat32([]float32{-1, -1, -1, -1}, 1, 4))
	lp := tensor.Must(tensor.FromFloat32([]float32{-0.9, -1.1, -1, -1}, 1, 4))
	ref := tensor.Must(tensor.FromFloat32([]float32{-1, -1, -1, -1.2}, 1, 4))
	adv := tensor.Must(tensor.FromFloat32([]float32{0.5, 0.5, 0.5, 0.5}, 1, 4))
	mask := tensor.Must(tensor.FromFloat32([]float32{1, 1, 1, 0}, 1, 4))
	grad := tensor.Must(tensor.NewLike(lp, tensor.Float32)) // zeroed

	// This micro-batch holds 3 of the mini-batch's 12 tokens, on one of two ranks.
	s, _ := ppo.TokenScale(mask, 12, 2)
	g := ppo.Grad{Dst: grad, Scale: s, Accumulate: true}
	pcfg := ppo.DefaultPolicyConfig(ppo.Vanilla)
	pg, _ := ppo.PolicyLoss(g, ppo.PolicyInputs{OldLogProbs: old, LogProbs: lp, Advantages: adv, ResponseMask: mask}, pcfg)
	kl, _ := ppo.KLLoss(g, lp, ref, mask, ppo.KLConfig{Kind: divergence.LowVarKL, Coef: 0.01})
	ent, _ := ppo.EntropyPenalty(g, lp, mask, ppo.EntropyConfig{Coef: 0.001})
	gv, _ := grad.Float32s()
	fmt.Printf("scale %.2f pg_loss %.4f loss %.5f\n", s, pg.PGLoss, pg.Loss+kl.Loss+ent)
	fmt.Printf("grad %.5f\n", gv)
	// Output:
	// scale 0.50 pg_loss -0.5017 loss -0.25032
	// grad [-0.09211 -0.07575 -0.08350 0.00000]
}
