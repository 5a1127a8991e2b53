package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// This file is the run loop of a model_path run, generic over the prompt type P so that any
// Hugging Face policy plugs in through an hfSession: the text model of hf.go now, a
// vision-language model later. It owns the run directory: checkpoints/global_step_N (the
// trained weights, AdamW's moments, the dropout's random state and the loop's position:
// an exact resume), validation under EasyR1's metric names, the export, and the interrupt.

// hfTrainable is the trained model of a model_path run: what a checkpoint keeps of it.
type hfTrainable interface {
	// Params are the trained parameters (with LoRA the adapters alone, PEFT's names).
	Params() ([]loop.Param, error)
	// DropoutState is the state of the random source of LoRA's dropout (nil: none);
	// SetDropoutState restores it.
	DropoutState() ([]byte, error)
	SetDropoutState([]byte) error
	// Repack rebuilds what the model derives from its weights after they were set.
	Repack() error
}

// hfSession is a model_path run's model and data for prompts of type P: what runHF needs.
type hfSession[P any] struct {
	model  hfTrainable
	policy loop.Policy[P]
	// reference returns the frozen base of the divergence; called only when it is on.
	reference func() (loop.Scorer[P], error)
	rewards   []loop.Reward[P]
	// training returns the optimizer of the trained parameters, its AdamW state and the
	// gradient sum.
	training   func(weightDecay float64) (loop.Optimizer, *loop.AdamW, loop.Gradients, error)
	train, val []P
	// export writes the model for use elsewhere into dir (the PEFT adapter and the merged
	// model in Hugging Face's layout); exported names what it wrote.
	export   func(dir string) error
	exported string
	// describe is the start line's account of the model and the data.
	describe string
	// perturb is the image perturbation of the perturbed scoring pass (nil: a text model).
	perturb perturb.Perturbation
	// close gives back the model's device at the end of the run (nil: nothing to give back).
	close func() error
}

// testHFStep, when set (tests), sees each model_path RL step's response mask, old log-probs,
// entropies, perception score (nil without the perturbed pass) and advantages, [B, T] on the
// policy's backend, before they are released.
var testHFStep func(step int, mask, oldLogProbs, entropy, perception, advantages *tensor.Tensor)

// hfState is state.json of a model_path checkpoint: with the trained weights
// (model.safetensors) and AdamW's moments (optimizer.safetensors), an exact resume.
type hfState struct {
	Step       int     `json:"global_step"`
	Epoch      int     `json:"data_epoch"`
	Pos        int     `json:"data_position"`
	AdamT      int     `json:"optimizer_step"`
	Skipped    int     `json:"skipped_steps"`
	Coef       float64 `json:"divergence_coef"`
	DropoutRNG string  `json:"dropout_rng_state,omitempty"` // base64 of the PCG's MarshalBinary
	ModelPath  string  `json:"model_path"`
	LoraRank   int     `json:"lora_rank"`
	Time       string  `json:"saved_at"`
}

// hfTrainer is a model_path run in progress: the session, its loop, the loop's data and the
// optimizer state.
type hfTrainer[P any] struct {
	cfg   Config
	s     *hfSession[P]
	loop  *loop.Loop[P]
	data  *loop.Epochs[P]
	adam  *loop.AdamW // the whole moments (nil with zero)
	steps int
	// comm and rctx make the trainer one data-parallel rank (comm nil: the only one); zero,
	// with fsdp.sharding_strategy SHARD_GRAD_OP, holds this rank's moments (hfparallel.go).
	comm collective.Comm
	rctx context.Context
	zero zeroMoments
	// devOpt is the optimizer of a model on a device (worker.actor.device=cuda), whose moments
	// live there: t.adam is its host copy, refreshed for a checkpoint.
	devOpt *loop.DeviceAdamW
	// off holds the masters of a device model whose optimizer is offloaded
	// (offload.offload_optimizer): t.adam is the host AdamW's own state.
	off *loop.Offload
}

