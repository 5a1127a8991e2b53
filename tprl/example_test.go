package tprl_test

import (
	"fmt"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
)

func ExampleEntropyMask() {
	// Two responses of 4 tokens; the second has one padded token.
	entropy := tensor.Must(tensor.FromFloat32([]float32{
		0.2, 1.5, 0.7, 0.9,
		2.0, 0.1, 0.4, 9.9,
	}, 2, 4))
	mask := tensor.Must(tensor.FromFloat32([]float32{
		1, 1, 1, 1,
		1, 1, 1, 0,
	}, 2, 4))
	dst := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 2, 4))
	stats, err := tprl.EntropyMask(dst, entropy, mask, 0.5) // ceil(4*0.5) = 2, ceil(3*0.5) = 2
	if err != nil {
		panic(err)
	}
	sel, _ := dst.Float32s()
	fmt.Println(sel[:4], sel[4:], stats.Selected)
	fmt.Printf("fraction %.3f threshold %.2f\n", stats.TokenFraction(), stats.Threshold)
	// Output:
	// [0 1 0 1] [1 0 1 0] 4
	// fraction 0.571 threshold 0.65
}

func ExamplePerceptionMask() {
	// Token 1 of the response changes most when the image is perturbed.
	old := tensor.Must(tensor.FromFloat32([]float32{-1.0, -0.5, -2.0, -0.1}, 1, 4))
	aug := tensor.Must(tensor.FromFloat32([]float32{-1.1, -3.0, -2.0, -0.2}, 1, 4))
	mask := tensor.Must(tensor.FromFloat32([]float32{1, 1, 1, 1}, 1, 4))
	score := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 1, 4))
	dst := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 1, 4))
	if err := divergence.PerceptionScore(score, old, aug); err != nil { // once per mini-batch
		panic(err)
	}
	if _, err := tprl.PerceptionMask(dst, score, mask, 0.25); err != nil {
		panic(err)
	}
	s, _ := score.Float32s()
	sel, _ := dst.Float32s()
	fmt.Printf("score %.4f\nmask  %v\n", s, sel)
	// Output:
	// score [0.0048 1.5821 0.0000 0.0048]
	// mask  [0 1 0 0]
}

func ExampleShapeBatch() {
	// Four responses whose mean perception scores are 0, 1, 2 and 3.
	perception := tensor.Must(tensor.FromFloat32([]float32{0, 0, 1, 1, 2, 2, 3, 3}, 4, 2))
	mask := tensor.Must(tensor.FromFloat32([]float32{1, 1, 1, 1, 1, 1, 1, 1}, 4, 2))
	adv := tensor.Must(tensor.FromFloat32([]float32{1, 1, 1, 1, -1, -1, -1, -1}, 4, 2))
	shaped := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 4, 2))
	factors := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 4))
	// Default GlobalScope: statistics over the whole mini-batch, whatever the micro-batches.
	micro, err := tprl.ShapeBatch(tprl.ShapingOutputs{Advantages: shaped, Factors: factors}, tprl.ShapingInputs{Advantages: adv, PerceptionScore: perception, ResponseMask: mask}, tprl.ShapingOptions{ScalingMin: 0.8, MicroBatchSize: 2})
	if err != nil {
		panic(err)
	}
	f, _ := factors.Float32s()
	fmt.Printf("factors %.4f target_max %.1f\n", f, micro[0].TargetMax)
	// The reference's scope: mu per micro-batch.
	if _, err := tprl.ShapeBatch(tprl.ShapingOutputs{Advantages: shaped, Factors: factors}, tprl.ShapingInputs{Advantages: adv, PerceptionScore: perception, ResponseMask: mask}, tprl.ShapingOptions{ScalingMin: 0.8, MicroBatchSize: 2, Scope: tprl.PerMicroBatchScope}); err != nil {
		panic(err)
	}
	fmt.Printf("factors %.4f\n", f)
	// Output:
	// factors [0.8000 0.9333 1.0667 1.2000] target_max 1.2
	// factors [0.8000 1.2000 0.9600 1.0400]
}

func ExampleShapingStats() {
	// Two devices compute their statistics and all-reduce them (here: Merge).
	devA := tprl.ShapingStats{Count: 2, Min: 0.5, Max: 1.0, Sum: 1.5}
	devB := tprl.ShapingStats{Count: 1, Min: 2.0, Max: 2.0, Sum: 2.0}
	all := devA.Merge(devB)
	fmt.Println(all.Count, all.Min, all.Max, all.Applies())
	fmt.Printf("mu %.4f\n", all.MeanNorm())
	// Output:
	// 3 0.5 2 true
	// mu 0.4444
}

