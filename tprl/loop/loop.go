package loop

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
)

// Critic is the value model of advantage.EstimatorGAE.
type Critic[P any] interface {
	// Values writes the value of each response position of b's rows into dst (float32 [B, T],
	// host memory).
	Values(b *Batch[P], dst *tensor.Tensor) error
	// Update trains the critic toward returns from the values it predicted (host [B, T], with
	// the response mask), each rank of comm on its share of the rows, and returns its metrics
	// (critic/vf_loss, …).
	Update(ctx context.Context, comm collective.Comm, b *Batch[P], mask, values, returns *tensor.Tensor) (map[string]float64, error)
}

// Parts are what the loop trains with. Policy, Rewards and Data are required.
type Parts[P any] struct {
	Policy Policy[P]
	// Reference is the frozen policy of the KL loss and of the divergence in the reward.
	Reference Scorer[P]
	// Critic is needed by the GAE estimator.
	Critic  Critic[P]
	Rewards []Reward[P]
	Data    Data[P]
	// Optimizer and Gradients default, for a Trainable policy, to AdamW (β 0.9, 0.999, eps
	// 1e-8, weight decay 0.01) and HostGradients on its parameters.
	Optimizer Optimizer
	Gradients Gradients
	// Comm makes the loop one rank of a data-parallel group (nil: one rank). Every rank holds
	// the same Parts and calls Step together.
	Comm collective.Comm
}

// Loop is an RL trainer: each Step samples rollouts, scores them, and takes the policy's
// optimizer steps.
type Loop[P any] struct {
	cfg   Config
	parts Parts[P]
	ctl   divergence.Controller
	state State
}

// State is what a checkpoint must keep of the loop itself for an exact resume (with the
// policy's weights, the optimizer's state and the data position, which their owners keep).
type State struct {
	// Step is the number of RL steps taken; Skipped the optimizer steps skipped on a
	// non-finite gradient norm.
	Step, Skipped int
	// RewardKLCoef is the divergence controller's current coefficient.
	RewardKLCoef float64
}

