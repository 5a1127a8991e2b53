package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"time"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/examples/internal/vlm"
	"github.com/mtrl-go/mtrl/examples/internal/vqa"
	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// example is one prompt of the dataset, encoded for the model.
type example struct {
	s      vqa.Sample
	img    []uint8 // [H, W, 3]
	prompt []int32 // BOS + prompt words
	ref    []int32 // reference response words + EOS
}

// Trainer holds everything a run needs: data, policy, frozen reference, optimizer, RNG and
// position. Its fields that change during training are exactly what a checkpoint stores.
type Trainer struct {
	cfg    Config
	tok    *vqa.Tokenizer
	train  []example
	val    []example
	model  *vlm.Model
	ref    *vlm.Model // frozen copy of the warm-started policy; unless disable_divergence
	critic *Critic    // the value model; only with advantage_estimator=gae
	update tprl.UpdateConfig
	klCoef float64 // the divergence coefficient in the reward to start (or resume) the RL loop with
	adv    advantage.Config
	pert   perturb.Perturbation
	reward vqa.RewardWeights

	opt *loop.AdamW // the actor's RL optimizer state
	// zero, with worker.actor.fsdp.sharding_strategy SHARD_GRAD_OP, holds this rank's shard
	// of the moments instead of opt (whose M and V are then nil until a save gathers them).
	zero  *loop.ShardedAdamW
	decay []bool
	actor *vlmModel                 // the policy as tprl/loop sees it
	data  *loop.Epochs[example]     // the training prompts, epoch by epoch
	rl    *loop.Loop[example]       // the RL loop, built at the first step (rlLoop)
	mdi   struct{ rows []mdiStats } // the attention statistics of the rows the MDI reward scored last

	dev     actorDevice // the actor's state on a device (worker.actor.device=cuda); nil on the CPU
	rng     *rand.PCG   // rollout sampling
	step    int         // RL steps done
	steps   int         // RL steps of the run (training.steps, or total_epochs passes over the data)
	skipped int         // optimizer steps skipped on a non-finite gradient norm

	hasReferences bool // every training example has a reference response (the warm start needs them)
	hasObjects    bool // every example has the scene's objects (the visual-token diagnostics need them)
	// rolloutDetail asks the next Step for the per-token rollout records (rollouts.md) even on a
	// device, where they cost a download of [B, T] tensors; on the host they are always there.
	rolloutDetail bool
	valOOV        int // validation prompt words outside the training vocabulary
	valOOVWords   []string
	droppedLong   int // training prompts dropped by filter_overlong_prompts
	ignoredVideos int // videos listed by the data's rows and skipped (dataset.ignore_videos)

	comm collective.Comm // data-parallel group; nil: one device
	ctx  context.Context // the rank's context for collectives (cancelled when a rank fails)

	maxPrompt int // longest encoded prompt (BOS included)
	respLen   int // T: max response tokens (EOS included)
}

// NewTrainer loads the data and builds a fresh policy (not yet warm-started).
func NewTrainer(cfg Config) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rw := cfg.Worker.Reward
	t := &Trainer{cfg: cfg, reward: vqa.RewardWeights{Accuracy: rw.AccuracyWeight, Format: rw.FormatWeight}, respLen: cfg.Dataset.MaxResponseLength}
	var err error
	if t.update, err = cfg.Update(); err != nil {
		return nil, err
	}
	if _, err = cfg.Controller(); err != nil {
		return nil, err
	}
	t.klCoef = cfg.Optimization.DivergenceCoef
	if t.adv, err = cfg.Advantage(); err != nil {
		return nil, err
	}
	if t.pert, err = cfg.Perturbation(); err != nil {
		return nil, err
	}
	if err := t.loadData(); err != nil {
		return nil, err
	}
	a := cfg.Worker.Actor.Model
	mc := vlm.Config{ImageSize: cfg.Dataset.ImageSize, PatchSize: a.PatchSize, Channels: 3, Vocab: t.tok.VocabSize(),
		Dim: a.Dim, Layers: a.Layers, Heads: a.Heads, MLPDim: a.MLPDim, MaxLen: t.maxPrompt + t.respLen}
	if t.model, err = vlm.New(mc, a.Seed); err != nil {
		return nil, fmt.Errorf("config: worker.actor.model: %w", err)
	}
	if cfg.Worker.Actor.Device == "cuda" {
		// Rank r of a process with n_gpus_per_node ranks uses device r mod n_gpus_per_node.
		if t.dev, err = useDevice(t.model, cfg.deviceOrdinal); err != nil {
			return nil, fmt.Errorf("config: worker.actor.device: %w", err)
		}
	}
	var sizes []int
	for _, p := range t.model.Params() {
		sizes = append(sizes, p.W.Len())
		t.decay = append(t.decay, len(p.W.Shape()) >= 2) // matrices decay; biases and norms do not
	}
	o := cfg.Worker.Actor.Optim
	t.opt = loop.NewAdamW(sizes, o.Betas[0], o.Betas[1], o.Eps, o.WeightDecay)
	t.actor = &vlmModel{t: t, m: t.model}
	t.rng = rand.NewPCG(cfg.Training.Seed, 0x726f6c6c6f7574) // "rollout"
	if t.adv.Estimator == advantage.EstimatorGAE {
		if t.critic, err = newCritic(mc, a.Seed, cfg.Worker.Critic.Optim); err != nil {
			return nil, fmt.Errorf("config: worker.critic: %w", err)
		}
	}
	t.data = loop.NewEpochs(t.train, cfg.Dataset.Shuffle, cfg.Dataset.Seed)
	t.steps = cfg.Training.Steps
	if t.steps == 0 { // the budget in epochs: whole batches of prompts per epoch, as a drop_last loader
		t.steps = cfg.Training.TotalEpochs * max(1, len(t.train)/cfg.Dataset.RolloutBatchSize)
	}
	return t, nil
}

