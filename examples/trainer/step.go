package main

import (
	"math"
	"time"

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

// Step runs one VPPO step of tprl/loop (rollout, rewards, perception score, advantages, the
// update; see loop.Loop.Step) and adds what this trainer measures: the perception and entropy
// masks against the task's labelled visual tokens, the per-token records of rollouts.md and the
// throughput in prompt and response tokens.
func (t *Trainer) Step() (*StepResult, error) {
	start := time.Now()
	l, err := t.rlLoop()
	if err != nil {
		return nil, err
	}
	res, err := l.Step(t.ctxOrBackground())
	if err != nil {
		return nil, err
	}
	defer res.Release()
	s := l.State()
	t.step, t.skipped = s.Step, s.Skipped
	met := Metrics(res.Metrics)
	b := res.Batch
	exs := b.Prompts
	lay, err := t.actor.layout(b)
	if err != nil {
		return nil, err
	}
	scores := make([]vqa.Reward, b.Len())
	for i := range scores {
		scores[i] = vqa.Reward{Overall: res.Rewards[i], Accuracy: res.RewardParts["accuracy"][i], Format: res.RewardParts["format"][i]}
	}
	var mdi []mdiStats
	if t.cfg.Worker.Reward.MDIWeight > 0 {
		if mdi = t.mdi.rows; len(mdi) != b.Len() || t.cfg.Optimization.OnlineFiltering {
			// The rows scored last are not the batch's (online filtering kept groups of several
			// rounds): the attention of the batch itself.
			if mdi, err = t.attentionStatsOf(b); err != nil {
				return nil, err
			}
		}
	}
	st := tensor.NewScratch(t.actor.Backend())
	defer st.Release()
	// The masks' tie order is the update's: the step's batch under the loop's key.
	key := tprl.RandomKey{Seed: t.cfg.Training.Seed, Step: s.Step - 1}
	rs, pm, err := t.diagnostics(st, lay, exs, res.ResponseMask, res.PerceptionScore, res.Entropy, key, met)
	if err != nil {
		return nil, err
	}
	for i := range rs {
		rs[i].Reward = scores[i]
	}
	// The per-token records of rollouts.md: on a device they come down only for a step that
	// writes them.
	if st.Backend() == tensor.CPU() || t.rolloutDetail {
		if err := t.rolloutTokens(lay, rs, pm, res.PerceptionScore, res.Advantages, res.LossAdvantages); err != nil {
			return nil, err
		}
	}
	el := time.Since(start)
	var tokens float64
	for i := range b.Len() {
		tokens += float64(lay.plen[i] + len(lay.resp[i]))
	}
	// perf/throughput is per device, as verl's.
	met["perf/tokens_per_second"] = tokens / el.Seconds()
	met["perf/throughput"] = tokens / el.Seconds() / float64(t.world())
	return &StepResult{Metrics: met, Rollouts: rs, MDI: mdi}, nil
}

// diagnostics computes the perception mask and the entropy mask of the whole batch (whether or
// not they are used for training) and their precision and recall against vqa.VisualLabels, and
// returns per-row token records (rolloutTokens adds the per-token values) and the perception
// mask. The counts are masked sums on the masks' backend: on a device only they come back.
func (t *Trainer) diagnostics(st *tensor.Scratch, b *batch, exs []example, mask, score, entropy *tensor.Tensor, key tprl.RandomKey, met Metrics) ([]Rollout, *tensor.Tensor, error) {
	B, T := b.rows, t.respLen
	o := t.cfg.Optimization
	pm, err := st.New(tensor.Float32, B, T)
	if err != nil {
		return nil, nil, err
	}
	em, err := st.New(tensor.Float32, B, T)
	if err != nil {
		return nil, nil, err
	}
	perception, entropyMask := tprl.PerceptionMask, tprl.EntropyMask
	if !o.TiesToLowerIndex {
		perception = func(dst, s, m *tensor.Tensor, p float32) (tprl.SelectionStats, error) {
			return tprl.PerceptionMaskRandomTies(dst, s, m, p, key)
		}
		entropyMask = func(dst, e, m *tensor.Tensor, p float32) (tprl.SelectionStats, error) {
			return tprl.EntropyMaskRandomTies(dst, e, m, p, key)
		}
	}
	if _, err := perception(pm, score, mask, float32(o.TopPPerceptionTokens)); err != nil {
		return nil, nil, err
	}
	if _, err := entropyMask(em, entropy, mask, float32(o.TopPEntropyTokens)); err != nil {
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
	visualMask, err := st.Put(visualHost)
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
func (t *Trainer) rolloutTokens(b *batch, res []Rollout, pm, score, adv, shaped *tensor.Tensor) error {
	T := t.respLen
	var hs [4][]float32
	for k, x := range []*tensor.Tensor{pm, score, adv, shaped} {
		h, err := x, error(nil)
		if !x.IsHost() {
			if h, err = tensor.To(tensor.CPU(), x); err != nil {
				return err
			}
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
