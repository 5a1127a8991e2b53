package loop_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// A prompt is a one-pixel image whose brightness encodes the answer, a token 0..3.
type prompt struct {
	pixel  uint8
	answer int32
}

const vocab, eos, respLen = 5, 4, 2 // tokens 0..3 answer, 4 ends the response

// tiny sees the image's brightness class and has one row of logits per (class, position).
type tiny struct{ w, g *tensor.Tensor } // [4·respLen, vocab]

func (m *tiny) Backend() tensor.Backend { return tensor.CPU() }
func (m *tiny) Params() []loop.Param    { return []loop.Param{{Name: "w", Value: m.w, Grad: m.g}} }

func class(pixel uint8) int { return int(pixel) / 64 }

func (m *tiny) Generate(ps []prompt, s loop.Sampling, rngs []*rand.Rand) ([]loop.Completion, error) {
	w, _ := m.w.Float32s()
	out := make([]loop.Completion, len(ps))
	for i, p := range ps {
		for t := 0; t < respLen; t++ {
			row := w[(class(p.pixel)*respLen+t)*vocab:][:vocab]
			tok := sample(row, s.Temperature, rngs[i])
			out[i].Tokens = append(out[i].Tokens, tok)
			out[i].Text += fmt.Sprint(tok)
			if tok == eos {
				break
			}
		}
	}
	return out, nil
}

// Logits gathers each row's logits; its backward scatters their gradient back into g.
func (m *tiny) Logits(b *loop.Batch[prompt], lo, hi int, in loop.Input, train bool) (loop.Logits, error) {
	w, _ := m.w.Float32s()
	classes := make([]int, hi-lo)
	lg := make([]float32, (hi-lo)*b.T*vocab)
	for r := range classes {
		img := tensor.Must(tensor.FromUint8([]uint8{b.Prompts[lo+r].pixel}, 1, 1, 1))
		if in.Perturb != nil { // the perturbed pass: the policy perturbs its own image
			if err := in.Perturb.Apply(img, img, in.Seed, b.IDs[lo+r]); err != nil {
				return loop.Logits{}, err
			}
		}
		px, _ := img.Uint8s()
		classes[r] = class(px[0])
		copy(lg[r*b.T*vocab:], w[classes[r]*respLen*vocab:][:b.T*vocab])
	}
	out := loop.Logits{Logits: tensor.Must(tensor.FromFloat32(lg, hi-lo, b.T, vocab))}
	out.Backward = func(d *tensor.Tensor) error {
		dv, _ := d.Float32s()
		g, _ := m.g.Float32s()
		for r, c := range classes {
			for j, x := range dv[r*b.T*vocab : (r+1)*b.T*vocab] {
				g[c*respLen*vocab+j] += x
			}
		}
		return nil
	}
	return out, nil
}

func sample(logits []float32, temp float64, r *rand.Rand) int32 {
	p := make([]float64, len(logits))
	var z float64
	for i, l := range logits {
		p[i] = math.Exp(float64(l) / temp)
		z += p[i]
	}
	u := r.Float64() * z
	for i := range p {
		if u -= p[i]; u < 0 {
			return int32(i)
		}
	}
	return int32(len(p) - 1)
}

