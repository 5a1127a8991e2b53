package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// This file trains a Hugging Face checkpoint (worker.actor.model.model_path) on text prompts:
// each prompt goes through the checkpoint's chat template (add_generation_prompt) and
// tokenizer, hflm.Policy samples and scores, the rewards read the decoded text, the reference
// of the divergence is the frozen base (with LoRA, the adapter-disabled model: no copy), and
// the run ends with the PEFT adapter (LoRA) and a merged Hugging Face export in the run
// directory. There is no warm start, no image and no validation pass on this path.

// Files of a model_path run directory.
const (
	hfAdapterDir = "adapter" // PEFT's adapter_config.json and adapter_model.safetensors
	hfExportDir  = "hf"      // the trained model, adapters merged, with the tokenizer files
)

// resolveModelPath turns off, with model_path, the defaults that belong to the built-in
// vision-language model (the warm start, the perception and MDI parts); set explicitly they
// are errors (validateModelPath). Without model_path, LoRA keys only warn.
func (c *Config) resolveModelPath() {
	m := &c.Worker.Actor.Model
	if m.ModelPath == "" {
		if c.Dataset.FormatPrompt != "" {
			c.warnings = append(c.warnings, "config: dataset.format_prompt: accepted and ignored: the built-in model's prompts are used as written (the Jinja file applies with worker.actor.model.model_path)")
		}
		if m.LoraRank > 0 {
			c.warnings = append(c.warnings, fmt.Sprintf("config: worker.actor.model.lora_rank=%d: no LoRA on the built-in model, which is trained in full (LoRA needs worker.actor.model.model_path)", m.LoraRank))
		}
		c.warnScaleBuiltin()
		return
	}
	unset := func(key string) bool { return c.set[key] == 0 }
	if unset("training.sft_steps") {
		c.Training.SFTSteps = 0
	}
	if unset("optimization.enable_perception_filtering") {
		c.Optimization.EnablePerceptionFiltering = false
	}
	if unset("optimization.enable_trajectory_reweighting") {
		c.Optimization.EnableTrajectoryReweighting = false
	}
	if unset("worker.reward.mdi_weight") {
		c.Worker.Reward.MDIWeight = 0
	}
	if unset("training.sft_shortcut") {
		c.Training.SFTShortcut = 0
	}
}

// validateModelPath refuses what the model_path path does not do, naming the key. Run checks
// it, not Validate: a configuration such as the seeds' (a hub name and 8 ranks) still loads,
// and the run refuses it before writing anything.
func (c Config) validateModelPath() error {
	a, t, o := c.Worker.Actor, c.Training, c.Optimization
	if a.Model.ModelPath == "" {
		return nil
	}
	if st, err := os.Stat(a.Model.ModelPath); err != nil || !st.IsDir() {
		return keyErr("worker.actor.model.model_path", "%q is not a local directory: nothing is fetched from a model hub here; give the directory of a downloaded checkpoint (config.json, safetensors, tokenizer files), or an empty model_path for the built-in model", a.Model.ModelPath)
	}
	const why = "with worker.actor.model.model_path"
	switch {
	case a.Device == "cuda":
		return keyErr("worker.actor.device", "is cuda %s: the Hugging Face model runs on the host only (device=cpu)", why)
	case max(1, t.Nnodes)*max(1, t.NGPUsPerNode) > 1:
		return keyErr("training.n_gpus_per_node", "and nnodes give %d ranks %s: data-parallel ranks are not wired for the Hugging Face model (one rank)", max(1, t.Nnodes)*max(1, t.NGPUsPerNode), why)
	case t.SFTSteps > 0:
		return keyErr("training.sft_steps", "is %d %s: there is no warm start on this path (the checkpoint is the start); set 0", t.SFTSteps, why)
	case t.SFTShortcut > 0 || t.SFTBlind:
		return keyErr("training.sft_shortcut", "(and sft_blind) belong to the generated visual task, not %s", why)
	case o.EnablePerceptionFiltering:
		return keyErr("optimization.enable_perception_filtering", "is true %s: a text model has no image to perturb, so no perception score", why)
	case o.Shaping():
		return keyErr("optimization.enable_trajectory_reweighting", "is true %s: trajectory shaping reads the perception score, and a text model has no image to perturb", why)
	case c.Worker.Reward.MDIWeight > 0:
		return keyErr("worker.reward.mdi_weight", "is %v %s: the MDI reward is the attention to image tokens, and a text model has none; set 0", c.Worker.Reward.MDIWeight, why)
	case o.AdvantageEstimator == advantage.EstimatorGAE:
		return keyErr("optimization.advantage_estimator", "is gae %s: there is no value model for the Hugging Face model (use grpo, rloo, reinforce_plus_plus, …)", why)
	case t.LoadCheckpointPath != "" || t.FindLastCheckpoint:
		return keyErr("training.load_checkpoint_path", "(and find_last_checkpoint) %s: resuming is not implemented on this path", why)
	case t.ValOnly:
		return keyErr("training.val_only", "is true %s: there is no validation pass on this path", why)
	case c.Dataset.ValFiles != "":
		return keyErr("dataset.val_files", "is set %s: there is no validation pass on this path", why)
	case a.Model.LoraRank < 0:
		return keyErr("worker.actor.model.lora_rank", "is %d, want >= 0 (0: full fine-tuning)", a.Model.LoraRank)
	}
	return nil
}

