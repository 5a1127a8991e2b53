package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// File modes of everything a run writes.
const (
	fileMode os.FileMode = 0o644
	dirMode  os.FileMode = 0o755
)

// ErrInterrupted is returned by Run when its context was cancelled (SIGINT / SIGTERM): the run
// stopped between steps with a checkpoint of the last one.
var ErrInterrupted = errors.New("interrupted")

// testAfterStep and testAfterWarmStep, when set (tests), run after every RL step's outputs are
// written and after every warm-start step.
var testAfterStep, testAfterWarmStep func(step int)

// Run trains with cfg and writes every output into the run directory. stdout gets the summary
// table, stderr the progress and warnings. When ctx is cancelled the run finishes the current
// step, checkpoints it, prints the command that resumes, and returns ErrInterrupted.
//
// With training.n_gpus_per_node = N > 1 it runs N data-parallel ranks in this process, and
// with training.nnodes = M > 1 (a binary built with -tags mpi, started by mpirun -np M) M
// processes of N ranks each (parallel.go). Rank 0 writes every file and prints; the
// others only compute.
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) (*Summary, error) {
	c := cfg.Training
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Worker.Actor.Model.ModelPath != "" {
		return runModelPath(ctx, cfg, stdout, stderr)
	}
	inter, err := processComm(c.Nnodes)
	if err != nil {
		return nil, err
	}
	n := max(1, c.NGPUsPerNode)
	if n == 1 && inter == nil {
		return runRank(ctx, cfg, nil, nil, stdout, stderr)
	}
	var sum *Summary
	interrupted := false
	err = collective.Run(context.Background(), n, func(rctx context.Context, comm collective.Comm) error {
		if inter != nil {
			comm = collective.Hierarchical(comm, inter)
		}
		out, errw := stdout, stderr
		if comm.Rank() != 0 {
			out, errw = io.Discard, io.Discard
		}
		s, err := runRank(ctx, cfg, comm, rctx, out, errw)
		if comm.Rank() == 0 {
			sum, interrupted = s, errors.Is(err, ErrInterrupted)
		}
		if errors.Is(err, ErrInterrupted) {
			return nil // every rank stopped at the same step (Trainer.agree)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if interrupted {
		return sum, ErrInterrupted
	}
	return sum, nil
}

// runRank is one rank of Run (comm nil: the only one). ctx is the run's (an interrupt), rctx the
// rank's (cancelled when another rank fails).
func runRank(ctx context.Context, cfg Config, comm collective.Comm, rctx context.Context, stdout, stderr io.Writer) (_ *Summary, err error) {
	wall := time.Now()
	c := cfg.Training
	lead := comm == nil || comm.Rank() == 0
	dir, loadDir, err := rankRunDir(rctx, c, comm, lead, stderr)
	if err != nil {
		return nil, err
	}
	if lead {
		// A start that fails before writing anything leaves no empty directories behind.
		if created := firstMissing(dir); created != "" {
			defer func() {
				if err != nil {
					removeEmptyUpTo(dir, created)
				}
			}()
		}
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, err
	}
	cfg.Training.RunDir = dir
	for _, w := range cfg.Warnings() {
		fmt.Fprintln(stderr, "warning:", w)
	}
	for _, l := range c.Logger {
		switch l {
		case "wandb", "swanlab", "mlflow":
			fmt.Fprintf(stderr, "warning: config: training.logger %s: accepted and ignored: no %s client in Go here; metrics go to metrics.jsonl (and TensorBoard with logger tensorboard)\n", l, l)
		case "file":
			fmt.Fprintln(stderr, "warning: config: training.logger file: metrics.jsonl is always written (logger jsonl)")
		}
	}
	if comm != nil {
		cfg.deviceOrdinal = comm.Rank() % max(1, c.NGPUsPerNode)
	}
	t, err := NewTrainer(cfg)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	if comm != nil {
		t.attach(comm, rctx)
		fmt.Fprintf(stderr, "data parallel: %d ranks (training.nnodes %d x n_gpus_per_node %d), %s devices; rank 0 writes the outputs\n",
			comm.Size(), max(1, c.Nnodes), max(1, c.NGPUsPerNode), cmp.Or(cfg.Worker.Actor.Device, "cpu"))
	}
	ck := &Checkpoints{Root: filepath.Join(dir, "checkpoints")}
	ckDir, ckStep, err := ck.Last()
	if err != nil {
		return nil, err
	}
	metricsPath := filepath.Join(dir, "metrics.jsonl")
	resumed := false
	warmDir, warmStep := "", 0 // a warm-start checkpoint to resume
	var damaged []string       // checkpoints that failed their check, passed over (fallback_checkpoint)
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
		if err := t.Load(ckDir); err != nil {
			return nil, err
		}
		resumed = true
		fmt.Fprintf(stderr, "resuming from %s (step %d)\n", ckDir, ckStep)
		if t.lead() { // a kill between global_step_0 and the warm start's removal left them
			if err := ck.removeWarm(-1); err != nil {
				return nil, err
			}
		}
	case c.FindLastCheckpoint && c.ValOnly && c.LoadCheckpointPath == "":
		return nil, fmt.Errorf("training.val_only with find_last_checkpoint: %s holds no complete checkpoint", ck.Root)
	default:
		// A run stopped before its first checkpoint (inside the warm start, or while writing
		// that checkpoint) has at most the step-0 line: it starts again, from its warm-start
		// checkpoint when there is one.
		if stepped, err := metricsPastStep0(metricsPath); err != nil || stepped {
			return nil, fmt.Errorf("training.run_dir %s holds metrics.jsonl with RL steps but no complete checkpoint: choose another run_dir, or remove that directory", dir)
		}
		if c.LoadCheckpointPath == "" && t.hasReferences && c.SFTSteps > 0 {
			if warmDir, warmStep, err = ck.newest(warmPrefix); err != nil {
				return nil, err
			}
		}
		if warmDir != "" && !c.FindLastCheckpoint {
			return nil, fmt.Errorf("training.run_dir %s holds a warm-start checkpoint (step %d of %d): set training.find_last_checkpoint=true to resume it, or choose another run_dir", dir, warmStep, c.SFTSteps)
		}
		if warmDir != "" {
			if warmDir, warmStep, damaged, err = ck.chooseCheckpoint(warmPrefix, warmStep, c.FallbackCheckpoint, warn); err != nil {
				return nil, err
			}
		}
	}
	if comm != nil {
		// Every rank must have made the same choice: with several processes the run directory
		// has to be on a filesystem they share. This is also the barrier before rank 0 writes.
		seen, err := collective.AllGatherBytes(rctx, comm, []byte(fmt.Sprint(resumed, ckStep, warmStep)))
		if err != nil {
			return nil, err
		}
		for r, s := range seen {
			if string(s) != string(seen[0]) {
				return nil, fmt.Errorf("training.run_dir %s: rank %d sees checkpoint state %q, rank 0 %q: put the run directory on a filesystem every process shares", dir, r, s, seen[0])
			}
		}
	}
	if lead && len(damaged) > 0 { // every rank has chosen: out of the way, kept for inspection
		if err := moveAside(damaged); err != nil {
			return nil, err
		}
	}
	if loadDir != "" && !resumed {
		if err := t.LoadWeights(loadDir); err != nil {
			return nil, withIntactAlternative(err, loadDir)
		}
		fmt.Fprintf(stderr, "weights from %s (training.load_checkpoint_path)\n", loadDir)
	}
	if c.ValOnly {
		return nil, t.validateOnly(dir, stdout)
	}

	keep := -1
	if resumed && lead {
		keep = t.step
		for _, name := range []string{"rollouts.md", "attention_diagnostics.md"} {
			if err := truncateRollouts(filepath.Join(dir, name), keep); err != nil {
				return nil, err
			}
		}
	}
	var loggers []stepLogger
	if lead {
		mlog, err := OpenMetricsLog(metricsPath, keep)
		if err != nil {
			return nil, err
		}
		defer mlog.Close()
		loggers = append(loggers, mlog)
	}
	for _, l := range c.Logger {
		if !lead {
			break
		}
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
	if lead {
		if err := WriteFileAtomic(filepath.Join(dir, "config.yaml"), cfg.YAML()); err != nil {
			return nil, err
		}
	}
	save := func() error {
		if !lead { // with sharding, this rank's moments
			return t.saveShards("")
		}
		_, err := t.Save(ck)
		return err
	}
	fmt.Fprintf(stderr, "run dir %s: %d train / %d val prompts, vocabulary %d words, model %d parameters, %d RL steps\n",
		dir, len(t.train), len(t.val), t.tok.VocabSize(), t.model.NumParams(), t.steps)

	if t.droppedLong > 0 {
		fmt.Fprintf(stderr, "dropped %d training prompts longer than dataset.max_prompt_length %d (filter_overlong_prompts)\n", t.droppedLong, cfg.Dataset.MaxPromptLength)
	}
	if t.ignoredVideos > 0 {
		fmt.Fprintf(stderr, "warning: dataset.ignore_videos: %d videos listed by the data's rows (column %s) are not read: the model sees one image per prompt\n", t.ignoredVideos, cfg.Dataset.VideoKey)
	}
	if t.valOOV > 0 {
		uniq := map[string]bool{}
		var ex []string
		for _, w := range t.valOOVWords {
			if !uniq[w] && len(ex) < 10 {
				ex = append(ex, w)
			}
			uniq[w] = true
		}
		fmt.Fprintf(stderr, "validation prompts hold %d words (%d distinct) outside the vocabulary built from the training data, read as <unk> (metric val/oov_words): %s\n",
			t.valOOV, len(uniq), strings.Join(ex, " "))
	}
	if !t.hasObjects {
		fmt.Fprintln(stderr, "no visual-token diagnostics (perception/precision, recall): the data has no objects field")
	}
	lastSaved := -1
	if resumed {
		lastSaved = t.step
	} else {
		// Warm start, with validation before and after it (the step-0 line), then a checkpoint.
		line := Metrics{}
		warm := &warmRun{ck: ck, every: c.SFTSaveFreq, valBefore: math.NaN()}
		if warmDir != "" {
			if err := checkResumable(cfg, warmDir); err != nil {
				return nil, err
			}
			if warm.from, err = t.loadWarm(warmDir); err != nil {
				return nil, err
			}
			fmt.Fprintf(stderr, "resuming the warm start from %s (step %d of %d)\n", warmDir, warmStep, c.SFTSteps)
		}
		if c.ValBeforeTrain {
			switch {
			case warm.from == nil:
				v, err := t.Validate()
				if err != nil {
					return nil, err
				}
				warm.valBefore = v.Accuracy
			case warm.from.st.ValBefore != nil:
				warm.valBefore = *warm.from.st.ValBefore
			}
			line["sft/val_accuracy_before"] = warm.valBefore
		}
		switch {
		case c.LoadCheckpointPath != "":
			fmt.Fprintln(stderr, "no warm start: the weights come from training.load_checkpoint_path")
		case !t.hasReferences:
			fmt.Fprintln(stderr, "no warm start: the training data has no reference responses (the optional response field); RL starts from the random policy")
		case c.SFTSteps > 0:
			lastWarm := warmDir
			warm.saved = func(d string, _ int) { lastWarm = d }
			warm.started = time.Now()
			loss, err := t.warmStart(ctx, NewProgress(stderr, "warm start", c.SFTSteps, c.Progress), warm)
			if errors.Is(err, ErrInterrupted) {
				if lastWarm == "" {
					fmt.Fprintf(stderr, "interrupted before the warm start's first step: nothing to resume; run again (or remove %s)\n", dir)
				} else {
					fmt.Fprintf(stderr, "interrupted during the warm start; checkpoint %s\nresume with:\n  go run ./examples/trainer -config %s training.find_last_checkpoint=true\n",
						lastWarm, shellQuote(filepath.Join(dir, "config.yaml")))
				}
				return nil, err
			}
			if err != nil {
				return nil, fmt.Errorf("warm start: %w", err)
			}
			line["sft/loss"] = loss
			line["timing_s/sft"] = warm.seconds()
		}
		if err := t.FreezeReference(); err != nil {
			return nil, err
		}
		if c.ValBeforeTrain {
			t0 := time.Now()
			v, err := t.Validate()
			if err != nil {
				return nil, err
			}
			v.put(line)
			line["timing_s/testing"] = time.Since(t0).Seconds()
		}
		if err := logStep(0, line); err != nil {
			return nil, err
		}
		if err := save(); err != nil {
			return nil, err
		}
		lastSaved = 0
		if lead { // the warm start is in global_step_0 now
			if err := ck.removeWarm(-1); err != nil {
				return nil, err
			}
		}
	}

	bar := NewProgress(stderr, "RL", t.steps, c.Progress)
	// writesRollouts says whether step s (1-based) appends to rollouts.md.
	writesRollouts := func(s int) bool {
		return lead && c.RolloutSamples > 0 && (s == 1 || s == t.steps || (c.RolloutLogFreq > 0 && s%c.RolloutLogFreq == 0))
	}
	interrupted := false
	for t.step < t.steps {
		stop, err := t.agree(ctx.Err() != nil)
		if err != nil {
			return nil, err
		}
		if stop {
			interrupted = true
			break
		}
		// A step is not interruptible: it takes seconds, and finishing it loses nothing.
		t.rolloutDetail = writesRollouts(t.step + 1)
		res, err := t.Step()
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", t.step+1, err)
		}
		m, s := res.Metrics, t.step
		last := s == t.steps
		if (c.ValFreq > 0 && s%c.ValFreq == 0) || last {
			t0 := time.Now()
			v, err := t.Validate()
			if err != nil {
				return nil, err
			}
			v.put(m)
			m["timing_s/testing"] = time.Since(t0).Seconds()
		}
		if err := logStep(s, m); err != nil {
			return nil, err
		}
		if writesRollouts(s) {
			if err := writeRollouts(dir, s, cfg.Worker.Rollout.N, c.RolloutSamples, res.Rollouts); err != nil {
				return nil, err
			}
			if res.MDI != nil {
				if err := writeAttentionDiagnostics(dir, s, c.RolloutSamples, t.model.Config.Layers, res.MDI, m); err != nil {
					return nil, err
				}
			}
		}
		if (c.SaveFreq > 0 && s%c.SaveFreq == 0) || last {
			if err := save(); err != nil {
				return nil, err
			}
			lastSaved = s
		}
		status := fmt.Sprintf("reward %.3f acc %.3f", m["reward/overall"], m["reward/accuracy"])
		if v, ok := m["val/accuracy"]; ok {
			status += fmt.Sprintf(" val %.3f", v)
		}
		bar.Update(s, status)
		if testAfterStep != nil {
			testAfterStep(s)
		}
	}
	bar.Done()
	if interrupted && lastSaved != t.step {
		if err := save(); err != nil {
			return nil, fmt.Errorf("interrupted, and the checkpoint of step %d failed: %w", t.step, err)
		}
	}
	if !lead {
		if interrupted {
			return nil, ErrInterrupted
		}
		return nil, nil
	}

	lines, err := ReadMetrics(metricsPath)
	if err != nil {
		return nil, err
	}
	if err := writePlot(dir, lines); err != nil {
		return nil, err
	}
	sum := summarize(dir, lines)
	sum.WallSeconds = time.Since(wall).Seconds()
	if resumed { // the wall time of the earlier segments
		if old, err := readSummary(filepath.Join(dir, "summary.json")); err == nil {
			sum.WallSeconds += old.WallSeconds
		}
	}
	if err := writeSummary(dir, sum); err != nil {
		return nil, err
	}
	printSummary(stdout, sum)
	if interrupted {
		fmt.Fprintf(stderr, "interrupted after step %d of %d; checkpoint %s\nresume with:\n  go run ./examples/trainer -config %s training.find_last_checkpoint=true\n",
			t.step, t.steps, filepath.Join(ck.Root, stepDirName(t.step)), shellQuote(filepath.Join(dir, "config.yaml")))
		return &sum, ErrInterrupted
	}
	return &sum, nil
}

// metricsPastStep0 reports whether the metrics file at path has a line of an RL step (an
// unreadable file counts as one; a missing file has none).
func metricsPastStep0(path string) (bool, error) {
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		return false, nil
	}
	lines, err := ReadMetrics(path)
	if err != nil {
		return true, err
	}
	for _, l := range lines {
		if l.Step > 0 {
			return true, nil
		}
	}
	return false, nil
}