// newHFTrainer builds the RL loop of one rank: the session's perturbation (none for a text
// model), the reference the frozen base.
func newHFTrainer[P any](cfg Config, s *hfSession[P], steps int) (*hfTrainer[P], error) {
	return newHFTrainerRank(cfg, s, steps, nil, nil)
}

// newHFTrainerRank builds the RL loop of rank comm (nil: the only one) with the gradient
// reduction and optimizer of worker.actor.grad_reduce and fsdp.sharding_strategy.
func newHFTrainerRank[P any](cfg Config, s *hfSession[P], steps int, comm collective.Comm, rctx context.Context) (*hfTrainer[P], error) {
	update, err := cfg.Update()
	if err != nil {
		return nil, err
	}
	adv, err := cfg.Advantage()
	if err != nil {
		return nil, err
	}
	t := &hfTrainer[P]{cfg: cfg, s: s, steps: steps, data: loop.NewEpochs(s.train, cfg.Dataset.Shuffle, cfg.Dataset.Seed), comm: comm, rctx: rctx}
	if t.rctx == nil {
		t.rctx = context.Background()
	}
	parts := loop.Parts[P]{Policy: s.policy, Rewards: s.rewards, Data: t.data, Comm: comm}
	if !cfg.Optimization.DisableDivergence {
		if parts.Reference, err = s.reference(); err != nil {
			return nil, err
		}
	}
	if parts.Optimizer, parts.Gradients, err = t.actorTraining(); err != nil {
		return nil, err
	}
	lc := cfg.loopConfig(steps, adv, update)
	lc.Perturb = s.perturb
	cfg.Worker.Actor.scaleLoop(&lc)
	if t.loop, err = loop.New(lc, parts); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return t, nil
}

// files returns a checkpoint's files of the current state.
func (t *hfTrainer[P]) files() (map[string][]byte, error) {
	ps, err := t.s.model.Params()
	if err != nil {
		return nil, err
	}
	if t.devOpt != nil { // the device's moments come down into t.adam
		if err := t.devOpt.SaveMoments(); err != nil {
			return nil, err
		}
	}
	var ws, moments []NamedTensor
	for i, p := range ps {
		w, err := tensor.HostFloat32s(p.Value)
		if err != nil {
			return nil, err
		}
		shape := []int(p.Value.Shape())
		ws = append(ws, NamedTensor{Name: p.Name, Shape: shape, Data: w})
		if t.zero == nil { // ZeRO's moments are each rank's file (saveMomentShards)
			moments = append(moments, NamedTensor{Name: "exp_avg." + p.Name, Shape: shape, Data: t.adam.M[i]},
				NamedTensor{Name: "exp_avg_sq." + p.Name, Shape: shape, Data: t.adam.V[i]})
		}
	}
	files := map[string][]byte{ckptConfig: t.cfg.YAML()}
	meta := map[string]string{"format": "mtrl-hf", "model_path": t.cfg.Worker.Actor.Model.ModelPath}
	if files[ckptModel], err = EncodeSafetensors(ws, meta); err != nil {
		return nil, err
	}
	adamT := t.optimizerSteps()
	if t.zero == nil {
		if files[ckptOptimizer], err = EncodeSafetensors(moments, meta); err != nil {
			return nil, err
		}
	}
	ls := t.loop.State()
	epoch, pos := t.data.Position()
	st := hfState{Step: ls.Step, Epoch: epoch, Pos: pos, AdamT: adamT, Skipped: ls.Skipped, Coef: ls.RewardKLCoef,
		ModelPath: t.cfg.Worker.Actor.Model.ModelPath, LoraRank: t.cfg.Worker.Actor.Model.LoraRank,
		Time: time.Now().UTC().Format(time.RFC3339)}
	rng, err := t.s.model.DropoutState()
	if err != nil {
		return nil, err
	}
	if rng != nil {
		st.DropoutRNG = base64.StdEncoding.EncodeToString(rng)
	}
	js, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, err
	}
	files[ckptState] = append(js, '\n')
	return files, nil
}

