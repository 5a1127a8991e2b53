package main

import (
	"fmt"
	"math"
	"time"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/examples/internal/vlm"
	"github.com/mtrl-go/mtrl/examples/internal/vqa"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
)

// StepResult is what one RL step reports: the metrics line and the rollouts (for rollouts.md).
type StepResult struct {
	Metrics  Metrics
	Rollouts []Rollout
	MDI      []mdiStats // per row, with the MDI reward
}

// Rollout is one sampled response with what the step computed about its tokens.
type Rollout struct {
	Sample      vqa.Sample
	Tokens      []string
	Reward      vqa.Reward
	Advantage   float32
	Perception  []bool    // selected by the perception mask
	Visual      []bool    // labelled visual by the task
	Score       []float32 // perception score per token
	ScaleFactor float32   // trajectory shaping factor (1 when shaping is off)
}

// Step runs one VPPO step; it is the whole algorithm, top to bottom:
//
//  1. rollout: n responses per prompt, sampled with the current policy (online filtering keeps
//     the groups whose mean reward is inside the band, sampling more until the batch is full);
//  2. old log-probs (and entropies) of the sampled tokens, and the attention of the MDI reward;
//  3. rewards: accuracy of the chosen letter, think-format and MDI balance, at each response's
//     last token;
//  4. log-probs with perturbed images (random patch blackening, seeded per row);
//  5. reference log-probs (the frozen warm-started policy), and the divergence in the reward;
//  6. advantages (GRPO by default; the groups are the prompts; gae with the critic's values,
//     which is then updated toward the returns);
//  7. per mini-batch: tprl token masks and trajectory shaping, the PPO loss per micro-batch with
//     global token scaling, d loss / d log-probs → d loss / d logits → the model's backward;
//  8. per mini-batch: gradient clipping and an AdamW step (skipped on a non-finite norm).
func (t *Trainer) Step() (*StepResult, error) {
	start := time.Now()
	cfg, act, ro := t.cfg, t.cfg.Worker.Actor, t.cfg.Worker.Rollout
	n := ro.N
	temp := float32(ro.Temperature)
	met := Metrics{}
	f32 := func(shape ...int) *tensor.Tensor {
		return tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, shape...))
	}
	// The step's per-token tensors [B, T] live on the actor's backend: with
	// worker.actor.device=cuda they stay on the device, and only scalars, per-row values and
	// the sampled token ids come back to the host (README "The GPU trainer").
	st := t.newStepTensors()
	defer st.release()

	// 1. Rollout: each prompt repeated n times (rows of a group are adjacent), sampled together;
	// with online filtering, only groups whose mean reward lies inside the band are kept, and
	// more prompts are sampled until the step has its rollout_batch_size groups.
	exs, responses, scores, err := t.rollout(met)
	if err != nil {
		return nil, err
	}
	B, T := len(exs), t.respLen
	b, err := t.newBatch(exs, responses)
	if err != nil {
		return nil, err
	}
	tRollout := time.Since(start)

	// 2. Old log-probs and entropies of the sampled tokens under the rollout policy.
	xmicro := act.MicroBatchSizePerDeviceForExperience
	mask, err := st.put(b.mask)
	if err != nil {
		return nil, err
	}
	oldLogp, entropy, err := st.float32x2(B, T)
	if err != nil {
		return nil, err
	}
	// The same pass gives the attention of the MDI reward (TRL-MDI), when it has a weight.
	var mdi []mdiStats
	var onAct func(*vlm.Activations, int, int) error
	if t.cfg.Worker.Reward.MDIWeight > 0 {
		mdi = make([]mdiStats, B)
		onAct = func(a *vlm.Activations, lo, hi int) error {
			n := make([]int, hi-lo)
			for r := range n {
				n[r] = len(b.resp[lo+r])
			}
			sums, err := a.ResponseAttention(b.plen[lo:hi], n, len(layerRanges(a.Layers())))
			if err != nil {
				return fmt.Errorf("attention statistics: %w", err)
			}
			for r := lo; r < hi; r++ {
				mdi[r] = t.attentionStats(sums[r-lo], a.Layers(), n[r-lo])
			}
			return nil
		}
	}
	if err := t.shardedLogProbs(t.model, b, b.images, oldLogp, entropy, xmicro, temp, onAct); err != nil {
		return nil, fmt.Errorf("old log-probs: %w", err)
	}
	if mdi != nil { // gatherValues returns the rows as they are on one rank
		lo, hi := t.shard(B)
		if mdi, err = gatherValues(t, mdi[lo:hi]); err != nil {
			return nil, fmt.Errorf("attention statistics: %w", err)
		}
	}

	// 3. Rewards: the response's score at its last token, 0 elsewhere (token_level_rewards).
	rewardsHost := f32(B, T)
	rw, _ := rewardsHost.Float32s()
	var acc, format, overall, respTokens float64
	for i := range exs {
		if mdi != nil {
			scores[i] = t.withMDI(scores[i], mdi[i].Balance)
		}
		if l := len(b.resp[i]); l > 0 {
			rw[i*T+l-1] = float32(scores[i].Overall)
		}
		acc, format, overall = acc+scores[i].Accuracy, format+scores[i].Format, overall+scores[i].Overall
		respTokens += float64(len(b.resp[i]))
	}
	met["reward/overall"], met["reward/accuracy"], met["reward/format"] = overall/float64(B), acc/float64(B), format/float64(B)
	met["response_length/mean"] = respTokens / float64(B)
	rewards, err := st.put(rewardsHost) // uploaded once: one score per response, at its last token
	if err != nil {
		return nil, err
	}
	if mdi != nil {
		putMDIMetrics(met, mdi, t.model.Config.Layers)
	}

	// 4. Log-probs with perturbed images: every row's image perturbed with its own sample id.
	b.ids = make([]uint64, B)
	for i := range b.ids {
		b.ids[i] = uint64(t.step)*uint64(B) + uint64(i)
	}
	augImages := tensor.Must(tensor.NewLike(b.images, tensor.Uint8))
	if err := t.pert.ApplyBatch(augImages, b.images, cfg.Training.Seed, b.ids); err != nil {
		return nil, fmt.Errorf("perturb: %w", err)
	}
	augLogp, score, err := st.float32x2(B, T)
	if err != nil {
		return nil, err
	}
	if err := t.shardedLogProbs(t.model, b, augImages, augLogp, nil, xmicro, temp, nil); err != nil {
		return nil, fmt.Errorf("perturbed log-probs: %w", err)
	}
	// The perception score, once per batch: the update's masks and shaping and the diagnostics
	// read row views of it.
	if err := divergence.PerceptionScore(score, oldLogp, augLogp); err != nil {
		return nil, err
	}

	// 5. Reference log-probs for the KL loss.
	var refLogp *tensor.Tensor
	if t.ref != nil {
		if refLogp, err = st.float32(B, T); err != nil {
			return nil, err
		}
		if err := t.shardedLogProbs(t.ref, b, b.images, refLogp, nil, xmicro, temp, nil); err != nil {
			return nil, fmt.Errorf("reference log-probs: %w", err)
		}
	}

	// 5b. The divergence in the reward (EasyR1's apply_kl_penalty): token rewards minus
	// coef * penalty(old, ref), the coefficient from the fixed or adaptive controller.
	if t.cfg.DivergenceInReward() {
		kl, err := t.rewardPenalty(st, b, rewards, oldLogp, refLogp, mask)
		if err != nil {
			return nil, err
		}
		met["actor/reward_kl_penalty"], met["actor/reward_kl_penalty_coeff"] = kl, t.ctl.Coef()
		t.ctl.Update(kl, B)
	}

	// 6. Advantages over each prompt's group of n responses.
	index := make([]int32, B)
	for i := range index {
		index[i] = int32(i / n)
	}
	in := advantage.Inputs{Rewards: rewards, ResponseMask: mask}
	if in.Index, err = st.put(tensor.Must(tensor.FromInt32(index, B))); err != nil {
		return nil, err
	}
	var values *tensor.Tensor // the critic's, on the host
	switch t.adv.Estimator {
	case advantage.EstimatorGAE:
		values = f32(B, T)
		if err := t.values(values, b, xmicro); err != nil {
			return nil, fmt.Errorf("critic values: %w", err)
		}
		if in.Values, err = st.put(values); err != nil {
			return nil, err
		}
	case advantage.EstimatorReMax:
		bl, err := t.greedyBaselines(b, exs)
		if err != nil {
			return nil, err
		}
		if in.Baselines, err = st.put(bl); err != nil {
			return nil, err
		}
	}
	adv, returns, err := st.float32x2(B, T)
	if err != nil {
		return nil, err
	}
	if err := advantage.ComputeWithReturns(adv, returns, in, t.adv); err != nil {
		return nil, fmt.Errorf("advantages: %w", err)
	}
	// 6b. The critic's update toward the returns (verl updates it before the actor, on the
	// same batch). The critic runs on the host: the returns come down for it.
	if t.critic != nil {
		if returns, err = st.host(returns); err != nil {
			return nil, err
		}
		cm, err := t.updateCritic(b, values, returns)
		if err != nil {
			return nil, err
		}
		for k, v := range cm {
			met[k] = v
		}
		vm, _ := tensor.MaskedMean(values, b.mask)
		rm, _ := tensor.MaskedMean(returns, b.mask)
		met["critic/values/mean"], met["critic/returns/mean"] = float64(vm), float64(rm)
	}

	// 7–8. The PPO update: mini-batches of global_batch_size prompts (all their rows), each split
	// into micro-batches; one optimizer step per mini-batch. With W ranks each takes a
	// contiguous 1/W of every mini-batch (whole prompt groups), with the token count and the
	// shaping statistics of the whole mini-batch, and the gradients are all-reduced.
	miniRows := act.GlobalBatchSize * n
	slo, shi := t.shard(miniRows)
	t.commTime, t.commBytes = 0, 0
	micro := act.MicroBatchSizePerDeviceForUpdate
	actor := map[string][]float64{}
	var gradNorms, lrs []float64
	shaped, err := st.float32(B, T) // the advantages the loss used (shaped when trajectory shaping is on)
	if err != nil {
		return nil, err
	}
	tUpdate := time.Now()
	// What each mini-batch's shards need from the whole of it, once for every PPO epoch.
	var totals []miniBatchTotals
	for mlo := 0; mlo < B; mlo += miniRows {
		g, err := t.globalMiniBatch(tensor.Must(mask.Rows(mlo, mlo+miniRows)), tensor.Must(score.Rows(mlo, mlo+miniRows)))
		if err != nil {
			return nil, fmt.Errorf("update: %w", err)
		}
		totals = append(totals, g)
	}
	for range act.PPOEpochs {
		for mlo := 0; mlo < B; mlo += miniRows {
			mhi := mlo + miniRows
			rows := func(x *tensor.Tensor) *tensor.Tensor {
				if x == nil {
					return nil
				}
				return tensor.Must(x.Rows(mlo, mhi))
			}
			var lossRef *tensor.Tensor
			global := totals[mlo/miniRows]
			local := func(x *tensor.Tensor) *tensor.Tensor {
				if x == nil {
					return nil
				}
				return tensor.Must(x.Rows(mlo+slo, mlo+shi))
			}
			if t.update.KLLoss != nil {
				lossRef = local(refLogp)
			}
			upd, err := t.update.Prepare(tprl.MiniBatch{ResponseMask: local(mask), OldLogProbs: local(oldLogp),
				PerceptionScore: local(score), RefLogProbs: lossRef, Advantages: local(adv),
				GlobalTokens: global.tokens, ShapingStats: global.stats})
			if err != nil {
				return nil, fmt.Errorf("update: %w", err)
			}
			t.model.ZeroGrad()
			if testRankFail != nil {
				if err := testRankFail(t.rank(), t.step+1); err != nil {
					return nil, err
				}
			}
			for lo := mlo + slo; lo < mlo+shi; lo += micro {
				hi := lo + micro
				// Forward: the current policy's log-probs and entropies of the micro-batch.
				// (With worker.actor.device=cuda the logits, the log-probs, entropies, the loss's
				// gradient and d loss / d logits all stay on the device.)
				ml, record, err := t.forwardResponse(t.model, b, b.images, lo, hi)
				if err != nil {
					return nil, err
				}
				var logp, ent, grad *tensor.Tensor
				for _, p := range []**tensor.Tensor{&logp, &ent, &grad} {
					if *p, err = ml.perToken(); err != nil {
						return nil, err
					}
				}
				if err := ml.logProbs(logp, ent, temp); err != nil {
					return nil, err
				}
				// Loss and d loss / d log-probs: token masks, shaping, clipped objective, scaling.
				mr, err := upd.MicroBatch(grad, tprl.MicroInputs{LogProbs: logp, Entropy: ent}, lo-mlo-slo, hi-mlo-slo)
				if err != nil {
					return nil, fmt.Errorf("update: %w", err)
				}
				err = tensor.CopyInto(tensor.Must(shaped.Rows(lo, hi)), mr.Advantages)
				if rerr := mr.Release(); err == nil {
					err = rerr
				}
				if err != nil {
					return nil, err
				}
				// Back to the logits, then through the model.
				dlogits, err := ml.dLogits(grad, temp)
				if err != nil {
					return nil, err
				}
				err = t.backwardResponse(t.model, b, record, dlogits, lo, hi)
				ml.release()
				record.Release()
				if err != nil {
					return nil, err
				}
				if err := t.collectGrad(t.model); err != nil {
					return nil, err
				}
			}
			if err := t.reduceGrads(t.model, 1/float32(t.world())); err != nil {
				return nil, err
			}
			if err := t.gatherRows(slo, shi, rows(shaped)); err != nil {
				return nil, err
			}
			lr := act.Optim.LRAt(t.opt.T, t.optimizerSteps())
			lrs = append(lrs, lr)
			norm, err := t.optimizerStep(t.model, t.opt, t.decay, lr, act.MaxGradNorm)
			if err != nil {
				return nil, err
			}
			gradNorms = append(gradNorms, norm)
			um, err := t.gatherMetrics(upd.Metrics)
			if err != nil {
				return nil, err
			}
			for k, v := range um {
				actor[k] = append(actor[k], mean(v))
			}
			if err := upd.Release(); err != nil {
				return nil, err
			}
		}
	}
	t.step++
	for k, v := range actor {
		met[k] = mean(v)
	}
	met["actor/grad_norm"] = mean(gradNorms)
	met["actor/lr"] = mean(lrs)
	met["actor/skipped_steps"] = float64(t.skipped)

	// Perception diagnostics: the masks of the whole batch against the task's visual labels.
	res, pm, err := t.diagnostics(st, b, exs, mask, score, entropy, met)
	if err != nil {
		return nil, err
	}
	for i := range res {
		res[i].Reward = scores[i]
	}
	// The per-token records of rollouts.md: on a device they come down only for a step that
	// writes them.
	if !st.device() || t.rolloutDetail {
		if err := t.rolloutTokens(st, b, res, pm, score, adv, shaped); err != nil {
			return nil, err
		}
	}

	el := time.Since(start)
	var tokens float64
	for i := range B {
		tokens += float64(b.plen[i] + len(b.resp[i]))
	}
	// verl's and the seeds' names (perf/throughput is per device).
	met["perf/time_per_step"] = el.Seconds()
	if t.world() > 1 {
		met["perf/allreduce_s"] = t.commTime.Seconds()
		met["perf/allreduce_bytes"] = t.commBytes
	}
	met["timing_s/gen"] = tRollout.Seconds()
	met["timing_s/update_actor"] = time.Since(tUpdate).Seconds()
	met["perf/tokens_per_second"] = tokens / el.Seconds()
	met["perf/throughput"] = tokens / el.Seconds() / float64(t.world())
	met["perf/samples_per_second"] = float64(B) / el.Seconds()
	met["perf/response_tokens_per_second"] = respTokens / el.Seconds()
	if v, ok := met["actor/ppo_kl"]; ok {
		met["actor/approx_kl"] = v
	}
	if v, ok := met["actor/entropy_loss"]; ok {
		met["actor/entropy"] = v
	}
	if hi, ok := met["actor/pg_clipfrac_higher"]; ok {
		met["actor/clipfrac"] = hi + met["actor/pg_clipfrac_lower"] // disjoint: ratio above or below the range
	}
	return &StepResult{Metrics: met, Rollouts: res, MDI: mdi}, nil
}