// firstMissing is the outermost directory of path's chain that does not exist yet ("" when
// path exists): what os.MkdirAll(path) creates.
func firstMissing(path string) string {
	missing := ""
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			return missing
		}
		missing = p
		if filepath.Dir(p) == p {
			return missing
		}
	}
}

// removeEmptyUpTo removes path and its parents up to top while they are empty.
func removeEmptyUpTo(path, top string) {
	top = filepath.Clean(top)
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		if os.Remove(p) != nil || p == top || filepath.Dir(p) == p {
			return
		}
	}
}

// stepLogger receives every metrics line.
type stepLogger interface {
	Log(step int, m Metrics) error
}

// consoleLog prints each step's metrics on one line, keys sorted.
type consoleLog struct{ w io.Writer }

func (l consoleLog) Log(step int, m Metrics) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "step %d:", step)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%.4g", k, m[k])
	}
	_, err := fmt.Fprintln(l.w, b.String())
	return err
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=+,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// resumeSafeKeys may differ between a checkpoint's configuration and the run that resumes it:
// they do not change the training trajectory (outputs, budget, validation).
var resumeSafeKeys = map[string]bool{
	"training.steps": true, "training.total_epochs": true, "training.save_freq": true, "training.val_freq": true,
	"training.val_before_train": true, "training.val_only": true, "training.load_checkpoint_path": true,
	"training.find_last_checkpoint": true, "training.fallback_checkpoint": true, "training.sft_save_freq": true, "training.run_dir": true, "training.logger": true,
	"training.project_name": true, "training.experiment_name": true, "training.rollout_samples": true,
	"training.rollout_log_freq": true, "training.progress": true, "training.nnodes": true, "training.n_gpus_per_node": true,
	"dataset.val_files": true, "dataset.val_size": true, "dataset.val_batch_size": true, "worker.rollout.val_temperature": true,
	// Where the moments live and how the reduction is cut up: with grad_reduce=ordered not a bit
	// changes (the checkpoint's moments are the whole layout); with bucketed, as with
	// n_gpus_per_node, the last bits.
	"worker.actor.fsdp.sharding_strategy": true, "worker.actor.grad_bucket_mb": true,
	// How a model_path run exports its model.
	"worker.actor.checkpoint.torch_dtype": true, "worker.actor.checkpoint.max_shard_size": true,
}