// loadData reads the dataset files, or generates the task, builds the vocabulary from the
// training data and encodes every example (images fitted to the model's input).
func (t *Trainer) loadData() error {
	d := t.cfg.Dataset
	task := vqa.TaskConfig{ImageSize: d.ImageSize, MaxShapes: d.MaxShapes, Options: d.Options, OrderedOptions: d.OrderedOptions, Chain: d.Task}
	if d.TrainFiles == "" || d.ValFiles == "" {
		if err := task.Validate(); err != nil {
			return fmt.Errorf("config: dataset: %w", err)
		}
	}
	opts := vqa.LoadOptions{PromptKey: d.PromptKey, AnswerKey: d.AnswerKey, ImageKey: d.ImageKey,
		VideoKey: d.VideoKey, IgnoreVideos: d.IgnoreVideos, ImageDir: d.ImageDir}
	load := func(files string, n int, firstID uint64, split string) ([]vqa.Sample, error) {
		if files == "" {
			return vqa.Generate(task, d.Seed, firstID, n), nil
		}
		var ss []vqa.Sample
		for _, path := range strings.Split(files, ",") {
			path = strings.TrimSpace(path)
			if path == "" {
				continue
			}
			part, err := vqa.LoadWith(path, opts)
			if err != nil {
				return nil, fmt.Errorf("dataset.%s_files: %w", split, err)
			}
			if len(part) == 0 {
				return nil, fmt.Errorf("dataset.%s_files: %s has no samples", split, path)
			}
			for _, s := range part {
				t.ignoredVideos += s.IgnoredVideos
			}
			ss = append(ss, part...)
		}
		return ss, nil
	}
	train, err := load(d.TrainFiles, d.TrainSize, 0, "train")
	if err != nil {
		return err
	}
	// Generated validation prompts have ids after every training id: held out.
	val, err := load(d.ValFiles, d.ValSize, 1<<40, "val")
	if err != nil {
		return err
	}
	texts := make([]string, 0, 2*len(train))
	for _, s := range train {
		texts = append(texts, s.Prompt, s.Response)
	}
	t.tok = vqa.NewTokenizerFrom(texts)
	t.hasReferences, t.hasObjects = true, true
	encode := func(ss []vqa.Sample, split string) ([]example, error) {
		out := make([]example, 0, len(ss))
		for i, s := range ss {
			prompt := append([]int32{vqa.BOS}, t.tok.Encode(s.Prompt)...)
			if len(prompt) > d.MaxPromptLength {
				if !d.FilterOverlongPrompts {
					return nil, fmt.Errorf("dataset.%s_files: sample %d (id %d): prompt of %d tokens (BOS included) exceeds dataset.max_prompt_length %d (set dataset.filter_overlong_prompts=true to drop such prompts)",
						split, i, s.ID, len(prompt), d.MaxPromptLength)
				}
				if split == "train" {
					t.droppedLong++
				}
				continue
			}
			if split == "val" {
				u := t.tok.Unknown(s.Prompt)
				t.valOOV += len(u)
				t.valOOVWords = append(t.valOOVWords, u...)
			}
			if s.Response == "" {
				t.hasReferences = false
			}
			if s.Objects == nil {
				t.hasObjects = false
			}
			out = append(out, example{s: s, img: vqa.Pixels(vqa.Fit(s.Image, d.ImageSize)), prompt: prompt,
				ref: append(t.tok.Encode(s.Response), vqa.EOS)})
			t.maxPrompt = max(t.maxPrompt, len(prompt))
		}
		return out, nil
	}
	if t.train, err = encode(train, "train"); err != nil {
		return err
	}
	if t.val, err = encode(val, "val"); err != nil {
		return err
	}
	if len(t.train) < d.RolloutBatchSize {
		return fmt.Errorf("dataset.train_files: %d samples (%d overlong dropped), fewer than dataset.rollout_batch_size %d", len(t.train), t.droppedLong, d.RolloutBatchSize)
	}
	return nil
}

