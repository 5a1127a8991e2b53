package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// This file is the text model of a model_path run (worker.actor.model.model_path): each prompt
// goes through the checkpoint's chat template (add_generation_prompt) and tokenizer (or
// tokenizer_path's), hflm.Policy samples and scores, the rewards read the decoded text
// (EasyR1's math reward, mathruler.go), the reference of the divergence is the frozen base
// (with LoRA, the adapter-disabled model: no copy), and the export is the PEFT adapter (LoRA)
// and the merged model in Hugging Face's layout. openHF builds the hfSession that the generic
// run loop (hfrun.go: checkpoints, resume, validation) trains. There is no warm start and no
// image on this path.

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
		if m.FreezeVisionTower {
			c.warnings = append(c.warnings, "config: worker.actor.model.freeze_vision_tower: accepted and ignored: the built-in model trains whole (the key applies to a Qwen2-VL model_path)")
		}
		c.warnScaleBuiltin()
		return
	}
	unset := func(key string) bool { return c.set[key] == 0 }
	vl := isVLModel(m.ModelPath) // the perception parts stay on: the images are perturbed
	if unset("training.sft_steps") {
		c.Training.SFTSteps = 0
	}
	if unset("optimization.enable_perception_filtering") && !vl {
		c.Optimization.EnablePerceptionFiltering = false
	}
	if unset("optimization.enable_trajectory_reweighting") && !vl {
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
	if p := a.Model.TokenizerPath; p != "" {
		if st, err := os.Stat(p); err != nil || !st.IsDir() {
			return keyErr("worker.actor.model.tokenizer_path", "%q is not a local directory (want one holding tokenizer.json and tokenizer_config.json)", p)
		}
	}
	if _, err := parseShardSize(a.Checkpoint.MaxShardSize); err != nil {
		return keyErr("worker.actor.checkpoint.max_shard_size", "%v", err)
	}
	if d := a.Checkpoint.TorchDType; d != "" {
		if _, err := hfmodel.ParseDType(d); err != nil {
			return keyErr("worker.actor.checkpoint.torch_dtype", "is %q, want float32, bfloat16 or float16 (or empty: model_path's own)", d)
		}
	}
	const why = "with worker.actor.model.model_path"
	vl := isVLModel(a.Model.ModelPath)
	switch {
	case max(1, t.Nnodes)*max(1, t.NGPUsPerNode) > 1 && a.Model.LoraRank > 0 && a.Model.LoraDropout > 0:
		return keyErr("worker.actor.model.lora_dropout", "is %v with %d data-parallel ranks %s: each replica draws its own dropout masks for its rows, so the run would depend on the number of ranks and not resume exactly; set 0", a.Model.LoraDropout, max(1, t.Nnodes)*max(1, t.NGPUsPerNode), why)
	case t.SFTSteps > 0:
		return keyErr("training.sft_steps", "is %d %s: there is no warm start on this path (the checkpoint is the start); set 0", t.SFTSteps, why)
	case t.SFTShortcut > 0 || t.SFTBlind:
		return keyErr("training.sft_shortcut", "(and sft_blind) belong to the generated visual task, not %s", why)
	case o.EnablePerceptionFiltering && !vl:
		return keyErr("optimization.enable_perception_filtering", "is true %s: a text model has no image to perturb, so no perception score", why)
	case o.Shaping() && !vl:
		return keyErr("optimization.enable_trajectory_reweighting", "is true %s: trajectory shaping reads the perception score, and a text model has no image to perturb", why)
	case c.Worker.Reward.MDIWeight > 0 && vl:
		return keyErr("worker.reward.mdi_weight", "is %v %s: the MDI reward reads the attention to image tokens, which the Qwen2-VL model does not report; set 0", c.Worker.Reward.MDIWeight, why)
	case c.Worker.Reward.MDIWeight > 0:
		return keyErr("worker.reward.mdi_weight", "is %v %s: the MDI reward is the attention to image tokens, and a text model has none; set 0", c.Worker.Reward.MDIWeight, why)
	case o.AdvantageEstimator == advantage.EstimatorGAE:
		return keyErr("optimization.advantage_estimator", "is gae %s: there is no value model for the Hugging Face model (use grpo, rloo, reinforce_plus_plus, …)", why)
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
				return nil, fmt.Errorf("%s: column %q: the row has images or videos, and worker.actor.model.model_path is a text model (a Qwen2-VL or Qwen2.5-VL checkpoint reads images)", loc, key)
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
	return out, dropped, nil
}

// numberRE is a number in a response without \boxed{…}: an integer or decimal, with
// thousands commas or a /denominator.
var numberRE = regexp.MustCompile(`-?\d[\d,]*(?:\.\d+)?(?:/\d+)?`)

// extractAnswer is a response's answer: the content of its last \boxed{…} (mathruler's
// extract_boxed_content), else, unlike EasyR1, its last number (a prompt that does not ask for
// \boxed{} still gets an answer).
func extractAnswer(text string) string {
	if strings.Contains(text, `\boxed{`) {
		return extractBoxedContent(text)
	}
	nums := numberRE.FindAllString(text, -1)
	if len(nums) == 0 {
		return ""
	}
	return nums[len(nums)-1]
}

// answersEqual is EasyR1's math accuracy: mathruler's grade_answer (mathruler.go).
func answersEqual(got, want string) bool { return gradeAnswer(got, want) }

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
			if strings.Contains(text, `\boxed{`) && extractBoxedContent(text) != "None" {
				return 1
			}
			return 0
		})},
	}
}

