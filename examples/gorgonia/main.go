// gorgonia.org/gorgonia switches to its cuDNN bindings under the cuda build tag, and the CUDA
// toolkit this project builds with has no cudnn.h, so the example is built without that tag.

//go:build !cuda

// Command gorgonia trains a model the user brings — a small policy built as a gorgonia graph —
// with mtrl's RL loop (tprl/loop). The user writes the model's side; the loop does the rest:
//
//   - the model is a loop.LogitsModel: it samples responses and returns next-token logits,
//     and its backward takes d loss / d logits into gorgonia's gradients. loop.FromLogits
//     makes it a policy: log-probs, entropies and d loss / d logits come from mtrl's fused ops;
//   - gorgonia's Adam is the loop.Optimizer, and a loop.Gradients moves gorgonia's gradients
//     through the loop's micro-batch and rank sum;
//   - the task is a loop.Data of random images and a reward function.
//
// The loop samples, rewards, scores the responses with the images and with patch-blackened
// images (the perception score), computes GRPO advantages and the VPPO update (perception
// token mask, trajectory shaping, clipped loss) and steps the optimizer.
//
// gorgonia's graph has no place for a loss computed outside it, so the upstream gradient enters
// through a surrogate: the graph's scalar output is sum(logits ⊙ D), with D a graph input set to
// mtrl's d loss / d logits; its gradient with respect to every weight is then d loss / d weight.
//
// The task: an image of 4×4 pixels holds one bright 2×2 quadrant; a response is T = 4 tokens and
// earns reward 1 when its last token names the quadrant (tokens 0-3). Run:
//
//	go run ./examples/gorgonia -steps 20
package main

import (
	"context"
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
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl"
	"github.com/mtrl-go/mtrl/tprl/loop"
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
	l, m, err := newLoop(steps, seed)
	if err != nil {
		return err
	}
	defer m.close()
	for range steps {
		res, err := l.Step(context.Background())
		if err != nil {
			return err
		}
		x := res.Metrics
		fmt.Fprintf(w, "step %d  reward %.3f  pg_loss %+.4f  |grad| %.4f  perception-kept %.2f  ppo_kl %+.2e  clipfrac %.3f\n",
			l.State().Step, x["reward/overall"], x["actor/pg_loss"], x["actor/grad_norm"],
			x["actor/perception_token_fraction"], x["actor/ppo_kl"], x["actor/clipfrac"])
		res.Release()
	}
	return nil
}

// newLoop assembles the loop: the model (which the caller closes), the task and the recipe.
func newLoop(steps int, seed uint64) (*loop.Loop[prompt], *model, error) {
	m, err := newModel(B, seed)
	if err != nil {
		return nil, nil, err
	}
	cfg := loop.Config{
		Steps: steps, Prompts: prompts, Sampling: loop.Sampling{N: samples, MaxTokens: T, Temperature: 1, TopP: 1},
		Advantage: advantage.DefaultConfig(), // GRPO
		Update: tprl.UpdateConfig{
			Tokens: tprl.Config{EnablePerceptionFiltering: true, TopPPerceptionTokens: 0.5,
				EnableTrajectoryReweighting: true, TrajectoryScalingMin: 0.8},
			Policy: ppo.DefaultPolicyConfig(ppo.Vanilla),
		},
		Perturb: perturb.Blackening{PatchSize: patch, Prob: 0.5},
		// One mini-batch per step, two epochs over it: the second runs at ratios != 1, so the
		// clip is exercised. Micro-batches of B rows fill the graph.
		MiniBatchPrompts: prompts, PPOEpochs: 2, UpdateRows: B, ScoreRows: B,
		LR: loop.Schedule{LR: 0.03}, Seed: seed,
	}
	grads, err := newGradients(m)
	if err != nil {
		m.close()
		return nil, nil, err
	}
	l, err := loop.New(cfg, loop.Parts[prompt]{
		Policy:    loop.FromLogits[prompt](m),
		Rewards:   []loop.Reward[prompt]{{Name: "quadrant", Weight: 1, Func: namesQuadrant}},
		Data:      &images{rng: rand.New(rand.NewPCG(seed, 1))},
		Optimizer: &adam{m: m, solver: G.NewAdamSolver()}, // its rate comes from cfg.LR each step
		Gradients: grads,
	})
	if err != nil {
		m.close()
		return nil, nil, err
	}
	return l, m, nil
}