// diagnostics computes the perception mask and the entropy mask of the whole batch (whether or
// not they are used for training) and their precision and recall against vqa.VisualLabels, and
// returns per-row token records (rolloutTokens adds the per-token values) and the perception
// mask. The counts are masked sums on the masks' backend: on a device only they come back.
func (t *Trainer) diagnostics(st *stepTensors, b *batch, exs []example, mask, score, entropy *tensor.Tensor, met Metrics) ([]Rollout, *tensor.Tensor, error) {
	B, T := b.rows, t.respLen
	o := t.cfg.Optimization
	pm, em, err := st.float32x2(B, T)
	if err != nil {
		return nil, nil, err
	}
	if _, err := tprl.PerceptionMask(pm, score, mask, float32(o.TopPPerceptionTokens)); err != nil {
		return nil, nil, err
	}
	if _, err := tprl.EntropyMask(em, entropy, mask, float32(o.TopPEntropyTokens)); err != nil {
		return nil, nil, err
	}
	visualHost := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, B, T)) // 1 on labelled visual response tokens
	vh, _ := visualHost.Float32s()
	out := make([]Rollout, B)
	for i, e := range exs {
		labels := vqa.VisualLabels(e.s, t.tok, b.resp[i])
		r := Rollout{Sample: e.s, ScaleFactor: 1}
		for j, id := range b.resp[i] { // the response mask's tokens: a prefix of the row
			r.Tokens = append(r.Tokens, t.tok.Word(id))
			r.Visual = append(r.Visual, labels[j])
			if labels[j] {
				vh[i*T+j] = 1
			}
		}
		out[i] = r
	}
	meanScore, err := tensor.MaskedMean(score, mask)
	if err != nil {
		return nil, nil, err
	}
	met["perception/score_mean"] = float64(meanScore)
	if !t.hasObjects {
		return out, pm, nil // no scene, no labels: nothing to measure the masks against
	}
	visualMask, err := st.put(visualHost)
	if err != nil {
		return nil, nil, err
	}
	// The masks are 0/1, so these float64 sums are exact counts on any backend.
	pHit, visual, err := tensor.MaskedSum(pm, visualMask)
	if err != nil {
		return nil, nil, err
	}
	pSel, valid, err := tensor.MaskedSum(pm, mask)
	if err != nil {
		return nil, nil, err
	}
	eHit, _, err := tensor.MaskedSum(em, visualMask)
	if err != nil {
		return nil, nil, err
	}
	eSel, _, err := tensor.MaskedSum(em, mask)
	if err != nil {
		return nil, nil, err
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return math.NaN()
		}
		return a / b
	}
	met["perception/precision"] = ratio(pHit, pSel)
	met["perception/recall"] = ratio(pHit, visual)
	met["entropy_mask/precision"] = ratio(eHit, eSel)
	met["entropy_mask/recall"] = ratio(eHit, visual)
	met["perception/visual_token_fraction"] = ratio(visual, valid) // the precision of a random mask
	return out, pm, nil
}