// checkResumable refuses to resume the checkpoint in ckDir with a configuration that would
// change the trajectory (anything but resumeSafeKeys, and the budget when the LR schedule
// depends on it), naming every such key with both values.
func checkResumable(cfg Config, ckDir string) error {
	old, err := LoadConfig(filepath.Join(ckDir, ckptConfig), nil)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", ckDir, err)
	}
	scheduled := func(o OptimConfig) bool {
		s, _ := loop.ParseScheduleKind(o.LRSchedulerType)
		return s != loop.Constant || (o.WarmupSteps == 0 && o.LRWarmupRatio > 0)
	}
	budgetMatters := scheduled(cfg.Worker.Actor.Optim) || (cfg.Optimization.AdvantageEstimator == advantage.EstimatorGAE && scheduled(cfg.Worker.Critic.Optim))
	a, b := old.leaves(), cfg.leaves()
	var diffs []string
	for k, va := range a {
		vb := b[k]
		if fmt.Sprint(va) == fmt.Sprint(vb) {
			continue
		}
		if resumeSafeKeys[k] && !(budgetMatters && (k == "training.steps" || k == "training.total_epochs")) {
			continue
		}
		diffs = append(diffs, fmt.Sprintf("%s: checkpoint %v, now %v", k, va, vb))
	}
	if len(diffs) == 0 {
		return nil
	}
	sort.Strings(diffs)
	return fmt.Errorf("resume from %s refused: these settings change the training trajectory:\n  %s\nset them back to resume; or start a new run from these weights with training.load_checkpoint_path=%s in another run_dir",
		ckDir, strings.Join(diffs, "\n  "), ckDir)
}