// The task.

// prompt is an image [H, W, C] and the quadrant that is bright in it.
type prompt struct {
	image    []uint8
	quadrant int
}

// images is the data: fresh random images from a seeded source.
type images struct{ rng *rand.Rand }

func (d *images) Next(n int) []prompt {
	ps := make([]prompt, n)
	for i := range ps {
		ps[i].quadrant = d.rng.IntN(4)
		ps[i].image = image(d.rng, ps[i].quadrant)
	}
	return ps
}

// image draws a dark image with the bright 2×2 quadrant q.
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

// namesQuadrant is the reward: 1 when the response's last token names the bright quadrant.
func namesQuadrant(in loop.RewardInputs[prompt]) ([]float64, error) {
	out := make([]float64, len(in.Prompts))
	for i, c := range in.Completions {
		if n := len(c.Tokens); n > 0 && int(c.Tokens[n-1]) == in.Prompts[i].quadrant {
			out[i] = 1
		}
	}
	return out, nil
}

// The model.

// model is the user's model: a two-layer perceptron from (image, position) to next-token
// logits, a gorgonia graph over a fixed number of responses (rows*T token rows). Calls with
// fewer responses pad the rest with zero features and a zero upstream gradient, so the padding
// adds nothing to the weights' gradients; this keeps one graph for every micro-batch size.
type model struct {
	rows   int
	g      *G.ExprGraph
	x      *G.Node // input features [rows*T, features]
	d      *G.Node // upstream gradient d loss / d logits [rows*T, V], set before backward
	logits *G.Node // [rows*T, V]
	params G.Nodes
	fwd    G.VM // the forward subgraph only (logits)
	full   G.VM // forward, surrogate sum(logits ⊙ d) and its gradient
}

func newModel(rows int, seed uint64) (*model, error) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	m := &model{rows: rows, g: G.NewGraph()}
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
			nd = G.NewVector(m.g, gt.Float32, G.WithShape(shape...), G.WithName(name), G.WithValue(v))
		} else {
			nd = G.NewMatrix(m.g, gt.Float32, G.WithShape(shape...), G.WithName(name), G.WithValue(v))
		}
		m.params = append(m.params, nd)
		return nd
	}
	w1 := weight("w1", 1/math.Sqrt(features), features, hidden)
	b1 := weight("b1", 0, hidden)
	w2 := weight("w2", 1/math.Sqrt(hidden), hidden, V)
	b2 := weight("b2", 0, V)
	m.x = G.NewMatrix(m.g, gt.Float32, G.WithShape(rows*T, features), G.WithName("x"))
	m.d = G.NewMatrix(m.g, gt.Float32, G.WithShape(rows*T, V), G.WithName("dlogits"))

	h, err := G.Mul(m.x, w1)
	if err == nil {
		h, err = G.BroadcastAdd(h, b1, nil, []byte{0})
	}
	if err == nil {
		h, err = G.Tanh(h)
	}
	if err == nil {
		m.logits, err = G.Mul(h, w2)
	}
	if err == nil {
		m.logits, err = G.BroadcastAdd(m.logits, b2, nil, []byte{0})
	}
	var surrogate *G.Node
	if err == nil {
		surrogate, err = G.HadamardProd(m.logits, m.d)
	}
	if err == nil {
		surrogate, err = G.Sum(surrogate)
	}
	if err == nil {
		_, err = G.Grad(surrogate, m.params...)
	}
	if err != nil {
		return nil, fmt.Errorf("build graph: %w", err)
	}
	m.fwd = G.NewTapeMachine(m.g.SubgraphRoots(m.logits))
	m.full = G.NewTapeMachine(m.g, G.BindDualValues(m.params...))
	return m, nil
}

func (m *model) close() {
	m.fwd.Close()
	m.full.Close()
}

func (m *model) Backend() tensor.Backend { return tensor.CPU() }