// rolloutTokens adds each response's per-token perception mask and score, its advantage and its
// trajectory shaping factor to the records of diagnostics; on a device these [B, T] tensors
// come down for it.
func (t *Trainer) rolloutTokens(st *stepTensors, b *batch, res []Rollout, pm, score, adv, shaped *tensor.Tensor) error {
	T := t.respLen
	var hs [4][]float32
	for k, x := range []*tensor.Tensor{pm, score, adv, shaped} {
		h, err := st.host(x)
		if err != nil {
			return err
		}
		hs[k], _ = h.Float32s()
	}
	pv, sv, av, shv := hs[0], hs[1], hs[2], hs[3]
	for i := range res {
		for j := range b.resp[i] {
			res[i].Perception = append(res[i].Perception, pv[i*T+j] != 0)
			res[i].Score = append(res[i].Score, sv[i*T+j])
		}
		if len(b.resp[i]) > 0 { // the first valid token's
			res[i].Advantage = av[i*T]
			if a := res[i].Advantage; a != 0 {
				res[i].ScaleFactor = shv[i*T] / a
			}
		}
	}
	return nil
}

// greedyBaselines is ReMax's baseline: the reward of each prompt's greedy response.
func (t *Trainer) greedyBaselines(b *batch, exs []example) (*tensor.Tensor, error) {
	prompts := make([][]int32, len(exs))
	for i, e := range exs {
		prompts[i] = e.prompt
	}
	out, err := t.model.Generate(b.images, prompts, t.respLen, 0, 1, nil)
	if err != nil {
		return nil, fmt.Errorf("remax baseline: %w", err)
	}
	bl := make([]float32, len(exs))
	for i, e := range exs {
		bl[i] = float32(vqa.Score(t.tok.Decode(out[i]), e.s.Answer, t.reward).Overall)
	}
	return tensor.FromFloat32(bl, len(exs))
}

