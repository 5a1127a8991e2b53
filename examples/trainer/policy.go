package main

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/mtrl-go/mtrl/examples/internal/vlm"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// vlmModel is the built-in VLM as a loop.LogitsModel of the trainer's examples: the actor, the
// frozen reference and the critic are each one over their own model. loop.FromLogits makes it
// a policy.
type vlmModel struct {
	t *Trainer
	m *vlm.Model
	// last is the model layout of the batch seen last: the scoring passes and micro-batches of
	// a step read the same batch many times.
	last struct {
		b   *loop.Batch[example]
		lay *batch
	}
}

// Backend is where the step's per-token tensors live: the actor's device with
// worker.actor.device=cuda (the reference joins it there), else the host.
func (p *vlmModel) Backend() tensor.Backend {
	if p.t.onDevice(p.m) {
		return p.t.dev.backend()
	}
	return tensor.CPU()
}

// layout returns b in the model's layout (images, prompt + response tokens, targets, mask).
func (p *vlmModel) layout(b *loop.Batch[example]) (*batch, error) {
	if p.last.b == b {
		return p.last.lay, nil
	}
	lay, err := p.t.newBatch(b.Prompts, b.Tokens(0, b.Len()))
	if err != nil {
		return nil, err
	}
	p.last.b, p.last.lay = b, lay
	return lay, nil
}

// Generate samples each prompt's response with the KV cache, row i from rngs[i] (greedy when
// s.Temperature is 0), and decodes it.
func (p *vlmModel) Generate(prompts []example, s loop.Sampling, rngs []*rand.Rand) ([]loop.Completion, error) {
	pb, err := p.t.newBatch(prompts, make([][]int32, len(prompts))) // images and prompts only
	if err != nil {
		return nil, err
	}
	ids := make([][]int32, len(prompts))
	for i, e := range prompts {
		ids[i] = e.prompt
	}
	var out [][]int32
	if s.Temperature == 0 {
		out, err = p.m.GenerateTopK(pb.images, ids, s.MaxTokens, 0, 1, 0, nil)
	} else {
		out, err = p.m.GenerateRows(pb.images, ids, s.MaxTokens, s.Temperature, s.TopP, s.TopK, rngs)
	}
	if err != nil {
		return nil, err
	}
	cs := make([]loop.Completion, len(out))
	for i, r := range out {
		cs[i] = loop.Completion{Tokens: r, Text: p.t.tok.Decode(r)}
	}
	return cs, nil
}

// Logits runs the model on rows [lo, hi) of b, their images perturbed when in says so, and
// gathers the logits that predict the response tokens.
func (p *vlmModel) Logits(b *loop.Batch[example], lo, hi int, in loop.Input, train bool) (loop.Logits, error) {
	lay, err := p.layout(b)
	if err != nil {
		return loop.Logits{}, err
	}
	images, err := lay.images.Rows(lo, hi)
	if err != nil {
		return loop.Logits{}, err
	}
	if in.Perturb != nil {
		aug, err := tensor.NewLike(images, tensor.Uint8)
		if err != nil {
			return loop.Logits{}, err
		}
		if err := in.Perturb.ApplyBatch(aug, images, in.Seed, b.IDs[lo:hi]); err != nil {
			return loop.Logits{}, fmt.Errorf("perturb: %w", err)
		}
		images = aug
	}
	ml, act, err := p.t.forwardResponse(p.m, lay, images, lo, hi)
	if err != nil {
		return loop.Logits{}, err
	}
	out := loop.Logits{Logits: ml.logits, Release: func() { ml.release(); act.Release() }}
	if train {
		out.Backward = func(d *tensor.Tensor) error { return p.t.backwardResponse(p.m, lay, act, d, lo, hi) }
	}
	return out, nil
}

// ReportFinal implements loop.FinalGradients through the host model (each block's gradients
// as the backward finishes them), so grad_reduce=bucketed reduces them during the backward.
func (p *vlmModel) ReportFinal(hook func(...*tensor.Tensor)) bool { return p.m.ReportFinal(hook) }

// actorParams are the actor's parameters for loop.HostGradients and loop.HostAdamW.
func actorParams(m *vlm.Model) []loop.Param {
	var ps []loop.Param
	for _, p := range m.Params() {
		ps = append(ps, loop.Param{Name: p.Name, Value: p.W, Grad: p.G, Decay: len(p.W.Shape()) >= 2})
	}
	return ps
}

// deviceGradients is loop.Gradients of a model on the actor's device: on one device the
// micro-batch sum runs there; with several ranks the micro-batch gradients come to the host for
// collective.OrderedSum and the sum goes back up (grad_reduce=ordered), or each rank sums its
// micro-batches there and NCCL all-reduces the sums between the devices (nccl:
// grad_reduce=bucketed, in buckets of bucket values).
type deviceGradients struct {
	t       *Trainer
	m       *vlm.Model
	pending []float32
	nccl    bool
	bucket  int
}

func (g *deviceGradients) Collect() error {
	if g.t.world() == 1 || g.nccl {
		return g.t.dev.accumulate(g.m)
	}
	var err error
	g.pending, err = g.t.dev.appendGrad(g.m, g.pending)
	return err
}

func (g *deviceGradients) Reduce(ctx context.Context, comm collective.Comm, scale float32) (int64, error) {
	if testRankFail != nil {
		if err := testRankFail(g.t.rank(), g.t.step+1); err != nil {
			return 0, err
		}
	}
	if g.t.world() == 1 {
		return 0, g.t.dev.finish(g.m, scale)
	}
	if g.nccl {
		// A rank that failed before this reduction releases the others here (the NCCL
		// collectives cannot be cancelled), then the devices reduce.
		if err := comm.Barrier(ctx); err != nil {
			return 0, err
		}
		if err := g.t.dev.allReduce(ctx, comm, g.m, scale, g.bucket); err != nil {
			return 0, err
		}
		// What a ring all-reduce receives per rank: 2·(N−1)/N of the gradient.
		n, w := int64(g.m.NumParams()), int64(comm.Size())
		return 2 * (w - 1) * n * 4 / w, nil
	}
	local := g.pending
	g.pending = nil
	sum, received, err := collective.OrderedSum(ctx, comm, local, g.m.NumParams())
	if err != nil {
		return 0, err
	}
	for i := range sum {
		sum[i] *= scale
	}
	return received, g.t.dev.setGrad(g.m, sum)
}

// deviceOptimizer is loop.Optimizer of a model on the actor's device: norm, clipping and
// AdamW run there, with the step count and (at checkpoints) the moments in opt.
type deviceOptimizer struct {
	t     *Trainer
	m     *vlm.Model
	opt   *loop.AdamW
	decay []bool
}

func (o *deviceOptimizer) Step(lr, maxNorm float64) (float64, error) {
	return o.t.dev.step(o.m, o.opt, o.decay, lr, maxNorm)
}

func (o *deviceOptimizer) Steps() int { return o.opt.T }

// hostGradients wraps loop.HostGradients with the trainer's rank-failure test hook.
type hostGradients struct {
	*loop.HostGradients
	t *Trainer
}

func (g hostGradients) Reduce(ctx context.Context, comm collective.Comm, scale float32) (int64, error) {
	if testRankFail != nil {
		if err := testRankFail(g.t.rank(), g.t.step+1); err != nil {
			return 0, err
		}
	}
	return g.HostGradients.Reduce(ctx, comm, scale)
}
