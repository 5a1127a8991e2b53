// gorgonia.org/gorgonia switches to its cuDNN bindings under the cuda build tag, and the CUDA
// toolkit this project builds with has no cudnn.h, so the example is built without that tag.

//go:build !cuda

// Command gorgonia trains a model the user brings — a small policy built as a gorgonia graph —
// for a few VPPO steps with mtrl's ops. The division of labour is the one a user with their own
// framework gets:
//
//   - gorgonia runs the forward pass (logits) and, at the end, backpropagates into its weights;
//   - mtrl computes everything between the logits and the loss: log-probs
//     (tensor.LogProbEntropy), GRPO advantages (advantage.Compute), the perception mask and
//     trajectory shaping from log-probs under a patch-blackened image (perturb, tprl), the
//     clipped policy loss and d loss / d log-probs (tprl.Update), and d loss / d logits
//     (tensor.LogProbEntropyBackward).
//
// gorgonia's graph has no place for a loss computed outside it, so the upstream gradient enters
// through a surrogate: the graph's scalar output is sum(logits ⊙ D), with D a graph input set to
// mtrl's d loss / d logits; its gradient with respect to every weight is then exactly
// d loss / d weight.
//
// The task: an image of 4×4 pixels holds one bright 2×2 quadrant; a response is T = 4 tokens and
// earns reward 1 when its last token names the quadrant (tokens 0-3). Run:
//
//	go run ./examples/gorgonia -steps 20
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"

	G "gorgonia.org/gorgonia"
	gt "gorgonia.org/tensor"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
)

// Problem sizes: B = prompts*samples responses of T tokens over a vocabulary of V.
const (
	imgSize  = 4
	channels = 3
	patch    = 2 // blackening patch; one patch per quadrant
	T        = 4
	V        = 6 // 0-3 name a quadrant, 4 and 5 are filler
	hidden   = 16
	prompts  = 4
	samples  = 8 // responses per prompt (one GRPO group)
	B        = prompts * samples
	pixels   = imgSize * imgSize * channels
	features = pixels + T // pixels/255, then a one-hot token position
)

func main() {
	steps := flag.Int("steps", 20, "VPPO steps")
	seed := flag.Uint64("seed", 1, "seed of the weights, images, sampling and perturbations")
	flag.Parse()
	if err := run(os.Stdout, *steps, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "gorgonia:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, steps int, seed uint64) error {
	tr, err := newTrainer(seed)
	if err != nil {
		return err
	}
	defer tr.pol.close()
	for s := 1; s <= steps; s++ {
		st, err := tr.step()
		if err != nil {
			return fmt.Errorf("step %d: %w", s, err)
		}
		fmt.Fprintf(w, "step %d  reward %.3f  pg_loss %+.4f  loss %+.4f  |grad| %.4f\n", s, st.reward, st.pgLoss, st.loss, st.gradNorm)
		fmt.Fprintf(w, "        tokens kept by the perception mask %.2f  ppo-kl %+.2e  clipfrac %.3f\n",
			st.keptFraction, st.metrics["actor/ppo_kl"], st.metrics["actor/pg_clipfrac_higher"])
	}
	return nil
}

// policy is the user's model: a two-layer perceptron from (image, position) to next-token logits,
// built as a gorgonia graph over all N = B*T token rows at once.
type policy struct {
	g      *G.ExprGraph
	x      *G.Node // input features [N, features]
	d      *G.Node // upstream gradient d loss / d logits [N, V], set before backward
	logits *G.Node // [N, V]
	params G.Nodes
	fwd    G.VM // the forward subgraph only (logits)
	full   G.VM // forward, surrogate sum(logits ⊙ d) and its gradient
}

func newPolicy(seed uint64) (*policy, error) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	const n = B * T
	p := &policy{g: G.NewGraph()}
	weight := func(name string, scale float64, shape ...int) *G.Node {
		size := 1
		for _, d := range shape {
			size *= d
		}
		vals := make([]float32, size)
		for i := range vals {
			vals[i] = float32(scale * rng.NormFloat64())
		}
		v := gt.New(gt.WithShape(shape...), gt.WithBacking(vals))
		var nd *G.Node
		if len(shape) == 1 {
			nd = G.NewVector(p.g, gt.Float32, G.WithShape(shape...), G.WithName(name), G.WithValue(v))
		} else {
			nd = G.NewMatrix(p.g, gt.Float32, G.WithShape(shape...), G.WithName(name), G.WithValue(v))
		}
		p.params = append(p.params, nd)
		return nd
	}
	w1 := weight("w1", 1/math.Sqrt(features), features, hidden)
	b1 := weight("b1", 0, hidden)
	w2 := weight("w2", 1/math.Sqrt(hidden), hidden, V)
	b2 := weight("b2", 0, V)
	p.x = G.NewMatrix(p.g, gt.Float32, G.WithShape(n, features), G.WithName("x"))
	p.d = G.NewMatrix(p.g, gt.Float32, G.WithShape(n, V), G.WithName("dlogits"))

	var err error
	h, err := G.Mul(p.x, w1)
	if err == nil {
		h, err = G.BroadcastAdd(h, b1, nil, []byte{0})
	}
	if err == nil {
		h, err = G.Tanh(h)
	}
	if err == nil {
		p.logits, err = G.Mul(h, w2)
	}
	if err == nil {
		p.logits, err = G.BroadcastAdd(p.logits, b2, nil, []byte{0})
	}
	var surrogate *G.Node
	if err == nil {
		surrogate, err = G.HadamardProd(p.logits, p.d)
	}
	if err == nil {
		surrogate, err = G.Sum(surrogate)
	}
	if err == nil {
		_, err = G.Grad(surrogate, p.params...)
	}
	if err != nil {
		return nil, fmt.Errorf("build graph: %w", err)
	}
	p.fwd = G.NewTapeMachine(p.g.SubgraphRoots(p.logits))
	p.full = G.NewTapeMachine(p.g, G.BindDualValues(p.params...))
	return p, nil
}