// rewardPenalty subtracts coef * penalty(logp, ref) from the token rewards in place under the
// response mask and returns the batch's divergence: the mean over rows of each row's masked
// token mean (the controller's current_kl). On a device the per-row means come down (B floats).
func (t *Trainer) rewardPenalty(st *stepTensors, b *batch, rewards, logp, ref, mask *tensor.Tensor) (float64, error) {
	if !st.device() {
		return t.rewardPenaltyHost(rewards, logp, ref, b.mask)
	}
	kind := t.cfg.Optimization.DivergencePenalty
	B, T := logp.Dim(0), logp.Dim(1)
	// ref on each response's tokens and logp on the padding after them (the mask is a prefix of
	// each row): the penalty of equal log-probs is 0, so the padding's rewards stay as they are
	// (no masked multiply is needed) and a row's masked mean is its penalty's.
	refIn, err := st.float32(B, T)
	if err != nil {
		return 0, err
	}
	if err := tensor.CopyInto(refIn, logp); err != nil {
		return 0, err
	}
	flat := func(x *tensor.Tensor, lo, hi int) *tensor.Tensor {
		return tensor.Must(tensor.Must(x.Reshape(B*T)).Rows(lo, hi))
	}
	for i, r := range b.resp {
		if l := len(r); l > 0 {
			if err := tensor.CopyInto(flat(refIn, i*T, i*T+l), flat(ref, i*T, i*T+l)); err != nil {
				return 0, err
			}
		}
	}
	pen, zero, err := st.float32x2(B, T) // zero: allocations are zeroed
	if err != nil {
		return 0, err
	}
	if err := divergence.Penalty(pen, logp, refIn, kind); err != nil {
		return 0, fmt.Errorf("reward divergence: %w", err)
	}
	// rewards - (pen - 0) * coef: the host's r -= coef * p, the same float32 operations.
	if err := divergence.Rewards(rewards, rewards, pen, zero, float32(t.ctl.Coef())); err != nil {
		return 0, fmt.Errorf("reward divergence: %w", err)
	}
	rowMeans, err := st.float32(B)
	if err != nil {
		return 0, err
	}
	if err := tensor.MaskedMeanRows(rowMeans, pen, mask); err != nil {
		return 0, err
	}
	h, err := st.host(rowMeans)
	if err != nil {
		return 0, err
	}
	means, _ := h.Float32s()
	var total float64
	for i, r := range b.resp {
		if len(r) > 0 {
			total += float64(means[i])
		}
	}
	return total / float64(B), nil
}