func readSummary(path string) (Summary, error) {
	var s struct {
		Wall *float64 `json:"wall_s"`
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Summary{}, err
	}
	if err := json.Unmarshal(data, &s); err != nil || s.Wall == nil {
		return Summary{}, fmt.Errorf("%s: no wall_s", path)
	}
	return Summary{WallSeconds: *s.Wall}, nil
}

// summarize derives the summary from the whole metrics.jsonl, so a resumed or interrupted run
// reports every step, not only its own segment.
func summarize(dir string, lines []MetricsLine) Summary {
	s := Summary{RunDir: dir, ValAccInit: math.NaN(), ValAccStart: math.NaN(), ValAccEnd: math.NaN(),
		ValFormatStart: math.NaN(), ValFormatEnd: math.NaN()}
	val := func(l MetricsLine, k string) (float64, bool) {
		v, ok := l.Metrics[k]
		if !ok || v == nil {
			return math.NaN(), false
		}
		return *v, true
	}
	var rewards, accs, prec, vis []float64
	var stepSeconds, tokens float64
	for _, l := range lines {
		if v, ok := val(l, "timing_s/testing"); ok {
			s.RLSeconds += v
		}
		if l.Step == 0 {
			s.ValAccInit, _ = val(l, "sft/val_accuracy_before")
			s.ValAccStart, _ = val(l, "val/accuracy")
			s.ValFormatStart, _ = val(l, "val/format")
			if v, ok := val(l, "timing_s/sft"); ok {
				s.WarmStartSeconds = v
			}
			s.RLSeconds = 0 // validation before RL is not RL time
			continue
		}
		s.Steps = l.Step
		if v, ok := val(l, "val/accuracy"); ok {
			s.ValAccEnd = v
			s.ValFormatEnd, _ = val(l, "val/format")
		}
		r, _ := val(l, "reward/overall")
		a, _ := val(l, "reward/accuracy")
		rewards, accs = append(rewards, r), append(accs, a)
		if v, ok := val(l, "perception/precision"); ok {
			prec = append(prec, v)
		}
		if v, ok := val(l, "perception/visual_token_fraction"); ok {
			vis = append(vis, v)
		}
		if v, ok := val(l, "actor/skipped_steps"); ok {
			s.SkippedSteps = v
		}
		st, _ := val(l, "perf/time_per_step")
		tps, _ := val(l, "perf/tokens_per_second")
		if !math.IsNaN(st) {
			stepSeconds += st
			if !math.IsNaN(tps) {
				tokens += tps * st
			}
		}
	}
	s.RLSeconds += stepSeconds
	if s.Steps > 0 && stepSeconds > 0 {
		s.StepsPerSecond = float64(len(rewards)) / s.RLSeconds
		s.TokensPerSecond = tokens / stepSeconds
	}
	k := min(5, len(rewards))
	s.RewardStart, s.RewardEnd = mean(rewards[:k]), mean(rewards[len(rewards)-k:])
	s.TrainAccStart, s.TrainAccEnd = mean(accs[:k]), mean(accs[len(accs)-k:])
	s.PerceptionPrec, s.VisualFraction = mean(prec), mean(vis)
	return s
}