// batch is a set of rows (prompt + response) in the model's layout plus the response-aligned
// tensors [B, T] that the losses work on.
type batch struct {
	rows    int
	images  *tensor.Tensor // [B, H, W, 3] uint8
	tokens  *tensor.Tensor // [B, L] int32: prompt, response, PAD
	plen    []int          // prompt length of each row (BOS included)
	resp    [][]int32      // response ids (EOS included when generated)
	targets *tensor.Tensor // [B, T] int32: the response tokens, PAD after
	mask    *tensor.Tensor // [B, T] float32 response mask
}

// newBatch lays out rows; examples[i] gives row i's image and prompt.
func (t *Trainer) newBatch(exs []example, resp [][]int32) (*batch, error) {
	B, T := len(exs), t.respLen
	L := t.maxPrompt + T
	hw := len(exs[0].img)
	imgs := make([]uint8, B*hw)
	toks := make([]int32, B*L)
	tg := make([]int32, B*T)
	mk := make([]float32, B*T)
	b := &batch{rows: B, plen: make([]int, B), resp: resp}
	for i, e := range exs {
		copy(imgs[i*hw:], e.img)
		r := resp[i]
		if len(r) > T {
			r = r[:T]
			resp[i] = r
		}
		copy(toks[i*L:], e.prompt)
		copy(toks[i*L+len(e.prompt):], r)
		b.plen[i] = len(e.prompt)
		copy(tg[i*T:], r)
		for j := range r {
			mk[i*T+j] = 1
		}
	}
	s := t.cfg.Dataset.ImageSize
	var err error
	if b.images, err = tensor.FromUint8(imgs, B, s, s, 3); err != nil {
		return nil, err
	}
	b.tokens = tensor.Must(tensor.FromInt32(toks, B, L))
	b.targets = tensor.Must(tensor.FromInt32(tg, B, T))
	b.mask = tensor.Must(tensor.FromFloat32(mk, B, T))
	return b, nil
}

// forwardResponse runs m on rows [lo, hi) of b with the given images of those rows
// ([hi-lo, H, W, 3]) and returns
// the logits that predict each response token, gathered into [hi-lo, T, V] (row r, response
// position t ← sequence position plen_r - 1 + t), and the activations for backward. On a
// device the gather runs there (one device copy per row) and the logits stay there.
func (t *Trainer) forwardResponse(m *vlm.Model, b *batch, im *tensor.Tensor, lo, hi int) (*microLogits, *vlm.Activations, error) {
	tk, err := b.tokens.Rows(lo, hi)
	if err != nil {
		return nil, nil, err
	}
	targets := tensor.Must(b.targets.Rows(lo, hi))
	logits, act, err := m.ForwardOnBackend(im, tk)
	if err != nil {
		return nil, nil, err
	}
	L, V, T := b.tokens.Dim(1), logits.Dim(2), t.respLen
	if !logits.IsHost() {
		ml, err := t.gatherOnDevice(logits, targets, b.plen[lo:hi], L)
		_ = logits.Release()
		if err != nil {
			act.Release()
			return nil, nil, err
		}
		return ml, act, nil
	}
	src, err := logits.Float32s()
	if err != nil {
		return nil, nil, err
	}
	g := make([]float32, (hi-lo)*T*V)
	for r := range hi - lo {
		p := b.plen[lo+r] - 1
		copy(g[r*T*V:(r+1)*T*V], src[(r*L+p)*V:(r*L+p+T)*V])
	}
	return &microLogits{logits: tensor.Must(tensor.FromFloat32(g, hi-lo, T, V)), targets: targets}, act, nil
}