// save writes checkpoints/global_step_N of the current step, with the export in it.
func (t *hfTrainer[P]) save(ck *Checkpoints) (string, error) {
	files, err := t.files()
	if err != nil {
		return "", err
	}
	return ck.SaveWith(t.loop.State().Step, files, func(dir string) error {
		if err := t.saveShards(dir); err != nil {
			return err
		}
		return t.s.export(dir)
	})
}

// trainedWeights reads and checks the trained weights of a checkpoint's model.safetensors
// (and with prefixes the moments of its optimizer.safetensors), in Params order.
func trainedWeights(dir string, files map[string][]byte, file string, ps []loop.Param, prefixes ...string) ([][][]float32, error) {
	ts, err := DecodeSafetensors(files[file], filepath.Join(dir, file))
	if err != nil {
		return nil, err
	}
	out := make([][][]float32, len(prefixes))
	for j, prefix := range prefixes {
		for _, p := range ps {
			x, ok := ts[prefix+p.Name]
			if !ok || !slices.Equal(x.Shape, []int(p.Value.Shape())) {
				return nil, fmt.Errorf("checkpoint %s: %s: %s%s is missing or not of shape %v (another model, or LoRA settings?)", dir, file, prefix, p.Name, p.Value.Shape())
			}
			out[j] = append(out[j], x.Data)
		}
	}
	if len(ts) != len(ps)*len(prefixes) {
		return nil, fmt.Errorf("checkpoint %s: %s holds %d tensors, want %d (another model, or LoRA settings?)", dir, file, len(ts), len(ps)*len(prefixes))
	}
	return out, nil
}

// setWeights copies ws into the trained parameters (an upload for a model on a device) and
// repacks the model.
func (t *hfTrainer[P]) setWeights(ps []loop.Param, ws [][]float32) error {
	for i, p := range ps {
		if !p.Value.IsHost() {
			h, err := tensor.FromFloat32(ws[i], p.Value.Shape()...)
			if err == nil {
				err = tensor.CopyInto(p.Value, h)
			}
			if err != nil {
				return err
			}
			continue
		}
		w, err := p.Value.Float32s()
		if err != nil {
			return err
		}
		copy(w, ws[i])
	}
	if t.off != nil { // the host masters follow the device's float32 weights (exact)
		if err := t.off.Download(); err != nil {
			return err
		}
	}
	return t.s.model.Repack()
}

// load restores a checkpoint written by save: weights, moments, dropout state, data position
// and the loop's state. Everything is checked before anything changes.
func (t *hfTrainer[P]) load(dir string) error {
	ps, err := t.s.model.Params()
	if err != nil {
		return err
	}
	files, shards, err := t.readMoments(dir, ps, ckptState, ckptModel)
	if err != nil {
		return err
	}
	var st hfState
	if err := json.Unmarshal(files[ckptState], &st); err != nil {
		return fmt.Errorf("checkpoint %s: %s: %w", dir, ckptState, err)
	}
	ws, err := trainedWeights(dir, files, ckptModel, ps, "")
	if err != nil {
		return err
	}
	var ms [][][]float32 // the whole moments of optimizer.safetensors
	if shards == nil {
		if ms, err = trainedWeights(dir, files, ckptOptimizer, ps, "exp_avg.", "exp_avg_sq."); err != nil {
			return err
		}
	}
	if st.Step < 0 || st.Epoch < 0 || st.Pos < 0 || st.Pos > len(t.s.train) || st.AdamT < 0 || st.Skipped < 0 {
		return fmt.Errorf("checkpoint %s: %s out of range: step %d, data epoch %d index %d (of %d prompts), optimizer steps %d, skipped %d",
			dir, ckptState, st.Step, st.Epoch, st.Pos, len(t.s.train), st.AdamT, st.Skipped)
	}
	var rng []byte
	if have, _ := t.s.model.DropoutState(); (have != nil) != (st.DropoutRNG != "") {
		return fmt.Errorf("checkpoint %s: %s: dropout_rng_state present %v, but this run's model has dropout state %v", dir, ckptState, st.DropoutRNG != "", have != nil)
	}
	if st.DropoutRNG != "" {
		if rng, err = base64.StdEncoding.DecodeString(st.DropoutRNG); err != nil {
			return fmt.Errorf("checkpoint %s: dropout_rng_state: %w", dir, err)
		}
		if err := t.s.model.SetDropoutState(rng); err != nil {
			return fmt.Errorf("checkpoint %s: dropout_rng_state: %w", dir, err)
		}
	}
	if err := t.loop.Restore(loop.State{Step: st.Step, Skipped: st.Skipped, RewardKLCoef: st.Coef}); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := t.data.Seek(st.Epoch, st.Pos); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := t.setMoments(ms, shards, st.AdamT); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return t.setWeights(ps, ws[0])
}