// rewardPenaltyHost is rewardPenalty on host tensors.
func (t *Trainer) rewardPenaltyHost(rewards, logp, ref, mask *tensor.Tensor) (float64, error) {
	kind := t.cfg.Optimization.DivergencePenalty
	pen := tensor.Must(tensor.NewLike(logp, tensor.Float32))
	if err := divergence.Penalty(pen, logp, ref, kind); err != nil {
		return 0, fmt.Errorf("reward divergence: %w", err)
	}
	p, _ := pen.Float32s()
	r, _ := rewards.Float32s()
	m, _ := mask.Float32s()
	coef := float32(t.ctl.Coef())
	B, T := logp.Dim(0), logp.Dim(1)
	var total float64
	for i := range B {
		var s, n float64
		for j := range T {
			if m[i*T+j] != 0 {
				r[i*T+j] -= coef * p[i*T+j]
				s += float64(p[i*T+j])
				n++
			}
		}
		if n > 0 {
			total += s / n
		}
	}
	return total / float64(B), nil
}

// stepTensors allocates a step's per-token tensors on the actor's backend (the host, or the
// device with worker.actor.device=cuda) and releases the device ones at the end of the step.
type stepTensors struct {
	b     tensor.Backend
	owned []*tensor.Tensor
}

func (t *Trainer) newStepTensors() *stepTensors {
	st := &stepTensors{b: tensor.CPU()}
	if t.onDevice(t.model) {
		st.b = t.dev.backend()
	}
	return st
}