// gatherOnDevice is forwardResponse's gather on the logits' device: row r's T positions from
// plen[r]-1 on, each a contiguous [T, V] block copied device to device; the targets are
// uploaded next to them.
func (t *Trainer) gatherOnDevice(logits, targets *tensor.Tensor, plen []int, L int) (*microLogits, error) {
	rows, V, T := len(plen), logits.Dim(2), t.respLen
	ml := &microLogits{}
	g, err := ml.alloc(logits.Backend(), rows, T, V)
	if err != nil {
		return nil, err
	}
	src, dst := tensor.Must(logits.Reshape(rows*L, V)), tensor.Must(g.Reshape(rows*T, V))
	for r, pl := range plen {
		p := r*L + pl - 1
		if err := tensor.CopyInto(tensor.Must(dst.Rows(r*T, (r+1)*T)), tensor.Must(src.Rows(p, p+T))); err != nil {
			ml.release()
			return nil, err
		}
	}
	tg, err := tensor.To(logits.Backend(), targets)
	if err != nil {
		ml.release()
		return nil, err
	}
	ml.owned = append(ml.owned, tg)
	ml.logits, ml.targets = g, tg
	return ml, nil
}

// backwardResponse scatters d loss / d gathered logits [hi-lo, T, V] back to the sequence
// layout [hi-lo, L, V] and runs the model's backward (accumulating parameter gradients). On a
// device (dg there) the scatter runs there.
func (t *Trainer) backwardResponse(m *vlm.Model, b *batch, act *vlm.Activations, dg *tensor.Tensor, lo, hi int) error {
	L, T := b.tokens.Dim(1), t.respLen
	V := dg.Dim(2)
	if !dg.IsHost() {
		d, err := tensor.New(dg.Backend(), tensor.Float32, hi-lo, L, V)
		if err != nil {
			return err
		}
		defer d.Release()
		src, dst := tensor.Must(dg.Reshape((hi-lo)*T, V)), tensor.Must(d.Reshape((hi-lo)*L, V))
		for r := range hi - lo {
			p := r*L + b.plen[lo+r] - 1
			if err := tensor.CopyInto(tensor.Must(dst.Rows(p, p+T)), tensor.Must(src.Rows(r*T, (r+1)*T))); err != nil {
				return err
			}
		}
		return m.Backward(act, d)
	}
	src, err := dg.Float32s()
	if err != nil {
		return err
	}
	d := make([]float32, (hi-lo)*L*V)
	for r := range hi - lo {
		p := b.plen[lo+r] - 1
		copy(d[(r*L+p)*V:(r*L+p+T)*V], src[r*T*V:(r+1)*T*V])
	}
	return m.Backward(act, tensor.Must(tensor.FromFloat32(d, hi-lo, L, V)))
}

// WarmStart is the supervised warm start: cross-entropy on the reference responses, through the
// same two tensor ops as the RL update (log-probs forward, their backward to the logits). It
// returns the mean loss of the last steps.
func (t *Trainer) WarmStart(ctx context.Context, progress *Progress) (float64, error) {
	return t.warmStart(ctx, progress, nil)
}

// newWarmOpt is the warm start's own AdamW (its moments are not the run's).
func (t *Trainer) newWarmOpt() *loop.AdamW {
	return loop.NewAdamW(sizesOf(t.model), 0.9, 0.999, 1e-8, t.cfg.Worker.Actor.Optim.WeightDecay)
}