// loadWeights sets the trained weights from a checkpoint's model.safetensors
// (training.load_checkpoint_path): a new run from them, with a fresh optimizer.
func (t *hfTrainer[P]) loadWeights(dir string) error {
	files, err := readCheckpoint(dir, ckptModel)
	if err != nil {
		return fmt.Errorf("training.load_checkpoint_path: %w", err)
	}
	ps, err := t.s.model.Params()
	if err != nil {
		return err
	}
	ws, err := trainedWeights(dir, files, ckptModel, ps, "")
	if err != nil {
		return fmt.Errorf("training.load_checkpoint_path: %w", err)
	}
	return t.setWeights(ps, ws[0])
}

// validate generates one response per validation prompt (worker.rollout.val_temperature; 0 is
// greedy) and scores it with the training rewards, under EasyR1's names: val/reward_score (the
// mean weighted reward) and val/<name>_reward for each reward and overall. A row's random
// source depends on its index alone, so validation changes nothing of the training.
func (t *hfTrainer[P]) validate() (Metrics, error) {
	c, ro := t.cfg, t.cfg.Worker.Rollout
	n := len(t.s.val)
	bs := c.Dataset.ValBatchSize
	if bs <= 0 {
		bs = n
	}
	s := loop.Sampling{N: 1, MaxTokens: c.Dataset.MaxResponseLength, Temperature: ro.ValTemperature, TopP: ro.TopP, TopK: ro.TopK}
	sums := map[string]float64{}
	counts := map[string]int{}
	for lo := 0; lo < n; lo += bs {
		hi := min(n, lo+bs)
		rngs := make([]*rand.Rand, hi-lo)
		for i := range rngs {
			rngs[i] = rand.New(rand.NewPCG(c.Training.Seed^0x76616c6964, uint64(lo+i))) // "valid"
		}
		prompts := t.s.val[lo:hi]
		comps, err := t.s.policy.Generate(prompts, s, rngs)
		if err != nil {
			return nil, fmt.Errorf("validation: %w", err)
		}
		overall := make([]float64, len(prompts))
		for _, r := range t.s.rewards {
			v, err := r.Func(loop.RewardInputs[P]{Step: t.loop.State().Step, Prompts: prompts, Completions: comps, Metrics: map[string]float64{}})
			if err != nil {
				return nil, fmt.Errorf("validation: reward %s: %w", r.Name, err)
			}
			for i, x := range v {
				if math.IsNaN(x) {
					continue
				}
				sums[r.Name] += x
				counts[r.Name]++
				overall[i] += r.Weight * x
			}
		}
		for _, x := range overall {
			sums["overall"] += x
			counts["overall"]++
		}
	}
	m := Metrics{}
	for name, sum := range sums {
		m["val/"+name+"_reward"] = sum / float64(counts[name])
	}
	m["val/reward_score"] = m["val/overall_reward"]
	return m, nil
}