func (s *stepTensors) device() bool { return s.b != tensor.CPU() }

func (s *stepTensors) keep(x *tensor.Tensor) *tensor.Tensor {
	if s.device() {
		s.owned = append(s.owned, x)
	}
	return x
}

// float32 returns a zeroed float32 tensor.
func (s *stepTensors) float32(shape ...int) (*tensor.Tensor, error) {
	x, err := tensor.New(s.b, tensor.Float32, shape...)
	if err != nil {
		return nil, err
	}
	return s.keep(x), nil
}

// float32x2 returns two zeroed float32 tensors of one shape.
func (s *stepTensors) float32x2(shape ...int) (*tensor.Tensor, *tensor.Tensor, error) {
	x, err := s.float32(shape...)
	if err != nil {
		return nil, nil, err
	}
	y, err := s.float32(shape...)
	return x, y, err
}

// put returns the host tensor h on the step's backend: h itself on the host, else an uploaded
// copy.
func (s *stepTensors) put(h *tensor.Tensor) (*tensor.Tensor, error) {
	if !s.device() {
		return h, nil
	}
	x, err := tensor.To(s.b, h)
	if err != nil {
		return nil, err
	}
	return s.keep(x), nil
}

// host returns x on the host: x itself there, else a downloaded copy.
func (s *stepTensors) host(x *tensor.Tensor) (*tensor.Tensor, error) {
	if x.IsHost() {
		return x, nil
	}
	return tensor.To(tensor.CPU(), x)
}