// Generate samples each response's T tokens from the logits of its image: the model is not
// autoregressive (the logits depend on the image and the position only).
func (m *model) Generate(ps []prompt, s loop.Sampling, rngs []*rand.Rand) ([]loop.Completion, error) {
	switch {
	case s.TopP < 1 || s.TopK > 0:
		return nil, fmt.Errorf("model: top-p %v / top-k %d sampling is not implemented", s.TopP, s.TopK)
	case s.Temperature > 0 && len(rngs) != len(ps):
		return nil, fmt.Errorf("model: %d random sources for %d prompts", len(rngs), len(ps))
	}
	imgs := make([][]uint8, len(ps))
	for i, p := range ps {
		imgs[i] = p.image
	}
	logits, err := m.forward(imgs)
	if err != nil {
		return nil, err
	}
	out := make([]loop.Completion, len(ps))
	for i := range out {
		var rng *rand.Rand // nil: greedy
		if rngs != nil {
			rng = rngs[i]
		}
		for t := range T {
			out[i].Tokens = append(out[i].Tokens, sample(logits[(i*T+t)*V:][:V], s.Temperature, rng))
		}
		out[i].Text = fmt.Sprint(out[i].Tokens)
	}
	return out, nil
}

// sample draws a token from softmax(logits / temp), or takes the argmax when temp is 0.
func sample(logits []float32, temp float64, rng *rand.Rand) int32 {
	best := 0
	for v, z := range logits {
		if z > logits[best] {
			best = v
		}
	}
	if temp == 0 {
		return int32(best)
	}
	p := make([]float64, len(logits))
	var sum float64
	for v, z := range logits {
		p[v] = math.Exp(float64(z-logits[best]) / temp)
		sum += p[v]
	}
	u := rng.Float64() * sum
	for v := range p {
		if u -= p[v]; u < 0 {
			return int32(v)
		}
	}
	return int32(len(p) - 1)
}

// Logits implements loop.LogitsModel: the logits of responses [lo, hi) of b, with each image
// perturbed for the loop's perturbed pass.
func (m *model) Logits(b *loop.Batch[prompt], lo, hi int, in loop.Input, train bool) (loop.Logits, error) {
	imgs := make([][]uint8, hi-lo)
	for r := range imgs {
		imgs[r] = b.Prompts[lo+r].image
		if in.Perturb == nil {
			continue
		}
		src := tensor.Must(tensor.FromUint8(imgs[r], imgSize, imgSize, channels))
		dst := tensor.Must(tensor.New(tensor.CPU(), tensor.Uint8, imgSize, imgSize, channels))
		if err := in.Perturb.Apply(dst, src, in.Seed, b.IDs[lo+r]); err != nil {
			return loop.Logits{}, err
		}
		imgs[r], _ = dst.Uint8s()
	}
	logits, err := m.forward(imgs)
	if err != nil {
		return loop.Logits{}, err
	}
	lg, err := tensor.FromFloat32(logits, hi-lo, T, V)
	if err != nil {
		return loop.Logits{}, err
	}
	out := loop.Logits{Logits: lg}
	if train {
		out.Backward = func(dlogits *tensor.Tensor) error { return m.backward(imgs, dlogits) }
	}
	return out, nil
}

// features returns the graph's input for the images: T rows per image, the pixels scaled to
// [0, 1] and the one-hot position; the rows past the images stay zero.
func (m *model) features(imgs [][]uint8) (*gt.Dense, error) {
	if len(imgs) > m.rows {
		return nil, fmt.Errorf("model: %d responses, more than the graph's %d (raise newModel's rows)", len(imgs), m.rows)
	}
	x := make([]float32, m.rows*T*features)
	for b, img := range imgs {
		for t := range T {
			row := x[(b*T+t)*features : (b*T+t+1)*features]
			for i, v := range img {
				row[i] = float32(v) / 255
			}
			row[pixels+t] = 1
		}
	}
	return gt.New(gt.WithShape(m.rows*T, features), gt.WithBacking(x)), nil
}

