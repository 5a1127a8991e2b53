package main

import (
	"fmt"

	"github.com/mtrl-go/mtrl/examples/internal/vlm"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
)

// The critic of advantage_estimator=gae is a separate small model with the actor's
// architecture and sizes (worker.actor.model), its own initial weights and its own AdamW
// (worker.critic.optim). A separate model rather than a value head on the policy trunk keeps
// the value loss from moving the policy's features (verl's critic is a separate model too) and
// reuses vlm.Model unchanged: the value of response position t is column 0 of the logits that
// predict token t (the PAD column, which the policy never samples), so the forward, backward
// and gather code of the actor serve the critic as they are.
type Critic struct {
	model *vlm.Model
	opt   *AdamW
	decay []bool
}

// criticSeedOffset makes the critic's initial weights differ from the actor's.
const criticSeedOffset = 0x637269746963 // "critic"

func newCritic(mc vlm.Config, seed uint64, o OptimConfig) (*Critic, error) {
	m, err := vlm.New(mc, seed+criticSeedOffset)
	if err != nil {
		return nil, err
	}
	c := &Critic{model: m}
	var sizes []int
	for _, p := range m.Params() {
		sizes = append(sizes, p.W.Len())
		c.decay = append(c.decay, len(p.W.Shape()) >= 2)
	}
	c.opt = NewAdamW(sizes, o.Betas[0], o.Betas[1], o.Eps, o.WeightDecay)
	return c, nil
}

// values writes the critic's values [B, T] of b's response positions (no gradients kept).
func (t *Trainer) values(dst *tensor.Tensor, b *batch, micro int) error {
	T := t.respLen
	out, _ := dst.Float32s()
	for lo := 0; lo < b.rows; lo += micro {
		hi := min(lo+micro, b.rows)
		ml, _, err := t.forwardResponse(t.critic.model, b, b.images, lo, hi)
		if err != nil {
			return err
		}
		lg, _ := ml.logits.Float32s()
		V := ml.logits.Dim(2)
		for i := range (hi - lo) * T {
			out[lo*T+i] = lg[i*V]
		}
	}
	return nil
}

// updateCritic trains the critic on b toward returns with the clipped value loss
// (ppo.ValueLoss, clipped around the values it predicted before the update): ppo_epochs passes,
// one optimizer step per mini-batch, the micro-batch losses scaled by their share of the
// mini-batch's tokens. It returns the mean value loss, clip fraction and gradient norm.
func (t *Trainer) updateCritic(b *batch, oldValues, returns *tensor.Tensor) (Metrics, error) {
	act, cc := t.cfg.Worker.Actor, t.cfg.Worker.Critic
	miniRows, micro, T := act.GlobalBatchSize*t.cfg.Worker.Rollout.N, act.MicroBatchSizePerDeviceForUpdate, t.respLen
	vcfg := ppo.ValueConfig{ClipRange: cc.CliprangeValue, Agg: ppo.Agg{Mode: ppo.Token}}
	var losses, clips, norms []float64
	total := act.PPOEpochs * (b.rows / miniRows) * t.steps
	for range act.PPOEpochs {
		for mlo := 0; mlo < b.rows; mlo += miniRows {
			mhi := mlo + miniRows
			_, tokens, err := tensor.MaskedSum(tensor.Must(b.mask.Rows(mlo, mhi)), tensor.Must(b.mask.Rows(mlo, mhi)))
			if err != nil {
				return nil, err
			}
			t.critic.model.ZeroGrad()
			// With W ranks each takes a contiguous 1/W of the mini-batch (as the actor's update).
			slo, shi := t.shard(miniRows)
			var micLoss, micClip []float64
			for lo := mlo + slo; lo < mlo+shi; lo += micro {
				hi := lo + micro
				ml, record, err := t.forwardResponse(t.critic.model, b, b.images, lo, hi)
				if err != nil {
					return nil, err
				}
				lg, _ := ml.logits.Float32s()
				V := ml.logits.Dim(2)
				vp := make([]float32, (hi-lo)*T)
				for i := range vp {
					vp[i] = lg[i*V]
				}
				mask := tensor.Must(b.mask.Rows(lo, hi))
				scale, err := ppo.TokenScale(mask, tokens, t.world())
				if err != nil {
					return nil, err
				}
				grad := tensor.Must(tensor.NewLike(mask, tensor.Float32))
				res, err := ppo.ValueLoss(ppo.Grad{Dst: grad, Scale: scale}, ppo.ValueInputs{VPreds: tensor.Must(tensor.FromFloat32(vp, hi-lo, T)),
					Returns: tensor.Must(returns.Rows(lo, hi)), Values: tensor.Must(oldValues.Rows(lo, hi)), ResponseMask: mask}, vcfg)
				if err != nil {
					return nil, fmt.Errorf("critic: %w", err)
				}
				micLoss, micClip = append(micLoss, float64(res.Loss)/float64(t.world())), append(micClip, res.VFClipFrac)
				gv, _ := grad.Float32s()
				dl := make([]float32, len(lg))
				for i, d := range gv {
					dl[i*V] = d
				}
				if err := t.backwardResponse(t.critic.model, b, record, tensor.Must(tensor.FromFloat32(dl, hi-lo, T, V)), lo, hi); err != nil {
					return nil, err
				}
				if err := t.collectGrad(t.critic.model); err != nil {
					return nil, err
				}
			}
			if err := t.reduceGrads(t.critic.model, 1/float32(t.world())); err != nil {
				return nil, err
			}
			if micLoss, err = gatherValues(t, micLoss); err != nil {
				return nil, err
			}
			if micClip, err = gatherValues(t, micClip); err != nil {
				return nil, err
			}
			var loss float64
			for _, l := range micLoss {
				loss += l
			}
			clips = append(clips, micClip...)
			lr := cc.Optim.LRAt(t.critic.opt.T, total)
			norm, err := t.optimizerStep(t.critic.model, t.critic.opt, t.critic.decay, lr, act.MaxGradNorm)
			if err != nil {
				return nil, err
			}
			losses, norms = append(losses, loss), append(norms, norm)
		}
	}
	return Metrics{"critic/vf_loss": mean(losses), "critic/vf_clipfrac": mean(clips), "critic/grad_norm": mean(norms)}, nil
}

// modelParams is the critic's parameters (none for a nil critic).
func (c *Critic) modelParams() []*vlm.Param {
	if c == nil {
		return nil
	}
	return c.model.Params()
}
