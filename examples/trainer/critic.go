package main

import (
	"context"
	"fmt"

	"github.com/mtrl-go/mtrl/examples/internal/vlm"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl/loop"
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
	opt   *loop.AdamW
}

// criticSeedOffset makes the critic's initial weights differ from the actor's.
const criticSeedOffset = 0x637269746963 // "critic"

func newCritic(mc vlm.Config, seed uint64, o OptimConfig) (*Critic, error) {
	m, err := vlm.New(mc, seed+criticSeedOffset)
	if err != nil {
		return nil, err
	}
	return &Critic{model: m, opt: loop.NewAdamW(sizesOf(m), o.Betas[0], o.Betas[1], o.Eps, o.WeightDecay)}, nil
}

// Values implements loop.Critic: the critic's values [B, T] of b's response positions (no
// gradients kept).
func (t *Trainer) Values(lb *loop.Batch[example], dst *tensor.Tensor) error {
	b, err := t.newBatch(lb.Prompts, lb.Tokens(0, lb.Len()))
	if err != nil {
		return err
	}
	T, micro := t.respLen, t.cfg.Worker.Actor.MicroBatchSizePerDeviceForExperience
	out, _ := dst.Float32s()
	for lo := 0; lo < b.rows; lo += micro {
		hi := min(lo+micro, b.rows)
		ml, act, err := t.forwardResponse(t.critic.model, b, tensorRows(b.images, lo, hi), lo, hi)
		if err != nil {
			return err
		}
		act.Release()
		lg, _ := ml.logits.Float32s()
		V := ml.logits.Dim(2)
		for i := range (hi - lo) * T {
			out[lo*T+i] = lg[i*V]
		}
	}
	return nil
}

// Update implements loop.Critic: it trains the critic on b toward returns with the clipped value loss
// (ppo.ValueLoss, clipped around the values it predicted before the update): ppo_epochs passes,
// one optimizer step per mini-batch, the micro-batch losses scaled by their share of the
// mini-batch's tokens. It returns the mean value loss, clip fraction and gradient norm.
func (t *Trainer) Update(ctx context.Context, comm collective.Comm, lb *loop.Batch[example], _, oldValues, returns *tensor.Tensor) (map[string]float64, error) {
	b, err := t.newBatch(lb.Prompts, lb.Tokens(0, lb.Len()))
	if err != nil {
		return nil, err
	}
	grads, optim, err := t.trainingOf(t.critic.model, t.critic.opt)
	if err != nil {
		return nil, err
	}
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
			// With W ranks each takes a contiguous 1/W of the mini-batch (as the actor's update).
			slo, shi := t.shard(miniRows)
			var micLoss, micClip []float64
			for lo := mlo + slo; lo < mlo+shi; lo += micro {
				hi := lo + micro
				ml, record, err := t.forwardResponse(t.critic.model, b, tensorRows(b.images, lo, hi), lo, hi)
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
				record.Release()
				if err := grads.Collect(); err != nil {
					return nil, err
				}
			}
			if _, err := grads.Reduce(ctx, comm, 1/float32(t.world())); err != nil {
				return nil, err
			}
			if micLoss, err = collective.AllGatherValues(ctx, comm, micLoss); err != nil {
				return nil, err
			}
			if micClip, err = collective.AllGatherValues(ctx, comm, micClip); err != nil {
				return nil, err
			}
			var loss float64
			for _, l := range micLoss {
				loss += l
			}
			clips = append(clips, micClip...)
			lr := cc.Optim.Schedule().At(t.critic.opt.T, total)
			norm, err := optim.Step(lr, act.MaxGradNorm)
			if err != nil {
				return nil, err
			}
			losses, norms = append(losses, loss), append(norms, norm)
		}
	}
	return map[string]float64{"critic/vf_loss": mean(losses), "critic/vf_clipfrac": mean(clips), "critic/grad_norm": mean(norms)}, nil
}

// modelParams is the critic's parameters (none for a nil critic).
func (c *Critic) modelParams() []*vlm.Param {
	if c == nil {
		return nil
	}
	return c.model.Params()
}