func (p *policy) close() {
	p.fwd.Close()
	p.full.Close()
}

// forward returns the logits [B*T, V] for the features x. The slice is gorgonia's own buffer,
// wrapped by mtrl without a copy; it is valid until the next run of the graph.
func (p *policy) forward(x []float32) ([]float32, error) {
	if err := G.Let(p.x, gt.New(gt.WithShape(B*T, features), gt.WithBacking(x))); err != nil {
		return nil, err
	}
	defer p.fwd.Reset()
	if err := p.fwd.RunAll(); err != nil {
		return nil, err
	}
	return p.logits.Value().Data().([]float32), nil
}

// backward runs the graph again with D = dlogits, leaving d loss / d weight in each parameter's
// gradient (read by the solver, or by paramGrads).
func (p *policy) backward(x, dlogits []float32) error {
	if err := G.Let(p.x, gt.New(gt.WithShape(B*T, features), gt.WithBacking(x))); err != nil {
		return err
	}
	if err := G.Let(p.d, gt.New(gt.WithShape(B*T, V), gt.WithBacking(dlogits))); err != nil {
		return err
	}
	defer p.full.Reset()
	return p.full.RunAll()
}

// paramGrads returns the gradient of every parameter (after backward), in p.params order.
func (p *policy) paramGrads() ([][]float32, error) {
	out := make([][]float32, len(p.params))
	for i, nd := range p.params {
		g, err := nd.Grad()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", nd.Name(), err)
		}
		out[i] = g.Data().([]float32)
	}
	return out, nil
}

// rollout is what one VPPO step knows before the policy update: the sampled responses, their
// log-probs under the rollout policy with the original and with a perturbed image, and the
// advantages. Tensors are float32 [B, T] unless said otherwise.
type rollout struct {
	x, xAug  []float32 // features [B*T, features] with the original / the blackened images
	targets  []int32   // sampled tokens
	mask     []float32 // response mask (all responses are T tokens long)
	oldLogp  []float32
	augLogp  []float32
	adv      []float32
	reward   float64 // mean reward
	quadrant []int   // per prompt
}

type trainer struct {
	pol    *policy
	cfg    tprl.UpdateConfig
	solver G.Solver
	rng    *rand.Rand
	seed   uint64
	nstep  int
	blk    perturb.Blackening
}

