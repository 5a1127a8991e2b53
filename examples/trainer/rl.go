package main

import (
	"fmt"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/examples/internal/vlm"
	"github.com/mtrl-go/mtrl/examples/internal/vqa"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// rlLoop returns the run's tprl/loop, built at the first RL step from the configuration, the
// actor, the frozen reference, the critic, the rewards and the data, in the state of the
// trainer (a loaded checkpoint's step, skipped steps and divergence coefficient).
func (t *Trainer) rlLoop() (*loop.Loop[example], error) {
	if t.rl != nil {
		return t.rl, nil
	}
	lc := t.cfg.loopConfig(t.steps, t.adv, t.update)
	lc.Perturb = t.pert
	parts := loop.Parts[example]{Policy: loop.FromLogits[example](t.actor), Rewards: t.rewards(), Data: t.data, Comm: t.comm}
	if t.ref != nil {
		parts.Reference = loop.FromLogits[example](&vlmModel{t: t, m: t.ref})
	}
	if t.critic != nil {
		parts.Critic = t
	}
	var err error
	if parts.Gradients, parts.Optimizer, err = t.actorTraining(); err != nil {
		return nil, err
	}
	l, err := loop.New(lc, parts)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := l.Restore(t.rlState()); err != nil {
		return nil, err
	}
	t.rl = l
	return l, nil
}

// loopConfig is the tprl/loop configuration of the run's keys with the given budget, advantage
// estimator and update (no perturbation: the caller adds its own).
func (c Config) loopConfig(steps int, adv advantage.Config, update tprl.UpdateConfig) loop.Config {
	act, ro, o := c.Worker.Actor, c.Worker.Rollout, c.Optimization
	lc := loop.Config{
		Steps:   steps,
		Prompts: c.Dataset.RolloutBatchSize,
		Sampling: loop.Sampling{N: ro.N, MaxTokens: c.Dataset.MaxResponseLength, Temperature: ro.Temperature,
			TopP: ro.TopP, TopK: ro.TopK},
		Advantage:        adv,
		Update:           update,
		MiniBatchPrompts: act.GlobalBatchSize, PPOEpochs: act.PPOEpochs,
		UpdateRows: act.MicroBatchSizePerDeviceForUpdate, ScoreRows: act.MicroBatchSizePerDeviceForExperience,
		MaxGradNorm: act.MaxGradNorm,
		LR:          act.Optim.Schedule(),
		Seed:        c.Training.Seed,
	}
	if o.OnlineFiltering {
		lc.Filter = &loop.Filter{Key: o.FilterKey, Low: o.FilterLow, High: o.FilterHigh}
	}
	if c.DivergenceInReward() {
		lc.RewardKL = &loop.RewardKL{Kind: o.DivergencePenalty, Controller: c.ControllerConfig()}
	}
	return lc
}

// trainingOf returns the gradient sum and the optimizer of model m with AdamW state opt: on the
// actor's device there, else on the host.
func (t *Trainer) trainingOf(m *vlm.Model, opt *loop.AdamW) (loop.Gradients, loop.Optimizer, error) {
	var decay []bool
	for _, p := range m.HostParams() {
		decay = append(decay, len(p.W.Shape()) >= 2) // matrices decay; biases and norms do not
	}
	if t.onDevice(m) && m == t.model && t.cfg.Worker.Actor.offloadOptimizer() { // the warm start
		return t.offloadTraining(m, opt, 0, loop.ReduceConfig{Ordered: true})
	}
	if t.onDevice(m) {
		return &deviceGradients{t: t, m: m}, &deviceOptimizer{t: t, m: m, opt: opt, decay: decay}, nil
	}
	ps := actorParams(m)
	g, err := loop.NewHostGradients(ps)
	if err != nil {
		return nil, nil, err
	}
	return hostGradients{g, t}, &loop.HostAdamW{AdamW: opt, Params: ps}, nil
}

// actorTraining returns the actor's gradient sum and optimizer: worker.actor.grad_reduce and
// fsdp.sharding_strategy choose them on the host; on the device, trainingOf's.
func (t *Trainer) actorTraining() (loop.Gradients, loop.Optimizer, error) {
	a := t.cfg.Worker.Actor
	stage, err := a.FSDP.Sharding()
	if err != nil {
		return nil, nil, err
	}
	t.wholeMoments()
	t.zero = nil
	rc := loop.ReduceConfig{Ordered: a.GradReduce == "ordered", BucketBytes: int(a.GradBucketMB * (1 << 20))}
	if t.onDevice(t.model) && a.offloadOptimizer() {
		return t.offloadTraining(t.model, t.opt, stage, rc)
	}
	if t.onDevice(t.model) || (stage == 0 && a.GradReduce == "ordered") {
		g, o, err := t.trainingOf(t.model, t.opt)
		if dg, ok := g.(*deviceGradients); ok && !rc.Ordered && t.world() > 1 {
			dg.nccl, dg.bucket = true, max(1, rc.BucketBytes/4) // NCCL between the devices
		}
		return g, o, err
	}
	ps := actorParams(t.model)
	if stage == 0 {
		g, err := loop.NewBucketedGradients(ps, rc, t.rank(), t.world())
		return g, &loop.HostAdamW{AdamW: t.opt, Params: ps}, err
	}
	o := t.opt
	zero, g, err := loop.NewShardedAdamW(ps, stage, rc, t.rank(), t.world(), o.Beta1, o.Beta2, o.Eps, o.WeightDecay)
	if err != nil {
		return nil, nil, err
	}
	if err := zero.SetMoments([]loop.MomentShard{loop.FlatMoments(o)}); err != nil {
		return nil, nil, err
	}
	zero.T = o.T
	t.zero, o.M, o.V = zero, nil, nil // the moments live sharded now
	return g, zero, nil
}

// wholeMoments gives t.opt its whole moments back (zero when they were handed to a sharded
// optimizer; a checkpoint's load fills them).
func (t *Trainer) wholeMoments() {
	if t.opt.M != nil {
		return
	}
	for _, p := range t.model.Params() {
		t.opt.M, t.opt.V = append(t.opt.M, make([]float32, p.W.Len())), append(t.opt.V, make([]float32, p.W.Len()))
	}
	t.rl = nil // the loop is rebuilt around them
}

// saveShards writes this rank's moment shard into the checkpoint directory dir (the lead's;
// "" elsewhere) with every other rank (saveMomentShards); without sharding it does nothing.
func (t *Trainer) saveShards(dir string) error {
	if t.zero == nil {
		return nil
	}
	// HostParams, not Params: reading the names and sizes must not mark a device copy stale.
	return saveMomentShards(t.ctxOrBackground(), t.comm, dir, vlmShardParams(t.model.HostParams()), t.zero.Moments())
}

// rewards are the built-in rule rewards as loop reward functions: the accuracy of the chosen
// option letter, the think format and (mdi_weight > 0) TRL-MDI's attention balance, weighted
// a : f : w and normalised to sum 1 — (a·accuracy + f·format + w·(2·balance − 1)) / (a + f + w).
func (t *Trainer) rewards() []loop.Reward[example] {
	a, f, w := t.reward.Accuracy, t.reward.Format, t.cfg.Worker.Reward.MDIWeight
	sum := a + f + w
	// Each function reads only its own check of the text (vqa.Correct, vqa.FormatOK).
	part := func(score func(text string, e example) bool) func(loop.RewardInputs[example]) ([]float64, error) {
		return func(in loop.RewardInputs[example]) ([]float64, error) {
			out := make([]float64, len(in.Prompts))
			for i, c := range in.Completions {
				if score(c.Text, in.Prompts[i]) {
					out[i] = 1
				}
			}
			return out, nil
		}
	}
	rs := []loop.Reward[example]{
		{Name: "accuracy", Weight: a / sum, Func: part(func(text string, e example) bool { return vqa.Correct(text, e.s.Answer) })},
		{Name: "format", Weight: f / sum, Func: part(func(text string, _ example) bool { return vqa.FormatOK(text) })},
	}
	if w > 0 {
		rs = append(rs, loop.Reward[example]{Name: "mdi", Weight: w / sum, Func: t.mdiReward})
	}
	return rs
}

// mdiReward is TRL-MDI's reward 2·balance − 1 of each response, from the policy's attention in
// a forward pass over the rows (each rank its share, gathered); it adds the mdi/* metrics and
// keeps the rows' statistics for the attention diagnostics.
func (t *Trainer) mdiReward(in loop.RewardInputs[example]) ([]float64, error) {
	b := &loop.Batch[example]{Prompts: in.Prompts, Completions: in.Completions, T: t.respLen}
	rows, err := t.attentionStatsOf(b)
	if err != nil {
		return nil, err
	}
	t.mdi.rows = rows
	putMDIMetrics(in.Metrics, rows, t.model.Config.Layers)
	out := make([]float64, len(rows))
	for i, s := range rows {
		out[i] = 2*s.Balance - 1
	}
	return out, nil
}

// attentionStatsOf computes each row's attention split in chunks of the experience
// micro-batch, this rank's share of the rows, and gathers the others'.
func (t *Trainer) attentionStatsOf(b *loop.Batch[example]) ([]mdiStats, error) {
	lay, err := t.newBatch(b.Prompts, b.Tokens(0, b.Len()))
	if err != nil {
		return nil, err
	}
	micro := t.cfg.Worker.Actor.MicroBatchSizePerDeviceForExperience
	lo, hi := t.shard(b.Len())
	var out []mdiStats
	for s := lo; s < hi; s += micro {
		e := min(s+micro, hi)
		ml, act, err := t.forwardResponse(t.model, lay, tensorRows(lay.images, s, e), s, e)
		if err != nil {
			return nil, err
		}
		n := make([]int, e-s)
		for r := range n {
			n[r] = len(lay.resp[s+r])
		}
		sums, err := act.ResponseAttention(lay.plen[s:e], n, len(layerRanges(act.Layers())))
		layers := act.Layers()
		ml.release()
		act.Release()
		if err != nil {
			return nil, fmt.Errorf("attention statistics: %w", err)
		}
		for r := range n {
			out = append(out, t.attentionStats(sums[r], layers, n[r]))
		}
	}
	all, err := collective.AllGatherValues(t.ctxOrBackground(), t.comm, out)
	if err != nil {
		return nil, fmt.Errorf("attention statistics: %w", err)
	}
	return all, nil
}

// tensorRows is rows [lo, hi) of x, which the caller knows to be in range.
func tensorRows(x *tensor.Tensor, lo, hi int) *tensor.Tensor { return tensor.Must(x.Rows(lo, hi)) }
