package main

import (
	"context"
	"fmt"

	"github.com/mtrl-go/mtrl/examples/internal/vlm"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// actorDevice is the actor's training state on a device (worker.actor.device=cuda; built with
// -tags cuda, see device_cuda.go). The policy's weights and gradients live there for the whole
// run (vlm.Model.UseOps); so do the AdamW moments, the sum of the micro-batch gradients, the
// gradient norm with the non-finite check, clipping and the AdamW step. The host keeps the
// optimizer's step count; checkpoints download the moments (saveMoments) and a loaded
// checkpoint's are uploaded at the next step (forget). The reference model joins the same
// device (attach). Every method's model is one that useDevice or attach put there.
type actorDevice interface {
	// backend is the device's tensor backend.
	backend() tensor.Backend
	// attach puts another model (the frozen reference) on the device.
	attach(m *vlm.Model) error
	// accumulate adds m's gradient (one micro-batch's) to the running sum, in micro-batch order
	// as loop.HostGradients adds them on the host, and zeroes it; finish sets m's gradient to
	// scale × the sum and clears the sum.
	accumulate(m *vlm.Model) error
	finish(m *vlm.Model, scale float32) error
	// appendGrad appends m's gradient to dst (the data-parallel all-gather runs on the host) and
	// zeroes it; setGrad uploads a flat gradient into m's.
	appendGrad(m *vlm.Model, dst []float32) ([]float32, error)
	setGrad(m *vlm.Model, flat []float32) error
	// zero zeroes a device gradient (the offloaded optimizer's, after its download).
	zero(g *tensor.Tensor) error
	// allReduce (grad_reduce=bucketed on several ranks) sums the accumulated micro-batch
	// gradients of m over comm's ranks on the devices, bucket float32 values per NCCL
	// all-reduce, with no host staging, then does finish(m, scale). A failure aborts the NCCL
	// communicator, so no rank waits for this one.
	allReduce(ctx context.Context, comm collective.Comm, m *vlm.Model, scale float32, bucket int) error
	// step measures the global gradient norm; when it is finite it clips to maxNorm and takes
	// opt's AdamW step at lr. The gradient is zero afterwards either way. It returns the norm.
	step(m *vlm.Model, opt *loop.AdamW, decay []bool, lr, maxNorm float64) (float64, error)
	// saveMoments downloads opt's moments into opt.M and opt.V; forget drops the device's copy,
	// so the next step starts from opt.M and opt.V (a loaded checkpoint, a finished warm start).
	saveMoments(opt *loop.AdamW) error
	forget(opt *loop.AdamW)
	// close brings the models back to the host and gives the device back.
	close() error
}

// onDevice reports whether m runs on t's device (the critic stays on the host).
func (t *Trainer) onDevice(m *vlm.Model) bool {
	return t.dev != nil && m.Backend() != tensor.CPU()
}

// microLogits are the logits [rows, T, V] that predict one micro-batch's response tokens, on
// the backend of the model that computed them, and the targets there. On a device they never
// come to the host: the log-prob op reads them there and its backward writes d loss / d logits
// there. The per-token log-probs, entropies and d loss / d log-probs [rows, T] stay there too
// when the caller's tensors are on the logits' backend (the trainer's device path); host
// tensors are filled by a download (and d loss / d log-probs uploaded).
type microLogits struct {
	logits, targets *tensor.Tensor
	logp            *tensor.Tensor // the forward's log-probs on the logits' backend (logProbs sets it)
	owned           []*tensor.Tensor
}

// logProbs writes the log-probs of the targets (and the entropies when ent is not nil) into
// logp and ent [rows, T], on the host or on the logits' backend.
func (g *microLogits) logProbs(logp, ent *tensor.Tensor, temp float32) error {
	b := g.logits.Backend()
	if logp.Backend() == b && (ent == nil || ent.Backend() == b) {
		g.logp = logp
		if ent == nil {
			return tensor.LogProbs(logp, g.logits, g.targets, temp)
		}
		return tensor.LogProbEntropy(logp, ent, g.logits, g.targets, temp)
	}
	lp, err := g.alloc(b, logp.Shape()...)
	if err != nil {
		return err
	}
	if ent == nil {
		err = tensor.LogProbs(lp, g.logits, g.targets, temp)
	} else {
		var de *tensor.Tensor
		if de, err = g.alloc(b, ent.Shape()...); err == nil {
			if err = tensor.LogProbEntropy(lp, de, g.logits, g.targets, temp); err == nil {
				err = tensor.CopyInto(ent, de)
			}
		}
	}
	if err != nil {
		return err
	}
	g.logp = lp
	return tensor.CopyInto(logp, lp)
}

// dLogits returns d loss / d logits [rows, T, V] on the logits' backend from d loss / d
// log-probs [rows, T] (on the host or on that backend), through the log-prob op's backward
// (after logProbs).
func (g *microLogits) dLogits(dlogp *tensor.Tensor, temp float32) (*tensor.Tensor, error) {
	if g.logp == nil {
		return nil, fmt.Errorf("dLogits before logProbs")
	}
	b := g.logits.Backend()
	if dlogp.Backend() != b {
		d, err := g.alloc(b, dlogp.Shape()...)
		if err != nil {
			return nil, err
		}
		if err := tensor.CopyInto(d, dlogp); err != nil {
			return nil, err
		}
		dlogp = d
	}
	dlogits, err := tensor.NewLike(g.logits, tensor.Float32)
	if err != nil {
		return nil, err
	}
	if b != tensor.CPU() {
		g.owned = append(g.owned, dlogits)
	}
	err = tensor.LogProbEntropyBackward(dlogits, tensor.LogProbGrad{
		Logits: g.logits, Targets: g.targets, LogProbs: g.logp, DLogProbs: dlogp, Temperature: temp,
	})
	return dlogits, err
}

func (g *microLogits) alloc(b tensor.Backend, shape ...int) (*tensor.Tensor, error) {
	t, err := tensor.New(b, tensor.Float32, shape...)
	if err == nil && b != tensor.CPU() {
		g.owned = append(g.owned, t)
	}
	return t, err
}

// release frees the device memory (nothing on the host).
func (g *microLogits) release() {
	for _, t := range g.owned {
		_ = t.Release()
	}
	g.owned = nil
}