func newTrainer(seed uint64) (*trainer, error) {
	pol, err := newPolicy(seed)
	if err != nil {
		return nil, err
	}
	cfg := tprl.UpdateConfig{
		Tokens: tprl.Config{
			EnablePerceptionFiltering:   true,
			TopPPerceptionTokens:        0.5,
			EnableTrajectoryReweighting: true,
			TrajectoryScalingMin:        0.8,
		},
		Policy: ppo.DefaultPolicyConfig(ppo.Vanilla),
	}
	if err := cfg.Validate(); err != nil {
		pol.close()
		return nil, err
	}
	return &trainer{
		pol:    pol,
		cfg:    cfg,
		solver: G.NewAdamSolver(G.WithLearnRate(0.03)),
		rng:    rand.New(rand.NewPCG(seed, 1)),
		seed:   seed,
		blk:    perturb.Blackening{PatchSize: patch, Prob: 0.5},
	}, nil
}

// image draws a dark image with the bright 2×2 quadrant q ([H, W, C] uint8).
func image(rng *rand.Rand, q int) []uint8 {
	img := make([]uint8, pixels)
	for y := range imgSize {
		for x := range imgSize {
			inside := y/patch == q/2 && x/patch == q%2
			for c := range channels {
				v := rng.IntN(40)
				if inside {
					v += 200
				}
				img[(y*imgSize+x)*channels+c] = uint8(v)
			}
		}
	}
	return img
}

// fillFeatures writes the T feature rows of response b: the pixels scaled to [0, 1] and the
// one-hot position.
func fillFeatures(x []float32, b int, img []uint8) {
	for t := range T {
		row := x[(b*T+t)*features : (b*T+t+1)*features]
		for i, v := range img {
			row[i] = float32(v) / 255
		}
		clear(row[pixels:])
		row[pixels+t] = 1
	}
}

// sample draws one token per row from softmax(logits).
func sample(rng *rand.Rand, logits []float32, dst []int32) {
	for r := range dst {
		row := logits[r*V : (r+1)*V]
		m := row[0]
		for _, z := range row {
			m = max(m, z)
		}
		var sum float64
		for _, z := range row {
			sum += math.Exp(float64(z - m))
		}
		u := rng.Float64() * sum
		dst[r] = V - 1
		for v, z := range row {
			if u -= math.Exp(float64(z - m)); u < 0 {
				dst[r] = int32(v)
				break
			}
		}
	}
}

// collect samples B responses for fresh prompts and computes everything the update needs.
func (tr *trainer) collect() (*rollout, error) {
	r := &rollout{
		x: make([]float32, B*T*features), xAug: make([]float32, B*T*features),
		targets: make([]int32, B*T), mask: make([]float32, B*T),
		oldLogp: make([]float32, B*T), augLogp: make([]float32, B*T), adv: make([]float32, B*T),
	}
	for i := range r.mask {
		r.mask[i] = 1
	}
	aug := make([]uint8, pixels)
	for pr := range prompts {
		q := tr.rng.IntN(4)
		r.quadrant = append(r.quadrant, q)
		img := image(tr.rng, q)
		src := tensor.Must(tensor.FromUint8(img, imgSize, imgSize, channels))
		dst := tensor.Must(tensor.FromUint8(aug, imgSize, imgSize, channels))
		for s := range samples {
			b := pr*samples + s
			fillFeatures(r.x, b, img)
			// Each response gets its own perturbation, keyed by (seed, step, row) only.
			if err := tr.blk.Apply(dst, src, tr.seed, uint64(tr.nstep)*B+uint64(b)); err != nil {
				return nil, err
			}
			fillFeatures(r.xAug, b, aug)
		}
	}
	logits, err := tr.pol.forward(r.x)
	if err != nil {
		return nil, err
	}
	sample(tr.rng, logits, r.targets)
	targets := tensor.Must(tensor.FromInt32(r.targets, B, T))
	if err := tensor.LogProbs(f32(r.oldLogp, B, T), f32(logits, B, T, V), targets, 1); err != nil {
		return nil, err
	}
	logits, err = tr.pol.forward(r.xAug)
	if err != nil {
		return nil, err
	}
	if err := tensor.LogProbs(f32(r.augLogp, B, T), f32(logits, B, T, V), targets, 1); err != nil {
		return nil, err
	}

	rewards := make([]float32, B*T) // the reward sits on the last response token
	index := make([]int32, B)
	for b := range B {
		index[b] = int32(b / samples)
		if int(r.targets[b*T+T-1]) == r.quadrant[b/samples] {
			rewards[b*T+T-1] = 1
			r.reward += 1.0 / B
		}
	}
	in := advantage.Inputs{Rewards: f32(rewards, B, T), ResponseMask: f32(r.mask, B, T), Index: tensor.Must(tensor.FromInt32(index, B))}
	if err := advantage.Compute(f32(r.adv, B, T), in, advantage.DefaultConfig()); err != nil {
		return nil, err
	}
	return r, nil
}