func (s *stepTensors) release() {
	for _, x := range s.owned {
		_ = x.Release()
	}
	s.owned = nil
}

// maxFilterRounds bounds the sampling rounds of online filtering in one step; after them the
// batch is completed with the rejected groups (counted in filter/filled_groups) rather than
// stalling the run.
const maxFilterRounds = 8

// rollout samples n responses for rollout_batch_size prompts and scores them. With
// optimization.online_filtering it keeps only the groups whose mean filter_key reward lies in
// (filter_low, filter_high) — groups where every response scores the same carry no GRPO signal
// — sampling further prompts until it has rollout_batch_size groups. The scores here are the
// answer and format parts: the MDI part needs the attention pass that follows the rollout.
func (t *Trainer) rollout(met Metrics) ([]example, [][]int32, []vqa.Reward, error) {
	o, ro := t.cfg.Optimization, t.cfg.Worker.Rollout
	want, n := t.cfg.Dataset.RolloutBatchSize, ro.N
	var exs, rejExs []example
	var resp, rejResp [][]int32
	var scores, rejScores []vqa.Reward
	generated, accepted, rounds := 0, 0, 0
	maxRounds := 1
	if o.OnlineFiltering {
		maxRounds = maxFilterRounds
	}
	for len(exs) < want*n && rounds < maxRounds {
		rounds++
		prompts := t.nextPrompts(want)
		rows := make([]example, 0, len(prompts)*n)
		for _, p := range prompts {
			for range n {
				rows = append(rows, p)
			}
		}
		pb, err := t.newBatch(rows, make([][]int32, len(rows))) // images and prompts only
		if err != nil {
			return nil, nil, nil, err
		}
		ids := make([][]int32, len(rows))
		for i, e := range rows {
			ids[i] = e.prompt
		}
		out, err := t.generateShard(pb.images, ids, rounds-1)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("rollout: %w", err)
		}
		sc := make([]vqa.Reward, len(rows))
		for i, e := range rows {
			sc[i] = vqa.Score(t.tok.Decode(out[i]), e.s.Answer, t.reward)
		}
		for g := range prompts {
			lo, hi := g*n, (g+1)*n
			generated++
			keep := true
			if o.OnlineFiltering {
				var m float64
				for _, r := range sc[lo:hi] {
					m += r.Part(o.FilterKey)
				}
				m /= float64(n)
				keep = m > o.FilterLow && m < o.FilterHigh
			}
			if keep {
				accepted++
			}
			if keep && len(exs) < want*n {
				exs, resp, scores = append(exs, rows[lo:hi]...), append(resp, out[lo:hi]...), append(scores, sc[lo:hi]...)
			} else if !keep {
				rejExs, rejResp, rejScores = append(rejExs, rows[lo:hi]...), append(rejResp, out[lo:hi]...), append(rejScores, sc[lo:hi]...)
			}
		}
	}
	if o.OnlineFiltering {
		filled := 0
		for len(exs) < want*n {
			exs, resp, scores = append(exs, rejExs[:n]...), append(resp, rejResp[:n]...), append(scores, rejScores[:n]...)
			rejExs, rejResp, rejScores = rejExs[n:], rejResp[n:], rejScores[n:]
			filled++
		}
		met["filter/kept_fraction"] = float64(accepted) / float64(generated)
		met["filter/rounds"] = float64(rounds)
		met["filter/filled_groups"] = float64(filled)
	}
	return exs, resp, scores, nil
}