// warmStart is WarmStart checkpointed by w (nil: not at all): from w.from when set, saving every
// w.every steps and when interrupted.
func (t *Trainer) warmStart(ctx context.Context, progress *Progress, w *warmRun) (float64, error) {
	c := t.cfg.Training
	opt := t.newWarmOpt()
	pcg := rand.NewPCG(c.Seed, 0x736674) // "sft"
	var recent []float64
	if w != nil && w.from != nil {
		opt, pcg = w.from.opt, w.from.pcg
		for _, b := range w.from.st.RecentLoss {
			recent = append(recent, math.Float64frombits(b))
		}
	}
	if t.dev != nil {
		defer t.dev.forget(opt) // the warm start's moments are not the run's
	}
	grads, optim, err := t.trainingOf(t.model, opt)
	if err != nil {
		return 0, err
	}
	r := rand.New(pcg)
	micro := t.cfg.Worker.Actor.MicroBatchSizePerDeviceForUpdate
	saved := w.resumeStep()
	for s := w.resumeStep(); s < c.SFTSteps; s++ {
		stop, err := t.agree(ctx.Err() != nil)
		if err != nil {
			return 0, err
		}
		if stop {
			progress.Done()
			if w != nil && s > saved {
				if err := t.saveWarm(w, s, opt, pcg, recent); err != nil {
					return 0, fmt.Errorf("interrupted, and the warm-start checkpoint failed: %w", err)
				}
			}
			return 0, ErrInterrupted
		}
		exs := make([]example, c.SFTBatchSize)
		resp := make([][]int32, len(exs))
		for i := range exs {
			exs[i] = t.train[r.IntN(len(t.train))]
			resp[i] = t.sftReference(exs[i], s, r)
		}
		b, err := t.newBatch(exs, resp)
		if err != nil {
			return 0, err
		}
		_, count, _ := tensor.MaskedSum(b.mask, b.mask)
		var loss float64
		// With W ranks each takes a contiguous 1/W of the rows; the loss is divided by the
		// whole batch's count, so the gradients are summed.
		slo, shi := t.shard(b.rows)
		for lo := slo; lo < shi; lo += micro {
			hi := min(lo+micro, shi)
			ml, act, err := t.forwardResponse(t.model, b, tensorRows(b.images, lo, hi), lo, hi)
			if err != nil {
				return 0, err
			}
			mask := tensor.Must(b.mask.Rows(lo, hi))
			logp := tensor.Must(tensor.NewLike(mask, tensor.Float32))
			if err := ml.logProbs(logp, nil, 1); err != nil {
				return 0, err
			}
			// loss = -sum(logp * mask) / count  →  d loss / d logp = -mask / count
			lp, _ := logp.Float32s()
			mk, _ := mask.Float32s()
			dl := make([]float32, len(lp))
			for i := range lp {
				loss -= float64(lp[i]*mk[i]) / count
				dl[i] = -mk[i] / float32(count)
			}
			dg, err := ml.dLogits(tensor.Must(tensor.FromFloat32(dl, hi-lo, t.respLen)), 1)
			if err != nil {
				return 0, err
			}
			err = t.backwardResponse(t.model, b, act, dg, lo, hi)
			ml.release()
			act.Release()
			if err != nil {
				return 0, err
			}
			if err := grads.Collect(); err != nil {
				return 0, err
			}
		}
		if _, err := grads.Reduce(t.ctxOrBackground(), t.comm, 1); err != nil {
			return 0, err
		}
		if t.world() > 1 {
			l := []float64{loss}
			if err := t.comm.AllReduceFloat64(t.ctxOrBackground(), l, collective.Sum); err != nil {
				return 0, err
			}
			loss = l[0]
		}
		if _, err := optim.Step(c.SFTLR, t.cfg.Worker.Actor.MaxGradNorm); err != nil {
			return 0, err
		}
		recent = append(recent, loss)
		if len(recent) > 10 {
			recent = recent[1:]
		}
		progress.Update(s+1, fmt.Sprintf("loss %.3f", loss))
		if testAfterWarmStep != nil {
			testAfterWarmStep(s + 1)
		}
		if w != nil && w.every > 0 && (s+1)%w.every == 0 && s+1 < c.SFTSteps {
			if err := t.saveWarm(w, s+1, opt, pcg, recent); err != nil {
				return 0, err
			}
			saved = s + 1
		}
	}
	progress.Done()
	return mean(recent), nil
}

// sftReference is the response warm-start step s trains on for e: the true reference, a blind
// one (training.sft_blind) or, with probability training.sft_shortcut in the shortcut's steps,
// one that answers option A.
func (t *Trainer) sftReference(e example, s int, r *rand.Rand) []int32 {
	c := t.cfg.Training
	inShortcut := c.SFTShortcutSteps == 0 || s >= c.SFTSteps-c.SFTShortcutSteps
	switch {
	case c.SFTBlind:
		return t.blindRef(e, r)
	case c.SFTShortcut > 0 && inShortcut && r.Float64() < c.SFTShortcut:
		return t.letterRef(e, "A")
	}
	return e.ref
}

// blindRef is e's reference with a random option's value and letter (vqa.BlindResponse); the
// true reference when e's prompt has no option list the chain can be rewritten with.
func (t *Trainer) blindRef(e example, r *rand.Rand) []int32 {
	opts, ok := vqa.Options(e.s.Prompt)
	if !ok {
		return e.ref
	}
	text, ok := vqa.BlindResponse(e.s, opts[r.IntN(len(opts))][0])
	if !ok {
		return e.ref
	}
	return append(t.tok.Encode(text), vqa.EOS)
}

// letterRef is e's reference rewritten to answer option letter (vqa.BlindResponse); the true
// reference when e's prompt has no option list the chain can be rewritten with.
func (t *Trainer) letterRef(e example, letter string) []int32 {
	text, ok := vqa.BlindResponse(e.s, letter)
	if !ok {
		return e.ref
	}
	return append(t.tok.Encode(text), vqa.EOS)
}