// defaultRunDir is the run directory when training.run_dir is empty: with an experiment name a
// stable place, as EasyR1's checkpoints/<project>/<experiment> (find_last_checkpoint finds it
// again, and a second fresh run there is refused); else runs/<date-time>.
func defaultRunDir(c TrainingConfig) string {
	if c.ExperimentName != "" {
		return filepath.Join("runs", c.ProjectName, c.ExperimentName)
	}
	return filepath.Join("runs", time.Now().Format("20060102-150405"))
}

// writeSummary writes dir/summary.json (indented, atomically).
func writeSummary(dir string, sum Summary) error {
	js, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, "summary.json"), append(js, '\n'))
}

// rankRunDir resolves a rank's run directory and the checkpoint to load: run_dir, or the run
// that load_checkpoint_path names (with find_last_checkpoint and no run_dir of its own the run
// resumes there), or a new default one. The lead rank cleans up after an interrupted run
// before any rank looks for checkpoints; every rank then takes rank 0's name (the gather is the
// barrier; the clock may differ between processes).
func rankRunDir(rctx context.Context, c TrainingConfig, comm collective.Comm, lead bool, stderr io.Writer) (dir, loadDir string, err error) {
	dir = c.RunDir
	if c.LoadCheckpointPath != "" {
		var runOf string
		if loadDir, runOf, err = resolveCheckpoint(c.LoadCheckpointPath, c.FindLastCheckpoint); err != nil {
			return "", "", err
		}
		if runOf != "" && dir == "" {
			dir = runOf
		}
	}
	if dir == "" {
		dir = defaultRunDir(c)
	}
	if lead {
		done, err := cleanStale(dir)
		for _, d := range done {
			fmt.Fprintln(stderr, "after an interrupted run:", d)
		}
		if err != nil {
			return "", "", fmt.Errorf("training.run_dir %s: cleaning up after an interrupted run: %w", dir, err)
		}
	}
	if comm != nil {
		names, err := collective.AllGatherBytes(rctx, comm, []byte(dir))
		if err != nil {
			return "", "", err
		}
		dir = string(names[0])
	}
	return dir, loadDir, nil
}
