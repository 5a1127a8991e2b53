// Command quickstart runs one token-perception (VPPO) policy-gradient step on generated tensors
// and prints what each stage did. No model is involved: the "policy" is a set of random logits,
// and the image dependence of each token is simulated, so the numbers show the mechanics of
// the SDK, not a trained model.
//
//	go run ./examples/quickstart
package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"text/tabwriter"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
)

const (
	prompts = 2
	samples = 4 // responses per prompt (a GRPO group)
	B       = prompts * samples
	T       = 16 // response tokens
	V       = 64 // vocabulary
	seed    = 7
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run() error {
	r := rand.New(rand.NewPCG(seed, 0))
	cpu := tensor.CPU()
	newF32 := func(shape ...int) *tensor.Tensor { return tensor.Must(tensor.New(cpu, tensor.Float32, shape...)) }

	// 1. Perturb the image: blacken random 14-px patches, seeded by (seed, sample id).
	img := tensor.Must(tensor.FromUint8(randomImage(r, 56, 56), 56, 56, 3))
	blackened := tensor.Must(tensor.NewLike(img, tensor.Uint8))
	if err := perturb.DefaultBlackening().Apply(blackened, img, seed, 0); err != nil {
		return err
	}
	fmt.Printf("1. perturb: %d of 16 patches (14 px) of a 56x56 image blackened\n", blackPatches(blackened))

	// 2. Rollout stand-in: logits with the original image, and with the perturbed one. Tokens
	// marked visual lose probability when the image is hidden; the others barely move.
	logits, augLogits := make([]float32, B*T*V), make([]float32, B*T*V)
	targets, mask := make([]int32, B*T), make([]float32, B*T)
	visual := make([]bool, B*T)
	for i := range B {
		length := 10 + r.IntN(T-9)
		for t := range T {
			row := (i*T + t) * V
			y := r.IntN(V)
			targets[i*T+t] = int32(y)
			for v := range V {
				logits[row+v] = float32(r.NormFloat64())
			}
			logits[row+y] += 3
			copy(augLogits[row:row+V], logits[row:row+V])
			visual[i*T+t] = r.Float64() < 0.3
			drop := 0.05 * r.Float64()
			if visual[i*T+t] {
				drop = 1 + 2*r.Float64()
			}
			augLogits[row+y] -= float32(drop)
			if t < length {
				mask[i*T+t] = 1
			}
		}
	}
	lt := tensor.Must(tensor.FromFloat32(logits, B, T, V))
	ys := tensor.Must(tensor.FromInt32(targets, B, T))
	m := tensor.Must(tensor.FromFloat32(mask, B, T))
	oldLogp, entropy, augLogp := newF32(B, T), newF32(B, T), newF32(B, T)
	if err := tensor.LogProbEntropy(oldLogp, entropy, lt, ys, 1); err != nil {
		return err
	}
	if err := tensor.LogProbs(augLogp, tensor.Must(tensor.FromFloat32(augLogits, B, T, V)), ys, 1); err != nil {
		return err
	}
	meanEnt, _ := tensor.MaskedMean(entropy, m)
	fmt.Printf("2. log-probs: %d responses x %d tokens over V=%d, mean entropy %.3f nats\n", B, T, V, meanEnt)

	// 3. Rewards (1 at the last token of a correct response) and GRPO advantages per prompt.
	rewards, index := newF32(B, T), make([]int32, B)
	rw, _ := rewards.Float32s()
	correct := make([]bool, B)
	for i := range B {
		index[i] = int32(i / samples)
		correct[i] = r.Float64() < 0.5
		if correct[i] {
			rw[i*T+lastValid(mask[i*T:(i+1)*T])] = 1
		}
	}
	adv := newF32(B, T)
	if err := advantage.Compute(adv, advantage.Inputs{Rewards: rewards, ResponseMask: m, Index: tensor.Must(tensor.FromInt32(index, B))}, advantage.Config{Estimator: advantage.EstimatorGRPO}); err != nil {
		return err
	}
	fmt.Println("3. advantages: GRPO over 2 groups of 4")

	// 4. Token perception: score every token by how far its log-prob moved (low-var KL),
	// and each response by its mean score.
	score, sens := newF32(B, T), newF32(B)
	if err := divergence.PerceptionScore(score, oldLogp, augLogp); err != nil {
		return err
	}
	if err := tprl.SensitivityScores(sens, score, m); err != nil {
		return err
	}

	// 5. The PPO update of one mini-batch in two micro-batches: token mask (top 40% by
	// perception score), trajectory shaping, dual-clip loss, global token scaling.
	cfg := tprl.UpdateConfig{
		Tokens: tprl.Config{EnablePerceptionFiltering: true, TopPPerceptionTokens: 0.4,
			EnableTrajectoryReweighting: true, TrajectoryScalingMin: 0.8},
		Policy: ppo.DefaultPolicyConfig(ppo.Vanilla),
	}
	upd, err := cfg.Prepare(tprl.MiniBatch{ResponseMask: m, OldLogProbs: oldLogp, AugLogProbs: augLogp, Advantages: adv})
	if err != nil {
		return err
	}
	defer upd.Release() // the perception score Prepare computed (device memory on a GPU)
	// The current policy has moved a little since the rollout.
	curLogits := append([]float32(nil), logits...)
	for i := range curLogits {
		curLogits[i] += float32(0.1 * r.NormFloat64())
	}
	cur := tensor.Must(tensor.FromFloat32(curLogits, B, T, V))
	logp := newF32(B, T)
	if err := tensor.LogProbs(logp, cur, ys, 1); err != nil {
		return err
	}
	grad, tokMask, shaped := newF32(B, T), newF32(B, T), newF32(B, T)
	var total float32
	for lo := 0; lo < B; lo += B / 2 {
		hi := lo + B/2
		rows := func(t *tensor.Tensor) *tensor.Tensor { return tensor.Must(t.Rows(lo, hi)) }
		res, err := upd.MicroBatch(rows(grad), tprl.MicroInputs{LogProbs: rows(logp)}, lo, hi)
		if err != nil {
			return err
		}
		total += res.Loss
		if err := tensor.CopyInto(rows(tokMask), res.LossTokenMask); err != nil {
			return err
		}
		if err := tensor.CopyInto(rows(shaped), res.Advantages); err != nil {
			return err
		}
	}

	// 6. Carry the gradient from log-probs back to the logits.
	dlogits := newF32(B, T, V)
	if err := tensor.LogProbEntropyBackward(dlogits, tensor.LogProbGrad{
		Logits: cur, Targets: ys, LogProbs: logp, DLogProbs: grad, Temperature: 1,
	}); err != nil {
		return err
	}

	fmt.Println("4-5. token perception and PPO loss:")
	tw := tabwriter.NewWriter(os.Stdout, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "resp\tgroup\ttokens\tcorrect\tadvantage\tsensitivity\tfactor\tshaped adv\tselected\tvisual in selected\t")
	sv, _ := sens.Float32s()
	av, _ := adv.Float32s()
	shv, _ := shaped.Float32s()
	tm, _ := tokMask.Float32s()
	var selVisual, sel, visualTotal int
	for i := range B {
		n, s, sv2 := 0, 0, 0
		for t := i * T; t < (i+1)*T; t++ {
			if mask[t] == 0 {
				continue
			}
			n++
			if visual[t] {
				visualTotal++
			}
			if tm[t] != 0 {
				s++
				if visual[t] {
					sv2++
				}
			}
		}
		sel, selVisual = sel+s, selVisual+sv2
		a, sa := av[i*T], shv[i*T]
		factor := "-"
		if a != 0 {
			factor = fmt.Sprintf("%.3f", sa/a)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%v\t%+.3f\t%.3f\t%s\t%+.3f\t%d\t%d\t\n", i, index[i], n, correct[i], a, sv[i], factor, sa, s, sv2)
	}
	tw.Flush()
	d, _ := dlogits.Float32s()
	var norm float64
	for _, x := range d {
		norm += float64(x) * float64(x)
	}
	fmt.Printf("   perception mask: %d tokens selected, %d visual (precision %.2f; %d visual tokens in all)\n",
		sel, selVisual, float64(selVisual)/float64(max(sel, 1)), visualTotal)
	fmt.Printf("   loss %.5f (pg_loss per micro-batch %.5f), clip fraction %.3f\n",
		total, upd.Metrics["actor/pg_loss"], upd.Metrics["actor/pg_clipfrac_higher"])
	fmt.Printf("6. backward: |d loss / d logits| = %.5f over %d logits\n", math.Sqrt(norm), len(d))
	return nil
}

func randomImage(r *rand.Rand, h, w int) []uint8 {
	px := make([]uint8, h*w*3)
	for i := range px {
		px[i] = uint8(1 + r.IntN(255)) // no black pixels, so blackened patches are countable
	}
	return px
}

// blackPatches counts 14-px patches whose first pixel is black.
func blackPatches(img *tensor.Tensor) int {
	px, _ := img.Uint8s()
	n := 0
	for y := 0; y < 56; y += 14 {
		for x := 0; x < 56; x += 14 {
			if px[(y*56+x)*3] == 0 {
				n++
			}
		}
	}
	return n
}

func lastValid(m []float32) int {
	for t := len(m) - 1; t >= 0; t-- {
		if m[t] != 0 {
			return t
		}
	}
	return 0
}