func sizesOf(m *vlm.Model) []int {
	var s []int
	for _, p := range m.Params() {
		s = append(s, p.W.Len())
	}
	return s
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// FreezeReference copies the current policy into the frozen reference model (use_kl_loss).
func (t *Trainer) FreezeReference() error {
	if t.cfg.Optimization.DisableDivergence {
		return nil
	}
	ref, err := vlm.New(t.model.Config, 0)
	if err != nil {
		return err
	}
	for i, p := range ref.Params() {
		if err := tensor.CopyInto(p.W, t.model.HostParams()[i].W); err != nil {
			return err
		}
	}
	if t.dev != nil { // the reference's log-probs on the actor's device
		if err := t.dev.attach(ref); err != nil {
			return err
		}
	}
	t.ref = ref
	return nil
}

// Validation is greedy (or val_temperature) decoding on the held-out prompts.
type Validation struct {
	Accuracy, Format, Overall float64
	OOVWords                  int // words of the validation prompts outside the training vocabulary
}

// put adds the validation metrics to m, under this trainer's and the seeds' (verl) names.
func (v Validation) put(m Metrics) {
	m["val/accuracy"], m["val/format"], m["val/reward"] = v.Accuracy, v.Format, v.Overall
	m["val/reward_score"] = v.Overall
	m["val/oov_words"] = float64(v.OOVWords)
}

// Validate decodes every validation prompt, val_batch_size at a time, and scores it.
func (t *Trainer) Validate() (Validation, error) {
	v := Validation{OOVWords: t.valOOV}
	if len(t.val) == 0 {
		v.Accuracy, v.Format, v.Overall = math.NaN(), math.NaN(), math.NaN()
		return v, nil
	}
	chunk := t.cfg.Dataset.ValBatchSize
	if chunk < 0 {
		chunk = len(t.val)
	}
	temp := t.cfg.Worker.Rollout.ValTemperature
	// Each rank decodes a contiguous share of the prompts, each prompt with its own random
	// source ("val", never the training stream); the scores are gathered in prompt order.
	vlo, vhi := t.shard(len(t.val))
	var rows [][3]float64
	for lo := vlo; lo < vhi; lo += chunk {
		exs := t.val[lo:min(lo+chunk, vhi)]
		b, err := t.newBatch(exs, make([][]int32, len(exs)))
		if err != nil {
			return v, err
		}
		prompts := make([][]int32, len(exs))
		for i, e := range exs {
			prompts[i] = e.prompt
		}
		rngs := make([]*rand.Rand, len(exs))
		for i := range rngs {
			rngs[i] = rand.New(rand.NewPCG(t.cfg.Training.Seed, 0x76616c<<32|uint64(lo+i)))
		}
		out, err := t.model.GenerateRows(b.images, prompts, t.respLen, temp, t.cfg.Worker.Rollout.TopP, t.cfg.Worker.Rollout.TopK, rngs)
		if err != nil {
			return v, err
		}
		for i, e := range exs {
			s := vqa.Score(t.tok.Decode(out[i]), e.s.Answer, t.reward)
			rows = append(rows, [3]float64{s.Accuracy, s.Format, s.Overall})
		}
	}
	rows, err := collective.AllGatherValues(t.ctxOrBackground(), t.comm, rows)
	if err != nil {
		return v, fmt.Errorf("validation: %w", err)
	}
	for _, s := range rows {
		v.Accuracy += s[0]
		v.Format += s[1]
		v.Overall += s[2]
	}
	n := float64(len(t.val))
	v.Accuracy, v.Format, v.Overall = v.Accuracy/n, v.Format/n, v.Overall/n
	return v, nil
}

// validateOnly is training.val_only: validate the loaded weights, print the result and write it
// to dir/validation.json.
func (t *Trainer) validateOnly(dir string, stdout io.Writer) error {
	v, err := t.Validate()
	if err != nil {
		return err
	}
	m := Metrics{}
	v.put(m)
	if !t.lead() {
		return nil
	}
	fmt.Fprintf(stdout, "validation of step %d on %d prompts: accuracy %.3f, format %.3f, reward %.3f, %d out-of-vocabulary words\n",
		t.step, len(t.val), v.Accuracy, v.Format, v.Overall, v.OOVWords)
	return WriteFileAtomic(filepath.Join(dir, "validation.json"), MarshalLine(t.step, m))
}

// LoadWeights sets the policy's weights from the model.safetensors of a checkpoint directory
// (training.load_checkpoint_path): a new run from them, with a fresh optimizer.
func (t *Trainer) LoadWeights(dir string) error {
	path := filepath.Join(dir, ckptModel)
	files, err := readCheckpoint(dir, ckptModel)
	if err != nil {
		return fmt.Errorf("training.load_checkpoint_path: %w", err)
	}
	ts, err := DecodeSafetensors(files[ckptModel], path)
	if err != nil {
		return fmt.Errorf("training.load_checkpoint_path: %w", err)
	}
	ws, err := paramData(ts, path, "", t.model.Params())
	if err != nil {
		return fmt.Errorf("training.load_checkpoint_path: %w (the model or the vocabulary may differ)", err)
	}
	for i, p := range t.model.Params() {
		w, _ := p.W.Float32s()
		copy(w, ws[i])
	}
	return nil
}

// trainState is state.json of a checkpoint.
type trainState struct {
	Step        int        `json:"global_step"`
	Epoch       int        `json:"data_epoch"`
	Pos         int        `json:"data_position"`
	RNG         string     `json:"rng_state"` // base64 of the rollout PCG's MarshalBinary
	AdamT       int        `json:"optimizer_step"`
	Skipped     int        `json:"skipped_steps"`
	Coef        *float64   `json:"divergence_coef"` // the reward's divergence coefficient (adaptive); nil in older checkpoints
	CriticAdamT int        `json:"critic_optimizer_step,omitempty"`
	ModelConfig vlm.Config `json:"model_config"`
	Time        string     `json:"saved_at"`
}

// Save writes a checkpoint of the current step.
func (t *Trainer) Save(ck *Checkpoints) (string, error) {
	if t.dev != nil { // the weights come down through Params, the moments here
		if err := t.dev.saveMoments(t.opt); err != nil {
			return "", err
		}
	}
	if t.zero != nil { // the moments are each rank's file (saveShards)
		t.opt.T = t.zero.T
	}
	mb, ob, err := encodeModelAndMoments(t.model.HostParams(), t.opt)
	if err != nil {
		return "", err
	}
	rng, err := encodePCG(t.rng)
	if err != nil {
		return "", err
	}
	rs := t.rlState()
	epoch, pos := t.data.Position()
	st, err := json.MarshalIndent(trainState{Step: rs.Step, Epoch: epoch, Pos: pos, RNG: rng,
		AdamT: t.opt.T, Skipped: rs.Skipped, Coef: ptr(rs.RewardKLCoef), CriticAdamT: t.criticT(), ModelConfig: t.model.Config, Time: time.Now().UTC().Format(time.RFC3339)}, "", "  ")
	if err != nil {
		return "", err
	}
	files := map[string][]byte{ckptModel: mb, ckptState: append(st, '\n'), ckptConfig: t.cfg.YAML()}
	if ob != nil {
		files[ckptOptimizer] = ob
	}
	if t.ref != nil {
		var ref []NamedTensor
		for _, p := range t.ref.HostParams() {
			w, _ := p.W.Float32s()
			ref = append(ref, NamedTensor{Name: p.Name, Shape: []int(p.W.Shape()), Data: w})
		}
		if files[ckptRef], err = EncodeSafetensors(ref, map[string]string{"format": "mtrl-example-vlm", "role": "reference"}); err != nil {
			return "", err
		}
	}
	if t.critic != nil {
		var cr []NamedTensor
		for i, p := range t.critic.model.Params() {
			w, _ := p.W.Float32s()
			shape := []int(p.W.Shape())
			cr = append(cr, NamedTensor{Name: p.Name, Shape: shape, Data: w},
				NamedTensor{Name: "exp_avg." + p.Name, Shape: shape, Data: t.critic.opt.M[i]},
				NamedTensor{Name: "exp_avg_sq." + p.Name, Shape: shape, Data: t.critic.opt.V[i]})
		}
		if files[ckptCritic], err = EncodeSafetensors(cr, map[string]string{"format": "mtrl-example-vlm", "role": "critic"}); err != nil {
			return "", err
		}
	}
	return ck.SaveWith(t.step, files, t.saveShards)
}

// Load restores a checkpoint directory written by Save.
func (t *Trainer) Load(dir string) error {
	names := []string{ckptState, ckptModel}
	if shards, err := wholeShardFiles(dir, t.model.Params()); err != nil {
		return err
	} else if shards != nil {
		names = append(names, shards...)
	} else {
		names = append(names, ckptOptimizer)
	}
	if !t.cfg.Optimization.DisableDivergence {
		names = append(names, ckptRef)
	}
	if t.critic != nil {
		names = append(names, ckptCritic)
	}
	files, err := readCheckpoint(dir, names...)
	if err != nil {
		return err
	}
	var st trainState
	if err := json.Unmarshal(files[ckptState], &st); err != nil {
		return fmt.Errorf("checkpoint %s: %w", filepath.Join(dir, ckptState), err)
	}
	if st.ModelConfig != t.model.Config {
		return fmt.Errorf("checkpoint %s: model config %+v differs from this run's %+v (worker.actor.model, dataset)", dir, st.ModelConfig, t.model.Config)
	}
	var refW [][]float32
	if !t.cfg.Optimization.DisableDivergence {
		ref, err := DecodeSafetensors(files[ckptRef], filepath.Join(dir, ckptRef))
		if err != nil {
			return err
		}
		if refW, err = paramData(ref, filepath.Join(dir, ckptRef), "", t.model.Params()); err != nil {
			return err
		}
	}
	var criticW [3][][]float32 // weights, exp_avg, exp_avg_sq
	if t.critic != nil {
		cr, err := DecodeSafetensors(files[ckptCritic], filepath.Join(dir, ckptCritic))
		if err != nil {
			return err
		}
		for j, prefix := range []string{"", "exp_avg.", "exp_avg_sq."} {
			if criticW[j], err = paramData(cr, filepath.Join(dir, ckptCritic), prefix, t.critic.model.Params()); err != nil {
				return err
			}
		}
	}
	// Validate everything before changing anything.
	ws, ms, vs, err := decodeModelAndMoments(dir, files, t.model.Params())
	if err != nil {
		return err
	}
	rng, err := decodePCG(st.RNG)
	if err != nil {
		return fmt.Errorf("checkpoint %s: rng_state: %w", dir, err)
	}
	if st.Pos < 0 || st.Pos > len(t.train) || st.Epoch < 0 || st.Step < 0 || st.AdamT < 0 || st.Skipped < 0 || st.CriticAdamT < 0 {
		return fmt.Errorf("checkpoint %s: %s out of range: step %d, data epoch %d index %d (of %d training samples), optimizer steps %d and %d, skipped %d",
			dir, ckptState, st.Step, st.Epoch, st.Pos, len(t.train), st.AdamT, st.CriticAdamT, st.Skipped)
	}
	t.wholeMoments()
	for i, p := range t.model.Params() {
		w, _ := p.W.Float32s()
		copy(w, ws[i])
		copy(t.opt.M[i], ms[i])
		copy(t.opt.V[i], vs[i])
	}
	if t.dev != nil {
		t.dev.forget(t.opt) // the loaded moments go up at the next step
	}
	if refW != nil {
		if err := t.FreezeReference(); err != nil {
			return err
		}
		for i, p := range t.ref.Params() {
			w, _ := p.W.Float32s()
			copy(w, refW[i])
		}
	}
	for i, p := range t.critic.modelParams() {
		w, _ := p.W.Float32s()
		copy(w, criticW[0][i])
		copy(t.critic.opt.M[i], criticW[1][i])
		copy(t.critic.opt.V[i], criticW[2][i])
	}
	if t.critic != nil {
		t.critic.opt.T = st.CriticAdamT
	}
	if st.Coef != nil { // older checkpoints start from the configured coefficient
		cc := t.cfg
		cc.Optimization.DivergenceCoef = *st.Coef
		if _, err = cc.Controller(); err != nil {
			return fmt.Errorf("checkpoint %s: divergence_coef %v: %w", dir, *st.Coef, err)
		}
		t.klCoef = *st.Coef
	}
	t.opt.T, t.skipped, t.step, t.rng = st.AdamT, st.Skipped, st.Step, rng
	t.rl = nil // rebuilt from this state at the next step
	return t.data.Seek(st.Epoch, st.Pos)
}

// rlState is the RL loop's state: the loop's own once it runs, else the trainer's (fresh or
// loaded from a checkpoint).
func (t *Trainer) rlState() loop.State {
	if t.rl != nil {
		return t.rl.State()
	}
	return loop.State{Step: t.step, Skipped: t.skipped, RewardKLCoef: t.klCoef}
}

func (t *Trainer) criticT() int {
	if t.critic == nil {
		return 0
	}
	return t.critic.opt.T
}

func ptr[T any](v T) *T { return &v }

// Close gives back the actor's device (worker.actor.device=cuda); a no-op on the CPU.
func (t *Trainer) Close() error {
	if t.dev == nil {
		return nil
	}
	err := t.dev.close()
	t.dev = nil
	return err
}