// forward returns the logits [len(imgs)*T*V] of the images, a copy of gorgonia's buffer
// (which the next run of the graph overwrites).
func (m *model) forward(imgs [][]uint8) ([]float32, error) {
	x, err := m.features(imgs)
	if err != nil {
		return nil, err
	}
	if err := G.Let(m.x, x); err != nil {
		return nil, err
	}
	defer m.fwd.Reset()
	if err := m.fwd.RunAll(); err != nil {
		return nil, err
	}
	return append([]float32(nil), m.logits.Value().Data().([]float32)[:len(imgs)*T*V]...), nil
}

// backward runs the whole graph with D = dlogits (zero on the padding): gorgonia adds
// d loss / d weight to each parameter's gradient.
func (m *model) backward(imgs [][]uint8, dlogits *tensor.Tensor) error {
	x, err := m.features(imgs)
	if err != nil {
		return err
	}
	dv, err := dlogits.Float32s()
	if err != nil {
		return err
	}
	d := make([]float32, m.rows*T*V)
	copy(d, dv)
	if err := G.Let(m.x, x); err != nil {
		return err
	}
	if err := G.Let(m.d, gt.New(gt.WithShape(m.rows*T, V), gt.WithBacking(d))); err != nil {
		return err
	}
	defer m.full.Reset()
	return m.full.RunAll()
}

// grads returns each parameter's gradient (gorgonia's own buffers), in m.params order.
func (m *model) grads() ([][]float32, error) {
	out := make([][]float32, len(m.params))
	for i, nd := range m.params {
		g, err := nd.Grad()
		if err == nil && g == nil {
			err = fmt.Errorf("no gradient before the first backward")
		}
		if err != nil {
			return nil, fmt.Errorf("model: %s: %w", nd.Name(), err)
		}
		out[i] = g.Data().([]float32)
	}
	return out, nil
}

// The optimizer and the gradient sum.

// adam is the loop's Optimizer over gorgonia's Adam solver.
type adam struct {
	m      *model
	solver *G.AdamSolver
	steps  int
}

// Step clips the gradients' global norm (mtrl's loop.ClipGradNorm, as torch does) and steps
// the solver at the schedule's rate; a non-finite norm skips the step.
func (o *adam) Step(lr, maxNorm float64) (float64, error) {
	gs, err := o.m.grads()
	if err != nil {
		return 0, err
	}
	norm := loop.ClipGradNorm(gs, maxNorm)
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		for _, g := range gs {
			clear(g)
		}
		return norm, nil
	}
	G.WithLearnRate(lr)(o.solver)
	o.steps++
	return norm, o.solver.Step(G.NodesToValueGrads(o.m.params)) // it zeroes the gradients
}

func (o *adam) Steps() int { return o.steps }

// gradients is the loop's Gradients for the model. gorgonia adds every backward into the
// parameters' gradients; Collect moves each micro-batch's gradient into a host copy, where
// loop.HostGradients keeps the micro-batches apart and sums them over micro-batches and ranks
// in one fixed order; Reduce writes the sum back for the solver.
type gradients struct {
	m    *model
	host [][]float32 // the host copy, in m.params order
	sum  *loop.HostGradients
}

func newGradients(m *model) (*gradients, error) {
	g := &gradients{m: m}
	var params []loop.Param
	for _, nd := range m.params {
		h := make([]float32, nd.Shape().TotalSize())
		g.host = append(g.host, h)
		params = append(params, loop.Param{Name: nd.Name(), Grad: tensor.Must(tensor.FromFloat32(h, len(h)))})
	}
	var err error
	g.sum, err = loop.NewHostGradients(params) // reads only Grad, the host copy
	return g, err
}

func (g *gradients) Collect() error {
	gs, err := g.m.grads()
	if err != nil {
		return err
	}
	for i, x := range gs {
		copy(g.host[i], x)
		clear(x)
	}
	return g.sum.Collect()
}

func (g *gradients) Reduce(ctx context.Context, comm collective.Comm, scale float32) (int64, error) {
	received, err := g.sum.Reduce(ctx, comm, scale)
	if err != nil {
		return 0, err
	}
	gs, err := g.m.grads()
	if err != nil {
		return 0, err
	}
	for i, x := range gs {
		copy(x, g.host[i])
	}
	return received, nil
}