// textModel is the text model of a model_path run as the run loop sees it (hfTrainable) with
// what exports it.
type textModel struct {
	*hflm.Model
	gen      *hfmodel.GenerationConfig
	tokDir   string // the tokenizer files' directory (tokenizer_path, else model_path)
	export   hfmodel.SaveOptions
	lora     bool
	modelDir string
	offload  bool // offload.offload_optimizer on a device (offload.go)
}

// Training implements hfSession.training: the model's own AdamW (which repacks the weights),
// on the host or on the model's device.
func (m *textModel) training(weightDecay float64) (loop.Optimizer, *loop.AdamW, loop.Gradients, error) {
	if m.Backend() != tensor.CPU() {
		if m.offload {
			return m.offloadTraining(weightDecay)
		}
		opt, grads, err := m.Model.DeviceTraining(weightDecay)
		if err != nil {
			return nil, nil, nil, err
		}
		return opt, opt.AdamW, grads, nil
	}
	opt, grads, err := m.Model.Training(weightDecay)
	if err != nil {
		return nil, nil, nil, err
	}
	return opt, opt.AdamW, grads, nil
}

// save writes the PEFT adapter (with LoRA) into dir/adapter and the merged model with the
// tokenizer files into dir/hf, each through a temporary directory renamed into place.
func (m *textModel) save(dir string) error {
	tmp, err := os.MkdirTemp(dir, ".tmp-export-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var names []string
	if m.lora {
		if err := m.SaveLoRA(filepath.Join(tmp, hfAdapterDir), m.modelDir); err != nil {
			return err
		}
		names = append(names, hfAdapterDir)
	}
	ck, err := m.Checkpoint(m.gen)
	if err != nil {
		return err
	}
	out := filepath.Join(tmp, hfExportDir)
	if err := ck.Save(out, m.export); err != nil {
		return err
	}
	if err := hfmodel.CopyTokenizerFiles(out, m.tokDir); err != nil {
		return err
	}
	return renameInto(dir, tmp, append(names, hfExportDir))
}

// renameInto moves each of names from tmp into dir, replacing what dir held under that name,
// so that a failed export leaves the previous one whole.
func renameInto(dir, tmp string, names []string) error {
	for _, name := range names {
		if err := os.Chmod(filepath.Join(tmp, name), dirMode); err != nil {
			return err
		}
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(tmp, name), filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// exportOptions are worker.actor.checkpoint's torch_dtype (empty: src's own) and
// max_shard_size.
func exportOptions(e ExportConfig, src *hfmodel.Config) (hfmodel.SaveOptions, error) {
	name := e.TorchDType
	if name == "" {
		name = src.TorchDType
	}
	dt, err := hfmodel.ParseDType(name)
	if err != nil {
		return hfmodel.SaveOptions{}, keyErr("worker.actor.checkpoint.torch_dtype", "is %q, want float32, bfloat16 or float16", name)
	}
	size, err := parseShardSize(e.MaxShardSize)
	if err != nil {
		return hfmodel.SaveOptions{}, keyErr("worker.actor.checkpoint.max_shard_size", "%v", err)
	}
	return hfmodel.SaveOptions{DType: dt, MaxShardSize: size}, nil
}

// parseShardSize reads a size as transformers' max_shard_size takes it: a byte count, or a
// number with KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), in any
// letter case.
func parseShardSize(s string) (int64, error) {
	t, mult := strings.ToUpper(strings.TrimSpace(s)), 1.0
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"TIB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}} {
		if n, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	x, err := strconv.ParseFloat(t, 64)
	if err != nil || !(x*mult >= 1) || x*mult >= 1<<62 {
		return 0, fmt.Errorf("%q is not a size of at least one byte (a byte count, or a number with KB, MB, GB, TB, KiB, MiB, GiB or TiB)", s)
	}
	return int64(x * mult), nil
}

// actorBackend is where a model_path run's model computes (worker.actor.device) and its
// closer: the CPU, or this rank's CUDA device (a binary built with -tags cuda).
func (c Config) actorBackend() (tensor.Backend, func() error, error) {
	if c.Worker.Actor.Device != "cuda" {
		return tensor.CPU(), func() error { return nil }, nil
	}
	b, closeB, err := openCUDA(c.deviceOrdinal)
	if err != nil {
		return nil, nil, keyErr("worker.actor.device", "is cuda: %v", err)
	}
	return b, closeB, nil
}

// openHF opens the checkpoint, its tokenizer and chat template (tokenizer_path, else
// model_path), adds the adapters and encodes the training and validation prompts.
func openHF(cfg Config) (_ *hfSession[hfPrompt], err error) {
	mc := cfg.Worker.Actor.Model
	key := func(err error) error { return keyErr("worker.actor.model.model_path", "%s: %v", mc.ModelPath, err) }
	ck, err := hfmodel.Open(mc.ModelPath)
	if err != nil {
		return nil, key(err)
	}
	gen := ck.Generation
	if gen == nil {
		gen = hfmodel.NewGenerationConfig(ck.Config)
	}
	exp, err := exportOptions(cfg.Worker.Actor.Checkpoint, ck.Config)
	if err != nil {
		ck.Close()
		return nil, err
	}
	backend, closeBackend, err := cfg.actorBackend()
	if err != nil {
		ck.Close()
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = closeBackend()
		}
	}()
	model, err := hflm.LoadOn(ck, backend)
	ck.Close()
	if err != nil {
		return nil, key(err)
	}
	if err := cfg.Worker.Actor.applyScale(model); err != nil {
		return nil, err
	}
	tokDir, tok, ct, err := openTokenizer(mc)
	if err != nil {
		return nil, err
	}
	if err := addLoRA(model, mc); err != nil {
		return nil, err
	}
	d := cfg.Dataset
	format, err := loadFormatPrompt(d.FormatPrompt)
	if err != nil {
		return nil, err
	}
	rows, err := textRows(d.TrainFiles, "dataset.train_files", d, format)
	if err != nil {
		return nil, err
	}
	if d.TrainFiles == "" {
		if rows, err = arithmeticRows(d.TrainSize, d.Seed, format); err != nil {
			return nil, err
		}
	}
	train, dropped, err := encodePrompts(rows, ct, tok, d)
	if err != nil {
		return nil, err
	}
	if len(train) < d.RolloutBatchSize {
		return nil, fmt.Errorf("dataset: %d prompts fit dataset.max_prompt_length %d (%d dropped), want >= dataset.rollout_batch_size %d", len(train), d.MaxPromptLength, dropped, d.RolloutBatchSize)
	}
	// Validation: dataset.val_files, or with the generated task val_size more of its questions.
	vrows, err := textRows(d.ValFiles, "dataset.val_files", d, format)
	if err != nil {
		return nil, err
	}
	if d.ValFiles == "" && d.TrainFiles == "" {
		if vrows, err = arithmeticRows(d.ValSize, d.Seed^0x76616c, format); err != nil { // "val"
			return nil, err
		}
	}
	val, vdropped, err := encodePrompts(vrows, ct, tok, d)
	if err != nil {
		return nil, err
	}
	padded := !cfg.Worker.Actor.PaddingFree
	m := &textModel{Model: model, gen: gen, tokDir: tokDir, export: exp, lora: mc.LoraRank > 0, modelDir: mc.ModelPath,
		offload: cfg.Worker.Actor.Device == "cuda" && cfg.Worker.Actor.offloadOptimizer()}
	s := &hfSession[hfPrompt]{
		model:    model,
		policy:   policyOf(model, gen, tok, padded),
		rewards:  cfg.hfRewards(),
		training: m.training,
		train:    train,
		val:      val,
		export:   m.save,
		close:    closeBackend,
	}
	s.reference = func() (loop.Scorer[hfPrompt], error) {
		if mc.LoraRank > 0 {
			return policyOf(model.Base(), gen, tok, padded), nil // the adapters off: no copy
		}
		// Full fine-tuning changes the weights: the reference is a second, frozen load (on the
		// policy's backend).
		ref, err := hflm.LoadDirOn(mc.ModelPath, backend)
		if err != nil {
			return nil, key(err)
		}
		if err := cfg.Worker.Actor.applyScale(ref); err != nil { // the reference computes as the policy
			return nil, err
		}
		return policyOf(ref, gen, tok, padded), nil
	}
	lora := "full fine-tuning"
	s.exported = hfExportDir + "/ (the model in Hugging Face's layout, " + exp.DType.String() + ", with the tokenizer)"
	if mc.LoraRank > 0 {
		lora = fmt.Sprintf("LoRA rank %d", mc.LoraRank)
		s.exported = hfAdapterDir + "/ (the PEFT adapter) and " + s.exported
	}
	ps, err := model.Params()
	if err != nil {
		return nil, err
	}
	trained := 0
	for _, p := range ps {
		trained += p.Value.Len()
	}
	s.describe = fmt.Sprintf("model %s: %d parameters (%s: %d trained, %s); %d prompts (%d over max_prompt_length dropped), %d validation prompts (%d dropped)",
		mc.ModelPath, model.NumParams(), lora, trained, cfg.Worker.Actor.dtypeName(), len(train), dropped, len(val), vdropped)
	return s, nil
}

// textRows reads the comma-separated JSONL files of key (nil when there are none).
func textRows(files, key string, d DatasetConfig, format *hfmodel.ChatTemplate) ([]hfRow, error) {
	var rows []hfRow
	for _, path := range strings.Split(files, ",") {
		if path = strings.TrimSpace(path); path == "" {
			continue
		}
		part, err := loadTextRows(path, d, format)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		rows = append(rows, part...)
	}
	return rows, nil
}

// policyOf is model m as a loop policy over text prompts, stopping at gen's EOS ids.
// padded: right-padded scoring passes (worker.actor.padding_free false).
func policyOf(m *hflm.Model, gen *hfmodel.GenerationConfig, tok *hfmodel.Tokenizer, padded bool) *hflm.Policy[hfPrompt] {
	return &hflm.Policy[hfPrompt]{Model: m, Stop: stopIDs(gen), Padded: padded,
		Prompt: func(p hfPrompt) []int32 { return p.ids },
		Decode: decoder(tok),
	}
}

// stopIDs are gen's EOS token ids, where a policy stops sampling.
func stopIDs(gen *hfmodel.GenerationConfig) []int32 {
	var stop []int32
	for _, id := range gen.EOSTokenIDs {
		stop = append(stop, int32(id))
	}
	return stop
}

// decoder is a policy's Decode: the text of ids with the special tokens skipped.
func decoder(tok *hfmodel.Tokenizer) func([]int32) string {
	return func(ids []int32) string {
		v := make([]int, len(ids))
		for i, id := range ids {
			v[i] = int(id)
		}
		s, _ := tok.Decode(v, true) // ids come from the model's own vocabulary
		return s
	}
}

// openTokenizer loads the tokenizer and chat template of tokenizer_path, else model_path,
// and returns that directory with them; an error names the key it came from.
func openTokenizer(mc ModelConfig) (string, *hfmodel.Tokenizer, *hfmodel.ChatTemplate, error) {
	dir, key := mc.ModelPath, "worker.actor.model.model_path"
	if mc.TokenizerPath != "" {
		dir, key = mc.TokenizerPath, "worker.actor.model.tokenizer_path"
	}
	tok, err := hfmodel.LoadTokenizer(dir)
	if err != nil {
		return "", nil, nil, keyErr(key, "%s: %v", dir, err)
	}
	ct, err := hfmodel.LoadChatTemplate(dir)
	if err != nil {
		return "", nil, nil, keyErr(key, "%s: %v", dir, err)
	}
	return dir, tok, ct, nil
}

// addLoRA adds lora_rank adapters (none at rank 0) to the language model m.
func addLoRA(m *hflm.Model, mc ModelConfig) error {
	if mc.LoraRank <= 0 {
		return nil
	}
	if err := m.AddLoRA(mc.loraConfig()); err != nil {
		return loraKeyErr(err)
	}
	return nil
}

// loraConfig is PEFT's LoraConfig of the LoRA keys.
func (mc ModelConfig) loraConfig() hflm.LoRAConfig {
	return hflm.LoRAConfig{Rank: mc.LoraRank, Alpha: mc.LoraAlpha, Dropout: mc.LoraDropout,
		TargetModules: mc.TargetModules, ExcludeModules: mc.ExcludeModules, Seed: mc.Seed}
}

// loraKeyErr names the key of an AddLoRA error.
func loraKeyErr(err error) error {
	key := "worker.actor.model.lora_rank"
	for _, k := range []string{"TargetModules", "ExcludeModules"} {
		if strings.Contains(err.Error(), k) {
			key = "worker.actor.model." + map[string]string{"TargetModules": "target_modules", "ExcludeModules": "exclude_modules"}[k]
		}
	}
	return keyErr(key, "%v", err)
}

// runModelPath is Run with worker.actor.model.model_path: the checks of validateModelPath,
// then runHF with the text model.
func runModelPath(ctx context.Context, cfg Config, stdout, stderr io.Writer) (*Summary, error) {
	if err := cfg.validateModelPath(); err != nil {
		return nil, err
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if isVLModel(cfg.Worker.Actor.Model.ModelPath) {
		return runHF(ctx, cfg, openHFVL, stdout, stderr) // hfvl.go
	}
	return runHF(ctx, cfg, openHF, stdout, stderr)
}