// hfPrompt is one text prompt: its token ids (chat template applied) and reference answer.
type hfPrompt struct {
	ids    []int32
	answer string
}

// hfRow is a prompt before the chat template: the conversation {"messages": [...]}.
type hfRow struct {
	conversation []byte
	answer       string
}

// loadTextRows reads a JSONL file of the seeds' format as text rows: the prompt column is a
// string (one user turn) or a list of chat messages (verl's), the answer column a string or a
// number. A row with images is an error: this path trains a text model.
func loadTextRows(path string, d DatasetConfig, format *hfmodel.ChatTemplate) ([]hfRow, error) {
	if ext := strings.ToLower(filepath.Ext(path)); ext != ".jsonl" && ext != ".json" {
		return nil, fmt.Errorf("%s: want a .jsonl file (one JSON object per line) with worker.actor.model.model_path", path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rows []hfRow
	for n, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		loc := fmt.Sprintf("%s line %d", path, n+1)
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(line, &rec); err != nil {
			return nil, fmt.Errorf("%s: %v", loc, err)
		}
		for _, key := range []string{d.ImageKey, d.VideoKey} {
			if v := bytes.TrimSpace(rec[key]); key != "" && len(v) > 0 && !bytes.Equal(v, []byte("null")) && !bytes.Equal(v, []byte("[]")) && !bytes.Equal(v, []byte(`""`)) {
				return nil, fmt.Errorf("%s: column %q: the row has images or videos, and worker.actor.model.model_path trains a text model (the vision models are not supported yet)", loc, key)
			}
		}
		p, a := bytes.TrimSpace(rec[d.PromptKey]), bytes.TrimSpace(rec[d.AnswerKey])
		var r hfRow
		switch {
		case len(p) == 0:
			return nil, fmt.Errorf("%s: no %q column (dataset.prompt_key)", loc, d.PromptKey)
		case p[0] == '"':
			var s string
			if err := json.Unmarshal(p, &s); err != nil {
				return nil, fmt.Errorf("%s: column %q: %v", loc, d.PromptKey, err)
			}
			if r.conversation, err = formatTurn(s, format); err != nil {
				return nil, fmt.Errorf("%s: dataset.format_prompt: %v", loc, err)
			}
		case p[0] == '[' && format != nil:
			return nil, fmt.Errorf("%s: column %q is a list of chat messages, and dataset.format_prompt rewrites string prompts only", loc, d.PromptKey)
		case p[0] == '[':
			r.conversation = append(append([]byte(`{"messages":`), p...), '}')
		default:
			return nil, fmt.Errorf("%s: column %q: want a string or a list of chat messages", loc, d.PromptKey)
		}
		switch {
		case len(a) == 0:
			return nil, fmt.Errorf("%s: no %q column (dataset.answer_key)", loc, d.AnswerKey)
		case a[0] == '"':
			if err := json.Unmarshal(a, &r.answer); err != nil {
				return nil, fmt.Errorf("%s: column %q: %v", loc, d.AnswerKey, err)
			}
		case a[0] == '-' || (a[0] >= '0' && a[0] <= '9'):
			r.answer = string(a)
		default:
			return nil, fmt.Errorf("%s: column %q: want a string or a number", loc, d.AnswerKey)
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s has no rows", path)
	}
	return rows, nil
}

// formatTurn is the conversation of one user turn s, rewritten by the format_prompt template
// (its variable content) when there is one.
func formatTurn(s string, format *hfmodel.ChatTemplate) ([]byte, error) {
	if format != nil {
		vars, err := json.Marshal(map[string]any{"messages": []any{}, "content": s})
		if err != nil {
			return nil, err
		}
		if s, err = format.Render(vars, false); err != nil {
			return nil, err
		}
	}
	return userTurn(s), nil
}

func userTurn(s string) []byte {
	b, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": s}}})
	return b
}

// arithmeticRows is the generated text task: n questions "What is a + b?" with a, b in 0..9.
func arithmeticRows(n int, seed uint64, format *hfmodel.ChatTemplate) ([]hfRow, error) {
	rng := rand.New(rand.NewPCG(seed, 0xadd))
	rows := make([]hfRow, n)
	for i := range rows {
		a, b := rng.IntN(10), rng.IntN(10)
		conv, err := formatTurn(fmt.Sprintf("What is %d + %d?", a, b), format)
		if err != nil {
			return nil, fmt.Errorf("dataset.format_prompt: %w", err)
		}
		rows[i] = hfRow{conversation: conv, answer: fmt.Sprint(a + b)}
	}
	return rows, nil
}

// loadFormatPrompt compiles dataset.format_prompt (nil when it is empty).
func loadFormatPrompt(path string) (*hfmodel.ChatTemplate, error) {
	if path == "" {
		return nil, nil
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, keyErr("dataset.format_prompt", "%v", err)
	}
	t, err := hfmodel.NewChatTemplate(string(src), nil)
	if err != nil {
		return nil, keyErr("dataset.format_prompt", "%s: %v", path, err)
	}
	return t, nil
}

// encodePrompts renders each row with the chat template and encodes it; prompts longer than
// max_prompt_length are dropped (filter_overlong_prompts) or an error.
func encodePrompts(rows []hfRow, ct *hfmodel.ChatTemplate, tok *hfmodel.Tokenizer, d DatasetConfig) ([]hfPrompt, int, error) {
	var out []hfPrompt
	dropped := 0
	for i, r := range rows {
		text, err := ct.Render(r.conversation, true)
		if err != nil {
			return nil, 0, fmt.Errorf("dataset: row %d: chat template: %w", i, err)
		}
		ids := tok.Encode(text)
		if len(ids) > d.MaxPromptLength {
			if !d.FilterOverlongPrompts {
				return nil, 0, fmt.Errorf("dataset: row %d: prompt of %d tokens (chat template applied) exceeds dataset.max_prompt_length %d (set dataset.filter_overlong_prompts=true to drop such prompts)", i, len(ids), d.MaxPromptLength)
			}
			dropped++
			continue
		}
		p := hfPrompt{ids: make([]int32, len(ids)), answer: r.answer}
		for j, id := range ids {
			p.ids[j] = int32(id)
		}
		out = append(out, p)
	}
	if len(out) < d.RolloutBatchSize {
		return nil, 0, fmt.Errorf("dataset: %d prompts fit dataset.max_prompt_length %d (%d dropped), want >= dataset.rollout_batch_size %d", len(out), d.MaxPromptLength, dropped, d.RolloutBatchSize)
	}
	return out, dropped, nil
}

var (
	numberRE   = regexp.MustCompile(`-?\d[\d,]*(?:\.\d+)?(?:/\d+)?`)
	fracRE     = regexp.MustCompile(`\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}`)
	textRE     = regexp.MustCompile(`\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}`)
	spaceLaTeX = strings.NewReplacer(" ", "", "$", "", `\!`, "", `\,`, "", `\;`, "", `\left`, "", `\right`, "", "{,}", "",
		`\displaystyle`, "", `^{\circ}`, "", `^\circ`, "", `\%`, "", "%", "")
)

// lastBoxed returns the content of the last \boxed{…} in s (braces balanced), and whether
// there is one.
func lastBoxed(s string) (string, bool) {
	at := strings.LastIndex(s, `\boxed{`)
	if at < 0 {
		return "", false
	}
	start, depth := at+len(`\boxed{`), 1
	for i := start; i < len(s); i++ {
		switch s[i] {
		case '{':
			depth++
		case '}':
			if depth--; depth == 0 {
				return s[start:i], true
			}
		}
	}
	return "", false
}

// extractAnswer is a response's answer: the last \boxed{…}, else the last number.
func extractAnswer(text string) string {
	if b, ok := lastBoxed(text); ok {
		return b
	}
	nums := numberRE.FindAllString(text, -1)
	if len(nums) == 0 {
		return ""
	}
	return nums[len(nums)-1]
}

// normalizeAnswer is light LaTeX normalisation in the manner of EasyR1's math reward: no spaces,
// $, spacing commands, degrees or percent signs, \text{…} as its text, \frac{a}{b} as a/b, a
// short left-hand side "x=" dropped, no thousands separators in numbers, no trailing period.
func normalizeAnswer(s string) string {
	s = spaceLaTeX.Replace(strings.TrimSpace(s))
	s = textRE.ReplaceAllString(s, "$1")
	s = fracRE.ReplaceAllString(s, "$1/$2")
	if lhs, rhs, ok := strings.Cut(s, "="); ok && len(lhs) <= 2 && !strings.Contains(rhs, "=") {
		s = rhs
	}
	s = strings.TrimSuffix(s, ".")
	if numberRE.FindString(s) == s {
		s = strings.ReplaceAll(s, ",", "")
	}
	return s
}

// answersEqual compares normalised answers as text, or as exact rationals when both are
// numbers (0.5 = 1/2, 7 = 7.0).
func answersEqual(got, want string) bool {
	g, w := normalizeAnswer(got), normalizeAnswer(want)
	if g == "" {
		return false
	}
	if g == w {
		return true
	}
	var x, y big.Rat
	_, okG := x.SetString(g)
	_, okW := y.SetString(w)
	return okG && okW && x.Cmp(&y) == 0
}

// hfRewards are accuracy (the extracted answer equals the reference) and format (the answer
// is in \boxed{…}), weighted as the built-in reward's accuracy_weight : format_weight.
func (c Config) hfRewards() []loop.Reward[hfPrompt] {
	a, f := c.Worker.Reward.AccuracyWeight, c.Worker.Reward.FormatWeight
	part := func(score func(text, answer string) float64) func(loop.RewardInputs[hfPrompt]) ([]float64, error) {
		return func(in loop.RewardInputs[hfPrompt]) ([]float64, error) {
			out := make([]float64, len(in.Prompts))
			for i, comp := range in.Completions {
				out[i] = score(comp.Text, in.Prompts[i].answer)
			}
			return out, nil
		}
	}
	return []loop.Reward[hfPrompt]{
		{Name: "accuracy", Weight: a / (a + f), Func: part(func(text, answer string) float64 {
			if answersEqual(extractAnswer(text), answer) {
				return 1
			}
			return 0
		})},
		{Name: "format", Weight: f / (a + f), Func: part(func(text, _ string) float64 {
			if _, ok := lastBoxed(text); ok {
				return 1
			}
			return 0
		})},
	}
}

// hfRun is a model_path run's model and data.
type hfRun struct {
	cfg     Config
	dir     string // the checkpoint
	model   *hflm.Model
	gen     *hfmodel.GenerationConfig
	tok     *hfmodel.Tokenizer
	prompts []hfPrompt
	dropped int
}

// openHF opens the checkpoint, its tokenizer and chat template, adds the adapters and encodes
// the prompts.
func openHF(cfg Config) (*hfRun, error) {
	mc := cfg.Worker.Actor.Model
	r := &hfRun{cfg: cfg, dir: mc.ModelPath}
	key := func(err error) error { return keyErr("worker.actor.model.model_path", "%s: %v", mc.ModelPath, err) }
	ck, err := hfmodel.Open(mc.ModelPath)
	if err != nil {
		return nil, key(err)
	}
	r.gen = ck.Generation
	if r.gen == nil {
		r.gen = hfmodel.NewGenerationConfig(ck.Config)
	}
	r.model, err = hflm.Load(ck)
	ck.Close()
	if err != nil {
		return nil, key(err)
	}
	if err := cfg.Worker.Actor.applyScale(r.model); err != nil {
		return nil, err
	}
	if r.tok, err = hfmodel.LoadTokenizer(mc.ModelPath); err != nil {
		return nil, key(err)
	}
	ct, err := hfmodel.LoadChatTemplate(mc.ModelPath)
	if err != nil {
		return nil, key(err)
	}
	if mc.LoraRank > 0 {
		lc := hflm.LoRAConfig{Rank: mc.LoraRank, Alpha: mc.LoraAlpha, Dropout: mc.LoraDropout, TargetModules: mc.TargetModules, Seed: mc.Seed}
		if err := r.model.AddLoRA(lc); err != nil {
			return nil, keyErr("worker.actor.model.lora_rank", "%v", err)
		}
	}
	d := cfg.Dataset
	format, err := loadFormatPrompt(d.FormatPrompt)
	if err != nil {
		return nil, err
	}
	var rows []hfRow
	if d.TrainFiles == "" {
		if rows, err = arithmeticRows(d.TrainSize, d.Seed, format); err != nil {
			return nil, err
		}
	}
	for _, path := range strings.Split(d.TrainFiles, ",") {
		if path = strings.TrimSpace(path); path == "" {
			continue
		}
		part, err := loadTextRows(path, d, format)
		if err != nil {
			return nil, fmt.Errorf("dataset.train_files: %w", err)
		}
		rows = append(rows, part...)
	}
	if r.prompts, r.dropped, err = encodePrompts(rows, ct, r.tok, d); err != nil {
		return nil, err
	}
	return r, nil
}

// policy is the model as a loop policy over the prompts.
func (r *hfRun) policy(m *hflm.Model) *hflm.Policy[hfPrompt] {
	var stop []int32
	for _, id := range r.gen.EOSTokenIDs {
		stop = append(stop, int32(id))
	}
	return &hflm.Policy[hfPrompt]{Model: m, Stop: stop, Padded: !r.cfg.Worker.Actor.PaddingFree,
		Prompt: func(p hfPrompt) []int32 { return p.ids },
		Decode: func(ids []int32) string {
			v := make([]int, len(ids))
			for i, id := range ids {
				v[i] = int(id)
			}
			s, _ := r.tok.Decode(v, true) // ids come from the model's own vocabulary
			return s
		},
	}
}

// newLoop builds the tprl/loop of the run: no perturbation, the reference the frozen base.
func (r *hfRun) newLoop(steps int) (*loop.Loop[hfPrompt], error) {
	cfg, act := r.cfg, r.cfg.Worker.Actor
	update, err := cfg.Update()
	if err != nil {
		return nil, err
	}
	adv, err := cfg.Advantage()
	if err != nil {
		return nil, err
	}
	lc := cfg.loopConfig(steps, adv, update) // no Perturb: a text model has no image
	act.scaleLoop(&lc)
	parts := loop.Parts[hfPrompt]{Policy: r.policy(r.model), Rewards: cfg.hfRewards(),
		Data: loop.NewEpochs(r.prompts, cfg.Dataset.Shuffle, cfg.Dataset.Seed)}
	if !cfg.Optimization.DisableDivergence {
		ref := r.model.Base() // LoRA: the adapters off, no copy
		if act.Model.LoraRank == 0 {
			// Full fine-tuning changes the weights: the reference is a second, frozen load.
			var err error
			if ref, err = hflm.LoadDir(r.dir); err != nil {
				return nil, err
			}
			if err := act.applyScale(ref); err != nil { // the reference computes as the policy
				return nil, err
			}
		}
		parts.Reference = r.policy(ref)
	}
	opt, grads, err := r.model.Training(act.Optim.WeightDecay)
	if err != nil {
		return nil, err
	}
	opt.Beta1, opt.Beta2, opt.Eps = act.Optim.Betas[0], act.Optim.Betas[1], act.Optim.Eps
	parts.Optimizer, parts.Gradients = opt, grads
	l, err := loop.New(lc, parts)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return l, nil
}

// save writes the PEFT adapter (with LoRA) into dir/adapter and the merged model with the
// tokenizer files into dir/hf.
func (r *hfRun) save(dir string) error {
	if r.cfg.Worker.Actor.Model.LoraRank > 0 {
		if err := r.model.SaveLoRA(filepath.Join(dir, hfAdapterDir), r.dir); err != nil {
			return err
		}
	}
	ck, err := r.model.Checkpoint(r.gen)
	if err != nil {
		return err
	}
	out := filepath.Join(dir, hfExportDir)
	if err := ck.Save(out, hfmodel.SaveOptions{DType: hfmodel.Float32, Shards: 1}); err != nil {
		return err
	}
	return hfmodel.CopyTokenizerFiles(out, r.dir)
}

// runModelPath is Run with worker.actor.model.model_path: RL steps on the checkpoint, one
// metrics.jsonl line each, checkpoints of the adapter and export every save_freq steps into
// checkpoints/global_step_N, and the final adapter and export in the run directory.
func runModelPath(ctx context.Context, cfg Config, stdout, stderr io.Writer) (*Summary, error) {
	wall := time.Now()
	if err := cfg.validateModelPath(); err != nil {
		return nil, err
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintln(stderr, "warning:", w)
	}
	c := cfg.Training
	dir := c.RunDir
	if dir == "" {
		dir = defaultRunDir(c)
	}
	metricsPath := filepath.Join(dir, "metrics.jsonl")
	if _, err := os.Stat(metricsPath); err == nil {
		return nil, fmt.Errorf("training.run_dir %s holds metrics.jsonl: a model_path run does not resume or overwrite; choose another run_dir", dir)
	}
	r, err := openHF(cfg)
	if err != nil {
		return nil, err
	}
	steps := c.Steps
	if steps == 0 {
		steps = c.TotalEpochs * max(1, len(r.prompts)/cfg.Dataset.RolloutBatchSize)
	}
	l, err := r.newLoop(steps)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, err
	}
	cfg.Training.RunDir = dir
	if err := WriteFileAtomic(filepath.Join(dir, "config.yaml"), cfg.YAML()); err != nil {
		return nil, err
	}
	lora := "full fine-tuning"
	if k := cfg.Worker.Actor.Model.LoraRank; k > 0 {
		lora = fmt.Sprintf("LoRA rank %d", k)
	}
	ps, _ := r.model.Params()
	trained := 0
	for _, p := range ps {
		trained += p.Value.Len()
	}
	fmt.Fprintf(stdout, "model %s: %d parameters (%s: %d trained, %s); %d prompts (%d over max_prompt_length dropped); %d RL steps; run dir %s\n",
		r.dir, r.model.NumParams(), lora, trained, cfg.Worker.Actor.dtypeName(), len(r.prompts), r.dropped, steps, dir)
	mf, err := os.OpenFile(metricsPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer mf.Close()
	nan := math.NaN() // no validation, warm start or perception mask on this path: null in summary.json
	sum := &Summary{RunDir: dir, ValAccInit: nan, ValAccStart: nan, ValAccEnd: nan, ValFormatStart: nan, ValFormatEnd: nan,
		PerceptionPrec: nan, VisualFraction: nan}
	var rewards, accs []float64
	rl := time.Now()
	for step := 1; step <= steps; step++ {
		if ctx.Err() != nil {
			break
		}
		res, err := l.Step(ctx)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", step, err)
		}
		m := res.Metrics
		res.Release()
		if _, err := mf.Write(MarshalLine(step, m)); err != nil {
			return nil, err
		}
		rewards, accs = append(rewards, m["reward/overall"]), append(accs, m["reward/accuracy"])
		fmt.Fprintf(stdout, "step %d/%d: reward %.3f accuracy %.3f\n", step, steps, m["reward/overall"], m["reward/accuracy"])
		sum.Steps = step
		if c.SaveFreq > 0 && step%c.SaveFreq == 0 && step < steps {
			if err := r.save(filepath.Join(dir, "checkpoints", stepDirName(step))); err != nil {
				return nil, fmt.Errorf("checkpoint at step %d: %w", step, err)
			}
		}
	}
	sum.RLSeconds = time.Since(rl).Seconds()
	if err := r.save(dir); err != nil {
		return nil, fmt.Errorf("saving the model: %w", err)
	}
	firstLast := func(xs []float64) (float64, float64) {
		n := min(5, len(xs))
		return mean(xs[:n]), mean(xs[len(xs)-n:])
	}
	sum.RewardStart, sum.RewardEnd = firstLast(rewards)
	sum.TrainAccStart, sum.TrainAccEnd = firstLast(accs)
	sum.WallSeconds = time.Since(wall).Seconds()
	if err := writeSummary(dir, *sum); err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "saved: %s (PEFT adapter, with LoRA) and %s (the model, adapters merged, with the tokenizer)\n",
		filepath.Join(dir, hfAdapterDir), filepath.Join(dir, hfExportDir))
	if ctx.Err() != nil {
		return sum, ErrInterrupted
	}
	return sum, nil
}