// New checks cfg and parts and returns a loop at step 0.
func New[P any](cfg Config, parts Parts[P]) (*Loop[P], error) {
	if parts.Comm != nil {
		cfg.Update.WorldSize = parts.Comm.Size()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if parts.Policy == nil || parts.Data == nil {
		return nil, fmt.Errorf("loop: Parts.Policy and Parts.Data are required")
	}
	if err := validateRewards(parts.Rewards); err != nil {
		return nil, err
	}
	if parts.Reference == nil && (cfg.RewardKL != nil || cfg.Update.KLLoss != nil) {
		return nil, fmt.Errorf("loop: the KL loss and the divergence in the reward need Parts.Reference")
	}
	if w, rows := cfg.Update.WorldSize, cfg.MiniBatchPrompts*cfg.Sampling.N; w > rows {
		return nil, fmt.Errorf("loop: %d ranks for mini-batches of %d rows: every rank needs at least one row", w, rows)
	}
	if parts.Critic == nil && cfg.Advantage.Estimator == advantage.EstimatorGAE {
		return nil, fmt.Errorf("loop: the gae estimator needs Parts.Critic")
	}
	if f := cfg.Filter; f != nil && f.Key != "overall" {
		found := false
		for _, r := range parts.Rewards {
			found = found || r.Name == f.Key
		}
		if !found {
			return nil, fmt.Errorf("loop: Filter.Key %q is neither a reward's name nor overall", f.Key)
		}
	}
	if parts.Optimizer == nil || parts.Gradients == nil {
		tr, ok := parts.Policy.(Trainable)
		if !ok {
			return nil, fmt.Errorf("loop: the policy does not implement Trainable: give Parts.Optimizer and Parts.Gradients")
		}
		if parts.Gradients == nil {
			g, err := NewHostGradients(tr.Params())
			if err != nil {
				return nil, err
			}
			parts.Gradients = g
		}
		if parts.Optimizer == nil {
			opt, err := NewHostAdamW(tr.Params(), 0.9, 0.999, 1e-8, 0.01)
			if err != nil {
				return nil, err
			}
			parts.Optimizer = opt
		}
	}
	l := &Loop[P]{cfg: cfg, parts: parts}
	if k := cfg.RewardKL; k != nil {
		l.state.RewardKLCoef = k.Controller.Coef
	}
	return l, l.Restore(l.state)
}

// State returns the loop's state.
func (l *Loop[P]) State() State {
	s := l.state
	if l.ctl != nil {
		s.RewardKLCoef = l.ctl.Coef()
	}
	return s
}

// Restore sets the loop's state (from a checkpoint).
func (l *Loop[P]) Restore(s State) error {
	if s.Step < 0 || s.Skipped < 0 {
		return fmt.Errorf("loop: state step %d, skipped %d: want >= 0", s.Step, s.Skipped)
	}
	if k := l.cfg.RewardKL; k != nil {
		cc := k.Controller
		cc.Coef = s.RewardKLCoef
		ctl, err := divergence.NewController(cc)
		if err != nil {
			return err
		}
		l.ctl = ctl
	}
	l.state = s
	return nil
}

// Config is the loop's configuration (WorldSize set from Parts.Comm).
func (l *Loop[P]) Config() Config { return l.cfg }

// OptimizerSteps is the number of optimizer steps of the whole run: the schedule's length.
func (l *Loop[P]) OptimizerSteps() int {
	return l.cfg.Steps * (l.cfg.Prompts / l.cfg.MiniBatchPrompts) * l.cfg.PPOEpochs
}

func (l *Loop[P]) world() int {
	if l.parts.Comm == nil {
		return 1
	}
	return l.parts.Comm.Size()
}

func (l *Loop[P]) shard(n int) (lo, hi int) {
	if l.parts.Comm == nil {
		return 0, n
	}
	return collective.Shard(n, l.parts.Comm.Rank(), l.parts.Comm.Size())
}

// rowRNG is the random source of one sampled row: a function of (seed, step, round, row) only,
// so samples do not depend on the number of ranks or on which rows share a batch.
func (l *Loop[P]) rowRNG(round, row int) *rand.Rand {
	return rand.New(rand.NewPCG(l.cfg.Seed^0x726f6c6c6f7574, uint64(l.state.Step)<<40|uint64(round)<<32|uint64(row)))
}

// StepResult is what one step produced. Its per-token tensors live on the policy's backend
// until Release.
type StepResult[P any] struct {
	// Metrics are the step's, under the names of verl and EasyR1 (reward/*, actor/*,
	// critic/*, filter/*, timing_s/*, perf/*).
	Metrics map[string]float64
	// Batch is the step's rows, prompts repeated Sampling.N times with their completions.
	Batch *Batch[P]
	// Rewards is each row's weighted reward and RewardParts each function's scores.
	Rewards     []float64
	RewardParts map[string][]float64
	// ResponseMask, OldLogProbs, Entropy, PerceptionScore (nil without Config.Perturb),
	// Advantages and LossAdvantages (the advantages the loss used: shaped when trajectory
	// shaping is on) are float32 [B, T].
	ResponseMask, OldLogProbs, Entropy, PerceptionScore, Advantages, LossAdvantages *tensor.Tensor

	scratch *tensor.Scratch
}

// Release frees the step's device tensors (nothing on the host).
func (r *StepResult[P]) Release() {
	if r != nil && r.scratch != nil {
		_ = r.scratch.Release()
	}
}

// Step takes one RL step:
//
//  1. rollout: Sampling.N completions per prompt (with online filtering, more prompts until
//     the step has Config.Prompts groups inside the band), scored by the reward functions;
//  2. old log-probs and entropies of the sampled tokens under the rollout policy;
//  3. log-probs with the perturbed images and the perception score (with Config.Perturb);
//  4. reference log-probs, and the divergence in the reward (Config.RewardKL);
//  5. advantages over each prompt's group (the critic's values and update with GAE; greedy
//     baselines with ReMax);
//  6. per mini-batch of Config.MiniBatchPrompts prompts: tprl's token masks, shaping and loss
//     per micro-batch, the policy's backward, the gradient sum over micro-batches and ranks,
//     and one optimizer step.
//
// With a Comm, each rank samples and scores its contiguous share of the rows and the results
// are all-gathered; rewards, advantages and every statistic are computed on the whole batch on
// every rank, so they equal one rank's; in the update each rank takes its share of every
// mini-batch.
func (l *Loop[P]) Step(ctx context.Context) (res *StepResult[P], err error) {
	if l == nil {
		return nil, fmt.Errorf("loop: Step of a nil Loop (use New)")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	start := time.Now()
	cfg, pol := l.cfg, l.parts.Policy
	met := map[string]float64{}
	st := tensor.NewScratch(pol.Backend())
	defer func() {
		if err != nil {
			_ = st.Release()
			err = fmt.Errorf("step %d: %w", l.state.Step+1, err)
		}
	}()

	// 1. Rollout and rewards.
	b, sc, err := l.rollout(ctx, met)
	if err != nil {
		return nil, err
	}
	B, T := b.Len(), b.T
	tRollout := time.Since(start)
	lengths := make([]int, B)
	maskHost := f32(B, T)
	mh, _ := maskHost.Float32s()
	var respTokens float64
	for i, c := range b.Completions {
		lengths[i] = len(c.Tokens)
		for j := range lengths[i] {
			mh[i*T+j] = 1
		}
		respTokens += float64(lengths[i])
	}
	mask, err := st.Put(maskHost)
	if err != nil {
		return nil, err
	}

	// 2. Old log-probs and entropies.
	oldLogp, entropy, err := float32x2(st, B, T)
	if err != nil {
		return nil, err
	}
	if err := l.score(ctx, pol, b, Input{}, oldLogp, entropy); err != nil {
		return nil, fmt.Errorf("old log-probs: %w", err)
	}

	// The rewards at each response's last token (token_level_rewards).
	rewardsHost := f32(B, T)
	rw, _ := rewardsHost.Float32s()
	for i, n := range lengths {
		if n > 0 {
			rw[i*T+n-1] = float32(sc.overall[i])
		}
	}
	sc.put(met)
	met["response_length/mean"] = respTokens / float64(B)
	rewards, err := st.Put(rewardsHost)
	if err != nil {
		return nil, err
	}

	// 3. Perturbed log-probs and the perception score.
	var score *tensor.Tensor
	if cfg.Perturb != nil {
		var augLogp *tensor.Tensor
		if augLogp, score, err = float32x2(st, B, T); err != nil {
			return nil, err
		}
		if err := l.score(ctx, pol, b, Input{Perturb: cfg.Perturb, Seed: cfg.Seed}, augLogp, nil); err != nil {
			return nil, fmt.Errorf("perturbed log-probs: %w", err)
		}
		if err := divergence.PerceptionScore(score, oldLogp, augLogp); err != nil {
			return nil, err
		}
	}

	// 4. Reference log-probs; the divergence in the reward.
	var refLogp *tensor.Tensor
	if ref := l.parts.Reference; ref != nil {
		if refLogp, err = st.New(tensor.Float32, B, T); err != nil {
			return nil, err
		}
		if err := l.score(ctx, ref, b, Input{}, refLogp, nil); err != nil {
			return nil, fmt.Errorf("reference log-probs: %w", err)
		}
	}
	if k := cfg.RewardKL; k != nil {
		kl, err := divergence.PenalizeRewards(divergence.PenalizedRewards{Rewards: rewards, LogProbs: oldLogp,
			RefLogProbs: refLogp, ResponseMask: mask, Lengths: lengths, Kind: k.Kind, Coef: l.ctl.Coef()})
		if err != nil {
			return nil, fmt.Errorf("reward divergence: %w", err)
		}
		met["actor/reward_kl_penalty"], met["actor/reward_kl_penalty_coeff"] = kl, l.ctl.Coef()
		l.ctl.Update(kl, B)
	}

	// 5. Advantages over each prompt's group.
	adv, err := l.advantages(ctx, st, b, rewards, mask, maskHost, met)
	if err != nil {
		return nil, err
	}

	// 6. The policy update.
	tUpdate := time.Now()
	shaped, err := l.update(ctx, st, b, mask, oldLogp, score, refLogp, adv, met)
	if err != nil {
		return nil, err
	}
	l.state.Step++

	el := time.Since(start)
	met["perf/time_per_step"] = el.Seconds()
	met["timing_s/gen"] = tRollout.Seconds()
	met["timing_s/update_actor"] = time.Since(tUpdate).Seconds()
	met["perf/samples_per_second"] = float64(B) / el.Seconds()
	met["perf/response_tokens_per_second"] = respTokens / el.Seconds()
	return &StepResult[P]{Metrics: met, Batch: b, Rewards: sc.overall, RewardParts: sc.parts,
		ResponseMask: mask, OldLogProbs: oldLogp, Entropy: entropy, PerceptionScore: score,
		Advantages: adv, LossAdvantages: shaped, scratch: st}, nil
}

// rollout samples the step's rows and scores them; see Filter for online filtering.
func (l *Loop[P]) rollout(ctx context.Context, met map[string]float64) (*Batch[P], scored, error) {
	cfg := l.cfg
	want, n := cfg.Prompts, cfg.Sampling.N
	var keep, rej struct {
		prompts []P
		comps   []Completion
		sc      scored
	}
	generated, accepted, rounds, maxRounds := 0, 0, 0, 1
	if f := cfg.Filter; f != nil {
		maxRounds = f.MaxRounds
		if maxRounds == 0 {
			maxRounds = 8
		}
	}
	for len(keep.prompts) < want*n && rounds < maxRounds {
		rounds++
		prompts := l.parts.Data.Next(want)
		if len(prompts) != want {
			return nil, scored{}, fmt.Errorf("rollout: the data gave %d prompts, want %d", len(prompts), want)
		}
		rows := make([]P, 0, len(prompts)*n)
		for _, p := range prompts {
			for range n {
				rows = append(rows, p)
			}
		}
		comps, err := l.generate(ctx, rows, rounds-1)
		if err != nil {
			return nil, scored{}, fmt.Errorf("rollout: %w", err)
		}
		sc, err := scoreRows(l.parts.Rewards, l.state.Step, rows, comps)
		if err != nil {
			return nil, scored{}, err
		}
		for g := range prompts {
			lo, hi := g*n, (g+1)*n
			generated++
			ok := true
			if f := cfg.Filter; f != nil {
				var m float64
				for i := lo; i < hi; i++ {
					m += sc.part(f.Key, i)
				}
				m /= float64(n)
				ok = m > f.Low && m < f.High
			}
			if ok {
				accepted++
			}
			dst := &keep
			if !ok {
				dst = &rej
			} else if len(keep.prompts) >= want*n {
				continue
			}
			dst.prompts, dst.comps = append(dst.prompts, rows[lo:hi]...), append(dst.comps, comps[lo:hi]...)
			dst.sc.appendRows(sc, lo, hi)
		}
		if rounds == 1 {
			keep.sc.metrics = sc.metrics
		}
	}
	if cfg.Filter != nil {
		filled := 0
		for len(keep.prompts) < want*n {
			keep.prompts, keep.comps = append(keep.prompts, rej.prompts[:n]...), append(keep.comps, rej.comps[:n]...)
			keep.sc.appendRows(rej.sc, 0, n)
			rej.prompts, rej.comps = rej.prompts[n:], rej.comps[n:]
			rej.sc = rej.sc.tail(n)
			filled++
		}
		met["filter/kept_fraction"] = float64(accepted) / float64(generated)
		met["filter/rounds"] = float64(rounds)
		met["filter/filled_groups"] = float64(filled)
	}
	B := len(keep.prompts)
	b := &Batch[P]{Prompts: keep.prompts, Completions: keep.comps, IDs: make([]uint64, B), T: cfg.Sampling.MaxTokens,
		Temperature: float32(cfg.Sampling.Temperature), Step: l.state.Step}
	if b.Temperature == 0 {
		b.Temperature = 1
	}
	for i := range b.IDs {
		b.IDs[i] = uint64(l.state.Step)*uint64(B) + uint64(i)
	}
	return b, keep.sc, nil
}

// generate samples this rank's share of rows with their own random sources and gathers every
// rank's completions.
func (l *Loop[P]) generate(ctx context.Context, rows []P, round int) ([]Completion, error) {
	s := l.cfg.Sampling
	lo, hi := l.shard(len(rows))
	var out []Completion
	if hi > lo {
		var rngs []*rand.Rand
		if s.Temperature > 0 {
			rngs = make([]*rand.Rand, hi-lo)
			for i := range rngs {
				rngs[i] = l.rowRNG(round, lo+i)
			}
		}
		var err error
		if out, err = l.parts.Policy.Generate(rows[lo:hi], s, rngs); err != nil {
			return nil, err
		}
		if len(out) != hi-lo {
			return nil, fmt.Errorf("the policy returned %d completions for %d prompts", len(out), hi-lo)
		}
		for i, c := range out {
			if len(c.Tokens) > s.MaxTokens {
				return nil, fmt.Errorf("the policy returned %d tokens for row %d, more than Sampling.MaxTokens %d", len(c.Tokens), lo+i, s.MaxTokens)
			}
		}
	}
	return collective.AllGatherValues(ctx, l.parts.Comm, out)
}

// score fills logp (and ent) [B, T] with sc's log-probs of b: this rank's rows in micro-batches
// of Config.ScoreRows, then the other ranks' rows gathered.
func (l *Loop[P]) score(ctx context.Context, sc Scorer[P], b *Batch[P], in Input, logp, ent *tensor.Tensor) error {
	lo, hi := l.shard(b.Len())
	for _, r := range l.microBatches(b, lo, hi, l.cfg.ScoreRows) {
		s, e := r[0], r[1]
		lp, err := logp.Rows(s, e)
		if err != nil {
			return err
		}
		var en *tensor.Tensor
		if ent != nil {
			if en, err = ent.Rows(s, e); err != nil {
				return err
			}
		}
		if err := sc.LogProbs(b, s, e, in, lp, en); err != nil {
			return err
		}
	}
	for _, x := range []*tensor.Tensor{logp, ent} {
		if x != nil {
			if err := collective.AllGatherRows(ctx, l.parts.Comm, lo, hi, x); err != nil {
				return err
			}
		}
	}
	return nil
}

// advantages computes the advantages (and returns) of the step; with GAE the critic predicts
// the values and is updated toward the returns, with ReMax the baselines are the rewards of
// greedy completions.
func (l *Loop[P]) advantages(ctx context.Context, st *tensor.Scratch, b *Batch[P], rewards, mask, maskHost *tensor.Tensor, met map[string]float64) (*tensor.Tensor, error) {
	B, T, n := b.Len(), b.T, l.cfg.Sampling.N
	index := make([]int32, B)
	for i := range index {
		index[i] = int32(i / n)
	}
	var err error
	in := advantage.Inputs{Rewards: rewards, ResponseMask: mask}
	if in.Index, err = st.Put(tensor.Must(tensor.FromInt32(index, B))); err != nil {
		return nil, err
	}
	var values *tensor.Tensor // the critic's, on the host
	switch l.cfg.Advantage.Estimator {
	case advantage.EstimatorGAE:
		values = f32(B, T)
		if err := l.parts.Critic.Values(b, values); err != nil {
			return nil, fmt.Errorf("critic values: %w", err)
		}
		if in.Values, err = st.Put(values); err != nil {
			return nil, err
		}
	case advantage.EstimatorReMax:
		bl, err := l.greedyBaselines(b)
		if err != nil {
			return nil, err
		}
		if in.Baselines, err = st.Put(bl); err != nil {
			return nil, err
		}
	}
	adv, returns, err := float32x2(st, B, T)
	if err != nil {
		return nil, err
	}
	if err := advantage.ComputeWithReturns(adv, returns, in, l.cfg.Advantage); err != nil {
		return nil, fmt.Errorf("advantages: %w", err)
	}
	if l.cfg.Advantage.Estimator == advantage.EstimatorGAE {
		// verl updates the critic before the actor, on the same batch; the returns come to the
		// host for it.
		rh, err := tensor.To(tensor.CPU(), returns)
		if err != nil {
			return nil, err
		}
		cm, err := l.parts.Critic.Update(ctx, l.parts.Comm, b, maskHost, values, rh)
		if err != nil {
			return nil, fmt.Errorf("critic: %w", err)
		}
		for k, v := range cm {
			met[k] = v
		}
		vm, _ := tensor.MaskedMean(values, maskHost)
		rm, _ := tensor.MaskedMean(rh, maskHost)
		met["critic/values/mean"], met["critic/returns/mean"] = float64(vm), float64(rm)
	}
	return adv, nil
}

// greedyBaselines is ReMax's baseline: the reward of each prompt's greedy completion (one
// per group, shared by its rows), on every rank.
func (l *Loop[P]) greedyBaselines(b *Batch[P]) (*tensor.Tensor, error) {
	n := l.cfg.Sampling.N
	prompts := make([]P, 0, b.Len()/n)
	for i := 0; i < b.Len(); i += n {
		prompts = append(prompts, b.Prompts[i])
	}
	s := l.cfg.Sampling
	s.Temperature = 0
	comps, err := l.parts.Policy.Generate(prompts, s, nil)
	if err != nil {
		return nil, fmt.Errorf("remax baseline: %w", err)
	}
	sc, err := scoreRows(l.parts.Rewards, l.state.Step, prompts, comps)
	if err != nil {
		return nil, fmt.Errorf("remax baseline: %w", err)
	}
	bl := make([]float32, b.Len())
	for i := range bl {
		bl[i] = float32(sc.overall[i/n])
	}
	return tensor.FromFloat32(bl, len(bl))
}

func f32(shape ...int) *tensor.Tensor {
	return tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, shape...))
}

// float32x2 returns two zeroed float32 tensors of one shape from sc.
func float32x2(sc *tensor.Scratch, shape ...int) (*tensor.Tensor, *tensor.Tensor, error) {
	x, err := sc.New(tensor.Float32, shape...)
	if err != nil {
		return nil, nil, err
	}
	y, err := sc.New(tensor.Float32, shape...)
	return x, y, err
}

// isFinite reports whether x is neither NaN nor infinite.
func isFinite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