func ExampleConfig_Apply() {
	cfg := tprl.DefaultConfig()
	cfg.EnablePerceptionFiltering = true
	cfg.TopPPerceptionTokens = 0.5
	cfg.EnableTrajectoryReweighting = true
	res, err := cfg.Apply(tprl.Batch{
		ResponseMask: tensor.Must(tensor.FromFloat32([]float32{1, 1, 1, 1, 1, 1}, 2, 3)),
		OldLogProbs:  tensor.Must(tensor.FromFloat32([]float32{-1, -1, -1, -1, -1, -1}, 2, 3)),
		AugLogProbs:  tensor.Must(tensor.FromFloat32([]float32{-1, -2, -1, -1, -1.5, -1.2}, 2, 3)),
		Advantages:   tensor.Must(tensor.FromFloat32([]float32{1, 1, 1, 1, 1, 1}, 2, 3)),
	})
	if err != nil {
		panic(err)
	}
	ltm, _ := res.LossTokenMask.Float32s()
	adv, _ := res.Advantages.Float32s()
	fmt.Println(ltm)
	fmt.Printf("%.2f\n", adv)
	fmt.Printf("%.3f\n", res.Metrics["actor/perception_token_fraction"])
	// Row 0's scores are 0, >0, 0 and it keeps 2 tokens: the second and one of the tied zeros,
	// drawn from Batch.Random (TiesToLowerIndex would take the first).
	// Output:
	// [0 1 1 0 1 1]
	// [1.20 1.20 1.20 0.80 0.80 0.80]
	// [0.667]
}

// One mini-batch of 4 responses × 3 tokens updated in two micro-batches of 2 rows: Prepare takes
// the perception score and the token count once, each MicroBatch gets the current policy's
// log-probs of its rows and writes d loss / d log-probs (policy loss on the perception-selected
// tokens plus the low_var_kl loss to the reference), scaled so the two halves add up to the
// whole mini-batch's gradient.
func ExampleUpdateConfig_Prepare() {
	f32 := func(v ...float32) *tensor.Tensor { return tensor.Must(tensor.FromFloat32(v, 4, 3)) }
	mb := tprl.MiniBatch{
		ResponseMask: f32(1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 0),
		OldLogProbs:  f32(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
		AugLogProbs:  f32(-1, -2, -1, -1.5, -1, -1, -1, -1, -3, -1.2, -1, -1),
		RefLogProbs:  f32(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
		Advantages:   f32(1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1),
	}
	tokens := tprl.DefaultConfig()
	tokens.EnablePerceptionFiltering = true
	tokens.TopPPerceptionTokens = 0.5
	cfg := tprl.UpdateConfig{
		Tokens: tokens,
		Policy: ppo.DefaultPolicyConfig(ppo.Vanilla),
		KLLoss: &ppo.KLConfig{Kind: divergence.LowVarKL, Coef: 0.1},
	}
	upd, err := cfg.Prepare(mb)
	if err != nil {
		panic(err)
	}
	defer upd.Release()

	logp := f32(-0.9, -1, -1, -1, -1.1, -1, -1, -1, -1.2, -1, -1, -1) // the policy after a few steps
	grad := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 4, 3))
	for lo := 0; lo < 4; lo += 2 {
		g := tensor.Must(grad.Rows(lo, lo+2))
		rows := tprl.MicroInputs{LogProbs: tensor.Must(logp.Rows(lo, lo+2))}
		res, err := upd.MicroBatch(g, rows, lo, lo+2)
		if err != nil {
			panic(err)
		}
		mask, _ := res.LossTokenMask.Float32s()
		fmt.Printf("rows %d-%d: token mask %v, loss %.4f\n", lo, lo+2, mask, res.Loss)
		res.Release()
	}
	g, _ := grad.Float32s()
	fmt.Printf("d loss / d logp: %.4f\n", g)
	// Output:
	// rows 0-2: token mask [0 1 1 1 0 0], loss -0.3332
	// rows 2-4: token mask [0 1 1 1 0 0], loss 0.3134
	// d loss / d logp: [0.0011 -0.1111 -0.1111 -0.1111 -0.0012 0.0000 0.0000 0.1111 0.0885 0.1111 0.0000 0.0000]
}

func ExampleRandomMask() {
	// The control of the perception mask: per row as many tokens as PerceptionMask keeps for
	// the same p (ceil(5*0.4) = 2, ceil(3*0.4) = 2), chosen at random among the valid ones.
	mask := tensor.Must(tensor.FromFloat32([]float32{
		1, 1, 1, 1, 1,
		1, 1, 1, 0, 0,
	}, 2, 5))
	dst := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 2, 5))
	key := tprl.RandomKey{Seed: 1, Step: 0, FirstRow: 0} // row i draws from (seed, step, FirstRow+i)
	stats, err := tprl.RandomMask(dst, mask, 0.4, key)
	if err != nil {
		panic(err)
	}
	sel, _ := dst.Float32s()
	var kept [2]float32
	for i, v := range sel {
		kept[i/5] += v
	}
	fmt.Println("kept per row", kept, "padding kept", sel[8]+sel[9])
	fmt.Println(stats.Metrics())
	// Output:
	// kept per row [2 2] padding kept 0
	// map[actor/random_token_fraction:0.5]
}