// f32 wraps a slice as a CPU tensor (no copy). The shapes here are constants, so an error is a
// programming error.
func f32(data []float32, shape ...int) *tensor.Tensor {
	return tensor.Must(tensor.FromFloat32(data, shape...))
}

// lossAndGrad evaluates mtrl's VPPO loss of the current weights on r and, when backward is set,
// leaves d loss / d weight in the parameters' gradients.
func (tr *trainer) lossAndGrad(r *rollout, backward bool) (tprl.MicroResult, *tprl.Update, error) {
	upd, err := tr.cfg.Prepare(tprl.MiniBatch{
		ResponseMask: f32(r.mask, B, T), OldLogProbs: f32(r.oldLogp, B, T),
		Advantages: f32(r.adv, B, T), AugLogProbs: f32(r.augLogp, B, T),
	})
	if err != nil {
		return tprl.MicroResult{}, nil, err
	}
	logitsData, err := tr.pol.forward(r.x)
	if err != nil {
		return tprl.MicroResult{}, nil, err
	}
	logits, targets := f32(logitsData, B, T, V), tensor.Must(tensor.FromInt32(r.targets, B, T))
	logp, grad := f32(make([]float32, B*T), B, T), f32(make([]float32, B*T), B, T)
	if err := tensor.LogProbs(logp, logits, targets, 1); err != nil {
		return tprl.MicroResult{}, nil, err
	}
	mr, err := upd.MicroBatch(grad, tprl.MicroInputs{LogProbs: logp}, 0, B)
	if err != nil || !backward {
		return mr, upd, err
	}
	dlogits := make([]float32, B*T*V)
	if err := tensor.LogProbEntropyBackward(f32(dlogits, B, T, V), tensor.LogProbGrad{
		Logits: logits, Targets: targets, LogProbs: logp, DLogProbs: grad, Temperature: 1,
	}); err != nil {
		return tprl.MicroResult{}, nil, err
	}
	return mr, upd, tr.pol.backward(r.x, dlogits)
}

type stepStats struct {
	reward, gradNorm, keptFraction float64
	loss, pgLoss                   float32
	metrics                        map[string]float64
}

// ppoEpochs is the number of policy updates per rollout: the second one runs with a ratio
// different from 1, so the clip is exercised.
const ppoEpochs = 2

// step runs one VPPO step: rollout, then ppoEpochs updates of the whole batch.
func (tr *trainer) step() (stepStats, error) {
	tr.nstep++
	r, err := tr.collect()
	if err != nil {
		return stepStats{}, err
	}
	st := stepStats{reward: r.reward, metrics: map[string]float64{}}
	for range ppoEpochs {
		mr, upd, err := tr.lossAndGrad(r, true)
		if err != nil {
			return st, err
		}
		grads, err := tr.pol.paramGrads()
		if err != nil {
			return st, err
		}
		var sq float64
		for _, g := range grads {
			for _, v := range g {
				sq += float64(v) * float64(v)
			}
		}
		st.loss, st.pgLoss, st.gradNorm = mr.Loss, mr.PGLoss, math.Sqrt(sq)
		// The mask is nil when no token filter is on: then every token trains.
		st.keptFraction = 1
		if m, err := mr.LossTokenMask.Float32s(); err == nil {
			st.keptFraction = 0
			for _, v := range m {
				st.keptFraction += float64(v) / float64(len(m))
			}
		}
		for k, v := range upd.Metrics {
			if len(v) > 0 {
				st.metrics[k] = v[len(v)-1]
			}
		}
		if math.IsNaN(st.gradNorm) || math.IsInf(st.gradNorm, 0) {
			continue // skip the optimizer step on a non-finite gradient, as the trainer does
		}
		if err := tr.solver.Step(G.NodesToValueGrads(tr.pol.params)); err != nil {
			return st, err
		}
	}
	return st, nil
}
