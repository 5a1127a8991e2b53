package mtrl_test

import (
	"fmt"
	"math"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
)

// Example is the README's usage example: one VPPO step on a tiny batch of 4 responses
// (2 prompts x 2 samples), 6 tokens, a vocabulary of 5.
func Example() {
	const B, T, V = 4, 6, 5
	logits, augLogits := make([]float32, B*T*V), make([]float32, B*T*V)
	tokens, mask, rewards := make([]int32, B*T), make([]float32, B*T), make([]float32, B*T)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)))
		augLogits[i] = logits[i] * float32(1+0.5*math.Cos(float64(i/V))) // the perturbed image
	}
	for i := range tokens {
		tokens[i] = int32(i % V)
		if i%T < 4+i/T%2 { // responses of 4 or 5 tokens
			mask[i] = 1
		}
	}
	rewards[3], rewards[2*T+4] = 1, 1 // one correct response per prompt
	f32 := func(d []float32, s ...int) *tensor.Tensor { return tensor.Must(tensor.FromFloat32(d, s...)) }
	zeros := func(s ...int) *tensor.Tensor { return tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, s...)) }
	ids, m := tensor.Must(tensor.FromInt32(tokens, B, T)), f32(mask, B, T)

	// Log-probs of the sampled tokens with the original and the perturbed image.
	oldLogp, augLogp := zeros(B, T), zeros(B, T)
	must(tensor.LogProbs(oldLogp, f32(logits, B, T, V), ids, 1))
	must(tensor.LogProbs(augLogp, f32(augLogits, B, T, V), ids, 1))

	// GRPO advantages within each prompt's group.
	adv := zeros(B, T)
	groups := tensor.Must(tensor.FromInt32([]int32{0, 0, 1, 1}, B))
	must(advantage.Compute(adv, advantage.Inputs{Rewards: f32(rewards, B, T), ResponseMask: m, Index: groups},
		advantage.DefaultConfig()))

	// Train on the 40% most image-dependent tokens, advantages rescaled per response.
	cfg := tprl.UpdateConfig{
		Tokens: tprl.Config{EnablePerceptionFiltering: true, TopPPerceptionTokens: 0.4,
			EnableTrajectoryReweighting: true, TrajectoryScalingMin: 0.8},
		Policy: ppo.DefaultPolicyConfig(ppo.Vanilla),
	}
	upd, err := cfg.Prepare(tprl.MiniBatch{ResponseMask: m, OldLogProbs: oldLogp, AugLogProbs: augLogp, Advantages: adv})
	must(err)
	defer upd.Release()
	grad := zeros(B, T) // d loss / d log-probs; the policy's backward takes it from here
	res, err := upd.MicroBatch(grad, tprl.MicroInputs{LogProbs: oldLogp}, 0, B)
	must(err)

	sel, _ := tensor.MaskedMean(res.LossTokenMask, m)
	fmt.Printf("tokens trained on: %.0f%%, loss %.4f\n", 100*sel, res.Loss)
	fmt.Printf("advantage of response 0: %.3f -> shaped %.3f\n", at(adv, 0), at(res.Advantages, 0))
	// Output:
	// tokens trained on: 44%, loss 0.0381
	// advantage of response 0: 0.707 -> shaped 0.566
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func at(t *tensor.Tensor, i int) float32 { v, _ := t.Float32s(); return v[i] }