// runHF is Run with a model_path session: RL steps with one metrics.jsonl line each,
// validation, checkpoints (every save_freq steps, at the end and on an interrupt) that resume
// exactly with find_last_checkpoint, and the export in the run directory.
//
// With training.n_gpus_per_node = N > 1 it runs N data-parallel ranks in this process, and
// with training.nnodes = M > 1 (-tags mpi, mpirun -np M) M processes of N ranks each
// (hfparallel.go): every rank opens its own replica, rank 0 writes and prints.
func runHF[P any](ctx context.Context, cfg Config, open func(Config) (*hfSession[P], error), stdout, stderr io.Writer) (*Summary, error) {
	return runHFRanks(ctx, cfg, open, stdout, stderr)
}

// runHFRank is one rank of runHF (comm nil: the only one). ctx is the run's (an interrupt),
// rctx the rank's (cancelled when another rank fails).
func runHFRank[P any](ctx context.Context, cfg Config, open func(Config) (*hfSession[P], error), comm collective.Comm, rctx context.Context, stdout, stderr io.Writer) (_ *Summary, err error) {
	wall := time.Now()
	c := cfg.Training
	lead := comm == nil || comm.Rank() == 0
	if rctx == nil {
		rctx = context.Background()
	}
	dir, loadDir, err := rankRunDir(rctx, c, comm, lead, stderr)
	if err != nil {
		return nil, err
	}
	ck := &Checkpoints{Root: filepath.Join(dir, "checkpoints")}
	ckDir, ckStep, err := ck.Last()
	if err != nil {
		return nil, err
	}
	metricsPath := filepath.Join(dir, "metrics.jsonl")
	var damaged []string
	warn := func(msg string) { fmt.Fprintln(stderr, "warning:", msg) }
	switch {
	case ckDir != "":
		if !c.FindLastCheckpoint {
			return nil, fmt.Errorf("training.run_dir %s already holds checkpoints (newest: step %d): set training.find_last_checkpoint=true to resume, or choose another run_dir", dir, ckStep)
		}
		if ckDir, ckStep, damaged, err = ck.chooseCheckpoint("global_step_", ckStep, c.FallbackCheckpoint, warn); err != nil {
			return nil, err
		}
		if err := checkResumable(cfg, ckDir); err != nil {
			return nil, err
		}
	case c.FindLastCheckpoint && c.ValOnly && c.LoadCheckpointPath == "":
		return nil, fmt.Errorf("training.val_only with find_last_checkpoint: %s holds no complete checkpoint", ck.Root)
	default:
		if stepped, err := metricsPastStep0(metricsPath); err != nil || stepped {
			return nil, fmt.Errorf("training.run_dir %s holds metrics.jsonl with RL steps but no complete checkpoint: choose another run_dir, or remove that directory", dir)
		}
	}
	if comm != nil { // every rank must have chosen the same checkpoint (a shared filesystem)
		if err := sameChoice(rctx, comm, dir, fmt.Sprint(ckDir != "", ckStep)); err != nil {
			return nil, err
		}
	}
	if created := firstMissing(dir); created != "" && lead {
		defer func() {
			if err != nil {
				removeEmptyUpTo(dir, created)
			}
		}()
	}
	s, err := open(cfg)
	if err != nil {
		return nil, err
	}
	if s.close != nil {
		defer func() {
			if cerr := s.close(); err == nil && cerr != nil {
				err = fmt.Errorf("worker.actor.device: %w", cerr)
			}
		}()
	}
	steps := c.Steps
	if steps == 0 {
		steps = c.TotalEpochs * max(1, len(s.train)/cfg.Dataset.RolloutBatchSize)
	}
	t, err := newHFTrainerRank(cfg, s, steps, comm, rctx)
	if err != nil {
		return nil, err
	}
	resumed := ckDir != ""
	if resumed {
		if err := t.load(ckDir); err != nil {
			return nil, err
		}
		fmt.Fprintf(stderr, "resuming from %s (step %d)\n", ckDir, ckStep)
	} else if loadDir != "" {
		if err := t.loadWeights(loadDir); err != nil {
			return nil, withIntactAlternative(err, loadDir)
		}
		fmt.Fprintf(stderr, "weights from %s (training.load_checkpoint_path)\n", loadDir)
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, err
	}
	if comm != nil { // every rank has loaded: now rank 0 may move and write
		if err := sameChoice(rctx, comm, dir, "loaded"); err != nil {
			return nil, err
		}
		fmt.Fprintf(stderr, "data parallel: %d ranks (training.nnodes %d x n_gpus_per_node %d)%s; rank 0 writes the outputs\n",
			comm.Size(), max(1, c.Nnodes), max(1, c.NGPUsPerNode), deviceNote(cfg.Worker.Actor))
	}
	if len(damaged) > 0 && lead {
		if err := moveAside(damaged); err != nil {
			return nil, err
		}
	}
	cfg.Training.RunDir = dir
	if c.ValOnly {
		if !lead {
			return nil, nil
		}
		return nil, t.validateOnly(dir, stdout)
	}
	if !lead {
		return nil, t.follow(ctx, resumed)
	}
	if len(s.val) == 0 && (c.ValBeforeTrain || c.ValFreq > 0) {
		fmt.Fprintln(stderr, "no validation: no validation prompts (dataset.val_files, or dataset.val_size for the generated task)")
	}
	keep := -1
	if resumed {
		keep = t.loop.State().Step
	}
	mlog, err := OpenMetricsLog(metricsPath, keep)
	if err != nil {
		return nil, err
	}
	defer mlog.Close()
	loggers := []stepLogger{mlog}
	for _, l := range c.Logger {
		switch l {
		case "console":
			loggers = append(loggers, consoleLog{stdout})
		case "tensorboard":
			tb, err := OpenTensorBoard(dir)
			if err != nil {
				return nil, err
			}
			defer tb.Close()
			loggers = append(loggers, tb)
		case "wandb", "swanlab", "mlflow":
			fmt.Fprintf(stderr, "warning: config: training.logger %s: accepted and ignored: no %s client in Go here; metrics go to metrics.jsonl (and TensorBoard with logger tensorboard)\n", l, l)
		}
	}
	logStep := func(step int, m Metrics) error {
		for _, l := range loggers {
			if err := l.Log(step, m); err != nil {
				return err
			}
		}
		return nil
	}
	if err := WriteFileAtomic(filepath.Join(dir, "config.yaml"), cfg.YAML()); err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "%s; %d RL steps; run dir %s\n", s.describe, steps, dir)
	validation := func(m Metrics) error {
		if len(s.val) == 0 {
			return nil
		}
		t0 := time.Now()
		v, err := t.validate()
		if err != nil {
			return err
		}
		for k, x := range v {
			m[k] = x
		}
		m["timing_s/testing"] = time.Since(t0).Seconds()
		return nil
	}
	lastSaved := -1
	if resumed {
		lastSaved = t.loop.State().Step
	} else if c.ValBeforeTrain && len(s.val) > 0 {
		line := Metrics{}
		if err := validation(line); err != nil {
			return nil, err
		}
		if err := logStep(0, line); err != nil {
			return nil, err
		}
	}
	bar := NewProgress(stderr, "RL", steps, c.Progress)
	interrupted := false
	for t.loop.State().Step < steps {
		stop, err := t.agree(ctx.Err() != nil)
		if err != nil {
			return nil, err
		}
		if stop {
			interrupted = true
			break
		}
		// A step is not interruptible: finishing it loses nothing.
		res, err := t.loop.Step(rctx)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", t.loop.State().Step+1, err)
		}
		m := Metrics(res.Metrics)
		if testHFStep != nil {
			testHFStep(t.loop.State().Step, res.ResponseMask, res.OldLogProbs, res.Entropy, res.PerceptionScore, res.Advantages)
		}
		res.Release()
		step := t.loop.State().Step
		last := step == steps
		if (c.ValFreq > 0 && step%c.ValFreq == 0) || last {
			if err := validation(m); err != nil {
				return nil, err
			}
		}
		if err := logStep(step, m); err != nil {
			return nil, err
		}
		fmt.Fprintf(stdout, "step %d/%d: reward %.3f accuracy %.3f\n", step, steps, m["reward/overall"], m["reward/accuracy"])
		if (c.SaveFreq > 0 && step%c.SaveFreq == 0) || last {
			if _, err := t.save(ck); err != nil {
				return nil, fmt.Errorf("checkpoint at step %d: %w", step, err)
			}
			lastSaved = step
		}
		status := fmt.Sprintf("reward %.3f acc %.3f", m["reward/overall"], m["reward/accuracy"])
		if v, ok := m["val/reward_score"]; ok {
			status += fmt.Sprintf(" val %.3f", v)
		}
		bar.Update(step, status)
		if testAfterStep != nil {
			testAfterStep(step)
		}
	}
	bar.Done()
	step := t.loop.State().Step
	if interrupted && lastSaved != step {
		if _, err := t.save(ck); err != nil {
			return nil, fmt.Errorf("interrupted, and the checkpoint of step %d failed: %w", step, err)
		}
	}
	if err := s.export(dir); err != nil {
		return nil, fmt.Errorf("saving the model: %w", err)
	}
	lines, err := ReadMetrics(metricsPath)
	if err != nil {
		return nil, err
	}
	sum := summarize(dir, lines)
	for _, l := range lines { // EasyR1's names of the validation accuracy and format
		acc, format := l.Metrics["val/accuracy_reward"], l.Metrics["val/format_reward"]
		if acc == nil || format == nil {
			continue
		}
		if l.Step == 0 {
			sum.ValAccStart, sum.ValFormatStart = *acc, *format
		} else {
			sum.ValAccEnd, sum.ValFormatEnd = *acc, *format
		}
	}
	sum.WallSeconds = time.Since(wall).Seconds()
	if resumed {
		if old, err := readSummary(filepath.Join(dir, "summary.json")); err == nil {
			sum.WallSeconds += old.WallSeconds
		}
	}
	if err := writeSummary(dir, sum); err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "saved in %s: %s\n", dir, s.exported)
	if interrupted {
		fmt.Fprintf(stderr, "interrupted after step %d of %d; checkpoint %s\nresume with:\n  go run ./examples/trainer -config %s training.find_last_checkpoint=true\n",
			step, steps, filepath.Join(ck.Root, stepDirName(step)), shellQuote(filepath.Join(dir, "config.yaml")))
		return &sum, ErrInterrupted
	}
	return &sum, nil
}

// validateOnly is training.val_only: validate the weights (model_path's, or the checkpoint's),
// print the result and write it to dir/validation.json.
func (t *hfTrainer[P]) validateOnly(dir string, stdout io.Writer) error {
	if len(t.s.val) == 0 {
		return keyErr("training.val_only", "is true, but there are no validation prompts (dataset.val_files, or dataset.val_size for the generated task)")
	}
	m, err := t.validate()
	if err != nil {
		return err
	}
	step := t.loop.State().Step
	fmt.Fprintf(stdout, "validation of step %d on %d prompts: reward %.3f, accuracy %.3f, format %.3f\n",
		step, len(t.s.val), m["val/reward_score"], m["val/accuracy_reward"], m["val/format_reward"])
	return WriteFileAtomic(filepath.Join(dir, "validation.json"), MarshalLine(step, m))
}