func Example() {
	var data []prompt
	for i := range 64 {
		a := int32(i % 4)
		data = append(data, prompt{pixel: uint8(64*int(a) + 10 + i%40), answer: a})
	}
	accuracy := func(in loop.RewardInputs[prompt]) ([]float64, error) {
		out := make([]float64, len(in.Prompts))
		for i, c := range in.Completions {
			if c.Tokens[0] == in.Prompts[i].answer {
				out[i] = 1
			}
		}
		return out, nil
	}
	m := &tiny{w: tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 4*respLen, vocab))}
	m.g = tensor.Must(tensor.NewLike(m.w, tensor.Float32))

	tokens := tprl.DefaultConfig()
	tokens.EnablePerceptionFiltering, tokens.EnableTrajectoryReweighting = true, true // VPPO
	cfg := loop.Config{
		Steps: 40, Prompts: 8, Sampling: loop.Sampling{N: 4, MaxTokens: respLen, Temperature: 1, TopP: 1},
		Advantage:        advantage.DefaultConfig(),
		Update:           tprl.UpdateConfig{Tokens: tokens, Policy: ppo.DefaultPolicyConfig(ppo.Vanilla)},
		Perturb:          perturb.Masking{}, // a black image: the answer is lost
		MiniBatchPrompts: 8, PPOEpochs: 1, UpdateRows: 16, ScoreRows: 32,
		LR: loop.Schedule{LR: 0.1}, Seed: 1,
	}
	l, err := loop.New(cfg, loop.Parts[prompt]{
		Policy:  loop.FromLogits[prompt](m),
		Rewards: []loop.Reward[prompt]{{Name: "accuracy", Weight: 1, Func: accuracy}},
		Data:    loop.NewEpochs(data, true, 1),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	var first, last float64
	for step := range cfg.Steps {
		res, err := l.Step(context.Background())
		if err != nil {
			fmt.Println(err)
			return
		}
		if step < 5 {
			first += res.Metrics["reward/accuracy"] / 5
		} else if step >= cfg.Steps-5 {
			last += res.Metrics["reward/accuracy"] / 5
		}
		res.Release()
	}
	fmt.Printf("accuracy, mean of 5 steps: %.2f at the start, %.2f at the end\n", first, last)
	// Output: accuracy, mean of 5 steps: 0.24 at the start, 0.96 at the end
}

// Two data-parallel ranks in one process (collective.Run), each with its replica of a
// parameter on the CPU backend, sum their micro-batch gradients in the global order through
// collective.HostTensors, then take a ZeRO-1 step: each rank updates its half and the halves
// are all-gathered. With cuda.NCCL as the collective.Tensors the same code runs on the devices.
func ExampleDeviceReduce() {
	grads, weights := make([][]float32, 2), make([][]float32, 2)
	err := collective.Run(context.Background(), 2, func(ctx context.Context, comm collective.Comm) error {
		w, err := tensor.FromFloat32([]float32{1, 2, 3, 4}, 4)
		if err != nil {
			return err
		}
		ps := []loop.Param{{Name: "w", Value: w, Grad: tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 4))}}
		coll, err := collective.NewHostTensors(comm)
		if err != nil {
			return err
		}
		red, err := loop.NewDeviceReduce(ps, coll, loop.DeviceReduceConfig{Ordered: true}, comm.Rank(), comm.Size())
		if err != nil {
			return err
		}
		opt, err := loop.NewDeviceShardedAdamW(red, loop.ShardOptimizer, 0.9, 0.999, 1e-8, 0)
		if err != nil {
			return err
		}
		defer opt.Close()
		for mb := range 2 { // two micro-batches per rank; the backward adds each one's gradient
			g, err := ps[0].Grad.Float32s()
			if err != nil {
				return err
			}
			for j := range g {
				g[j] += float32((10*comm.Rank() + mb + 1) * (j + 1))
			}
			if err := red.Collect(); err != nil {
				return err
			}
		}
		if _, err := red.Reduce(ctx, comm, 0.25); err != nil { // the mean of the 4 micro-batches
			return err
		}
		if grads[comm.Rank()], err = ps[0].Grad.Float32s(); err != nil {
			return err
		}
		grads[comm.Rank()] = slices.Clone(grads[comm.Rank()])
		if _, _, err := opt.StepGroup(ctx, comm, 0.1, 0); err != nil {
			return err
		}
		weights[comm.Rank()], err = w.Float32s()
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("gradients:", grads[0], grads[1])
	fmt.Println("weights:  ", weights[0], weights[1])
	// Output:
	// gradients: [6.5 13 19.5 26] [6.5 13 19.5 26]
	// weights:   [0.9 1.9 2.9 3.9] [0.9 1.9 2.9 3.9]
}
