package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/examples/internal/vqa"
	"github.com/mtrl-go/mtrl/examples/qwenvl"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// This file trains a Qwen2-VL or Qwen2.5-VL checkpoint (worker.actor.model.model_path whose
// config.json names Qwen2VLForConditionalGeneration or Qwen2_5_VLForConditionalGeneration)
// with VPPO through the run loop of hfrun.go: prompts are the chat template's user turn with
// its image entries, the images are the seed JSONL's files (or the generated task's), the
// perturbed pass of the perception score perturbs the real 8-bit pixels (qwenvl.Policy), LoRA
// goes on the modules PEFT would select, the tower's included (qwenvl.Model.AddLoRA), and the
// tower trains (in full, or under LoRA through its adapters) unless freeze_vision_tower.

// vlPrompt is one multimodal prompt: the chat template's token ids (one <|image_pad|> per
// image), the images as EasyR1's process_image leaves them, and the reference answer; choice
// marks the generated multiple-choice task, whose reward reads an option letter.
type vlPrompt struct {
	ids    []int32
	images []*qwenvl.RGB
	answer string
	choice bool
}

// vlRow is a prompt before the chat template.
type vlRow struct {
	conversation []byte
	images       []*qwenvl.RGB
	answer       string
	choice       bool
}

// isVLModel reports whether dir's config.json is a Qwen2-VL or Qwen2.5-VL one.
func isVLModel(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, hfmodel.ConfigFile))
	return err == nil && qwenvl.IsVLConfig(data)
}

// processImage is EasyR1's process_image: an image above maxPixels (below minPixels) is
// scaled by √(bound / pixels), each side truncated to an integer, with Pillow's bicubic
// resize; 0 is no bound. The image is RGB already (qwenvl.ToRGB), which for RGB sources is
// the same as EasyR1's convert("RGB") after the resize.
func processImage(img *qwenvl.RGB, minPixels, maxPixels int) (*qwenvl.RGB, error) {
	scale := func(bound int) (*qwenvl.RGB, error) {
		f := math.Sqrt(float64(bound) / float64(img.Width*img.Height))
		w, h := int(float64(img.Width)*f), int(float64(img.Height)*f)
		if w < 1 || h < 1 {
			return nil, fmt.Errorf("an image of %d×%d scaled to %d pixels is empty", img.Width, img.Height, bound)
		}
		return qwenvl.ResizeBicubic(img, w, h)
	}
	var err error
	if maxPixels > 0 && img.Width*img.Height > maxPixels {
		if img, err = scale(maxPixels); err != nil {
			return nil, err
		}
	}
	if minPixels > 0 && img.Width*img.Height < minPixels {
		if img, err = scale(minPixels); err != nil {
			return nil, err
		}
	}
	return img, nil
}

// vlTurn is the user turn of prompt s with n images as EasyR1 builds it: s split at each
// "<image>", an image entry between the parts. A prompt without "<image>" gets its images
// first, as Qwen2-VL's examples place them; another count of "<image>" than of images is an
// error.
func vlTurn(s string, n int) ([]byte, error) {
	parts := strings.Split(s, "<image>")
	if len(parts) == 1 {
		parts = append(make([]string, n), s)
	} else if len(parts)-1 != n {
		return nil, fmt.Errorf("the prompt has %d <image> placeholders and the row %d images", len(parts)-1, n)
	}
	var content []map[string]string
	for i, p := range parts {
		if i > 0 {
			content = append(content, map[string]string{"type": "image"})
		}
		if p != "" {
			content = append(content, map[string]string{"type": "text", "text": p})
		}
	}
	return json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "user", "content": content}}})
}

// nonEmpty reports whether a JSON column holds something (not absent, null, "" or []).
func nonEmpty(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) > 0 && !bytes.Equal(v, []byte("null")) && !bytes.Equal(v, []byte("[]")) && !bytes.Equal(v, []byte(`""`))
}

// loadVLRows reads a JSONL file of the seeds' format with images: the prompt column a string
// (with "<image>" placeholders or none), the answer a string or a number, the image column a
// path or a list of paths (PNG, JPEG or GIF of any size) relative to dataset.image_dir, else
// to the file's directory or its images/ subdirectory. A row with videos is an error naming
// the column unless dataset.ignore_videos.
func loadVLRows(path string, d DatasetConfig, format *hfmodel.ChatTemplate) ([]vlRow, error) {
	if ext := strings.ToLower(filepath.Ext(path)); ext != ".jsonl" && ext != ".json" {
		return nil, fmt.Errorf("%s: want a .jsonl file (one JSON object per line) with a vision-language model_path", path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dirs := []string{d.ImageDir}
	if d.ImageDir == "" {
		dirs = []string{filepath.Dir(path), filepath.Join(filepath.Dir(path), "images")}
	}
	var rows []vlRow
	for n, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		loc := fmt.Sprintf("%s line %d", path, n+1)
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(line, &rec); err != nil {
			return nil, fmt.Errorf("%s: %v", loc, err)
		}
		if vk := d.VideoKey; vk != "" && nonEmpty(rec[vk]) && !d.IgnoreVideos {
			return nil, fmt.Errorf("%s: column %q (dataset.video_key): the row has videos, and video training is not wired here: remove them, or set dataset.ignore_videos=true to train on the row's images alone", loc, vk)
		}
		var prompt string
		if err := json.Unmarshal(rec[d.PromptKey], &prompt); err != nil || rec[d.PromptKey] == nil {
			return nil, fmt.Errorf("%s: column %q (dataset.prompt_key): want a string", loc, d.PromptKey)
		}
		var r vlRow
		switch a := bytes.TrimSpace(rec[d.AnswerKey]); {
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
		var paths []string
		if raw := rec[d.ImageKey]; nonEmpty(raw) {
			var one string
			if json.Unmarshal(raw, &one) == nil {
				paths = []string{one}
			} else if err := json.Unmarshal(raw, &paths); err != nil {
				return nil, fmt.Errorf("%s: column %q (dataset.image_key): want a path or a list of paths: %v", loc, d.ImageKey, err)
			}
		}
		for _, p := range paths {
			img, err := loadVLImage(dirs, p, d)
			if err != nil {
				return nil, fmt.Errorf("%s: column %q: %v", loc, d.ImageKey, err)
			}
			r.images = append(r.images, img)
		}
		if r.conversation, err = vlConversation(prompt, len(r.images), format); err != nil {
			return nil, fmt.Errorf("%s: %v", loc, err)
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s has no rows", path)
	}
	return rows, nil
}

// vlConversation is the conversation of prompt s with n images, s first rewritten by the
// format_prompt template when there is one.
func vlConversation(s string, n int, format *hfmodel.ChatTemplate) ([]byte, error) {
	if format != nil {
		vars, err := json.Marshal(map[string]any{"messages": []any{}, "content": s})
		if err != nil {
			return nil, err
		}
		if s, err = format.Render(vars, false); err != nil {
			return nil, fmt.Errorf("dataset.format_prompt: %v", err)
		}
	}
	return vlTurn(s, n)
}

// loadVLImage decodes the image at rel (absolute, or relative to the first of dirs holding
// it) and applies process_image.
func loadVLImage(dirs []string, rel string, d DatasetConfig) (*qwenvl.RGB, error) {
	if rel == "" {
		return nil, errors.New("empty image path")
	}
	tried := []string{filepath.FromSlash(rel)}
	if !filepath.IsAbs(tried[0]) {
		tried = tried[:0]
		for _, dir := range dirs {
			tried = append(tried, filepath.Join(dir, filepath.FromSlash(rel)))
		}
	}
	for _, p := range tried {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		img, err := qwenvl.LoadImage(p)
		if err != nil {
			return nil, err
		}
		return processImage(img, d.MinPixels, d.MaxPixels)
	}
	return nil, fmt.Errorf("missing image file %s", strings.Join(tried, " or "))
}

// generatedVLRows is the bundled task (examples/internal/vqa) as chat prompts: n scenes from
// seed with ids from firstID, the image before the question.
func generatedVLRows(d DatasetConfig, n int, firstID uint64, format *hfmodel.ChatTemplate) ([]vlRow, error) {
	task := vqa.TaskConfig{ImageSize: d.ImageSize, MaxShapes: d.MaxShapes, Options: d.Options, OrderedOptions: d.OrderedOptions, Chain: d.Task}
	if err := task.Validate(); err != nil {
		return nil, fmt.Errorf("config: dataset: %w", err)
	}
	var rows []vlRow
	for _, s := range vqa.Generate(task, d.Seed, firstID, n) {
		img, err := qwenvl.ToRGB(s.Image)
		if err != nil {
			return nil, err
		}
		if img, err = processImage(img, d.MinPixels, d.MaxPixels); err != nil {
			return nil, err
		}
		conv, err := vlConversation(s.Prompt, 1, format)
		if err != nil {
			return nil, err
		}
		rows = append(rows, vlRow{conversation: conv, images: []*qwenvl.RGB{img}, answer: s.Answer, choice: true})
	}
	return rows, nil
}

// vlRowsOf reads the comma-separated JSONL files of key; with none, n generated rows.
func vlRowsOf(files, key string, n int, firstID uint64, d DatasetConfig, format *hfmodel.ChatTemplate) ([]vlRow, error) {
	if strings.TrimSpace(files) == "" {
		return generatedVLRows(d, n, firstID, format)
	}
	var rows []vlRow
	for _, path := range strings.Split(files, ",") {
		if path = strings.TrimSpace(path); path == "" {
			continue
		}
		part, err := loadVLRows(path, d, format)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		rows = append(rows, part...)
	}
	return rows, nil
}

// promptTokens is the length of a prompt as the model reads it: each <|image_pad|> expanded
// by the grid the processor gives its image.
func promptTokens(ids []int32, images []*qwenvl.RGB, c qwenvl.ProcessorConfig) (int, error) {
	n := len(ids) - len(images)
	for _, img := range images {
		h, w := img.Height, img.Width
		if c.DoResize {
			var err error
			if h, w, err = qwenvl.SmartResize(h, w, c.Factor(), c.MinPixels, c.MaxPixels); err != nil {
				return 0, err
			}
		}
		n += qwenvl.Grid{T: 1, H: h / c.PatchSize, W: w / c.PatchSize}.Tokens(c.MergeSize)
	}
	return n, nil
}

// encodeVLPrompts renders each row with the chat template and encodes it; a prompt whose
// expanded length exceeds max_prompt_length is dropped (filter_overlong_prompts) or an error.
func encodeVLPrompts(rows []vlRow, ct *hfmodel.ChatTemplate, tok *hfmodel.Tokenizer, pc qwenvl.ProcessorConfig, d DatasetConfig) ([]vlPrompt, int, error) {
	var out []vlPrompt
	dropped := 0
	for i, r := range rows {
		text, err := ct.Render(r.conversation, true)
		if err != nil {
			return nil, 0, fmt.Errorf("dataset: row %d: chat template: %w", i, err)
		}
		if got := strings.Count(text, qwenvl.ImagePad); got != len(r.images) {
			return nil, 0, fmt.Errorf("dataset: row %d: the chat template wrote %d %s for %d images (is it Qwen2-VL's?)", i, got, qwenvl.ImagePad, len(r.images))
		}
		p := vlPrompt{images: r.images, answer: r.answer, choice: r.choice}
		for _, id := range tok.Encode(text) {
			p.ids = append(p.ids, int32(id))
		}
		n, err := promptTokens(p.ids, p.images, pc)
		if err != nil {
			return nil, 0, fmt.Errorf("dataset: row %d: %w", i, err)
		}
		if n > d.MaxPromptLength {
			if !d.FilterOverlongPrompts {
				return nil, 0, fmt.Errorf("dataset: row %d: prompt of %d tokens (chat template applied, image tokens expanded) exceeds dataset.max_prompt_length %d (set dataset.filter_overlong_prompts=true to drop such prompts)", i, n, d.MaxPromptLength)
			}
			dropped++
			continue
		}
		out = append(out, p)
	}
	return out, dropped, nil
}

// vlRewards are hfRewards' accuracy and format; on the generated task accuracy is the chosen
// option letter and format the task's think-and-answer format (vqa.Correct, vqa.FormatOK).
func (c Config) vlRewards() []loop.Reward[vlPrompt] {
	a, f := c.Worker.Reward.AccuracyWeight, c.Worker.Reward.FormatWeight
	part := func(score func(text string, p vlPrompt) float64) func(loop.RewardInputs[vlPrompt]) ([]float64, error) {
		return func(in loop.RewardInputs[vlPrompt]) ([]float64, error) {
			out := make([]float64, len(in.Prompts))
			for i, comp := range in.Completions {
				out[i] = score(comp.Text, in.Prompts[i])
			}
			return out, nil
		}
	}
	b := func(ok bool) float64 {
		if ok {
			return 1
		}
		return 0
	}
	return []loop.Reward[vlPrompt]{
		{Name: "accuracy", Weight: a / (a + f), Func: part(func(text string, p vlPrompt) float64 {
			if p.choice {
				return b(vqa.Correct(text, p.answer))
			}
			return b(answersEqual(extractAnswer(text), p.answer))
		})},
		{Name: "format", Weight: f / (a + f), Func: part(func(text string, p vlPrompt) float64 {
			if p.choice {
				return b(vqa.FormatOK(text))
			}
			return b(strings.Contains(text, `\boxed{`) && extractBoxedContent(text) != "None")
		})},
	}
}

// vlModel is the vision-language model of a model_path run as the run loop sees it.
type vlModel struct {
	*qwenvl.Model
	gen      *hfmodel.GenerationConfig
	tokDir   string
	modelDir string
	dtype    hfmodel.DType
	lora     bool
	offload  bool // offload.offload_optimizer on a device (offload.go)
}

func (m *vlModel) DropoutState() ([]byte, error)  { return m.LM.DropoutState() }
func (m *vlModel) SetDropoutState(s []byte) error { return m.LM.SetDropoutState(s) }
func (m *vlModel) Repack() error {
	if err := m.LM.Repack(); err != nil {
		return err
	}
	return m.Vision.Repack()
}

// training is the model's own AdamW (which repacks the weights), on the host or on the
// model's device.
func (m *vlModel) training(weightDecay float64) (loop.Optimizer, *loop.AdamW, loop.Gradients, error) {
	if m.Backend() != tensor.CPU() {
		if m.offload { // the text model's offloaded optimizer over both parts' parameters
			ps, err := m.Params()
			if err != nil {
				return nil, nil, nil, err
			}
			return offloadedTraining(ps, m.Repack, weightDecay)
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

// save writes the PEFT adapter (with LoRA; PEFT's names of the published Qwen2-VL layout,
// base_model.model.model.layers.… and base_model.model.visual.…) into dir/adapter and
// the merged model (legacy weight names, the source's preprocessor and tokenizer files) into
// dir/hf, each through a temporary directory renamed into place.
func (m *vlModel) save(dir string) error {
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
	ck, err := m.Checkpoint()
	if err != nil {
		return err
	}
	out := filepath.Join(tmp, hfExportDir)
	if err := ck.Save(out, m.dtype, qwenvl.LayoutLegacy); err != nil {
		return err
	}
	for _, f := range []string{"preprocessor_config.json", hfmodel.GenerationConfigFile} {
		data, err := os.ReadFile(filepath.Join(m.modelDir, f))
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, f), data, 0o644); err != nil {
			return err
		}
	}
	if err := hfmodel.CopyTokenizerFiles(out, m.tokDir); err != nil {
		return err
	}
	return renameInto(dir, tmp, append(names, hfExportDir))
}

// vlPolicy is model m as a loop policy over vlPrompts.
func vlPolicy(m *qwenvl.Model, proc *qwenvl.Processor, gen *hfmodel.GenerationConfig, tok *hfmodel.Tokenizer) *qwenvl.Policy[vlPrompt] {
	return &qwenvl.Policy[vlPrompt]{Model: m, Processor: proc, Stop: stopIDs(gen),
		Prompt: func(p vlPrompt) qwenvl.Prompt { return qwenvl.Prompt{IDs: p.ids, Images: p.images} },
		Decode: decoder(tok),
	}
}

// loadVL loads the model_path checkpoint onto backend b with the actor's precision settings,
// the tower's included.
func (cfg Config) loadVL(b tensor.Backend) (*qwenvl.Model, error) {
	mc := cfg.Worker.Actor.Model
	model, err := qwenvl.LoadDirOn(mc.ModelPath, b)
	if err != nil {
		return nil, keyErr("worker.actor.model.model_path", "%s: %v", mc.ModelPath, err)
	}
	if err := cfg.Worker.Actor.applyScale(model.LM); err != nil {
		return nil, err
	}
	if err := model.Vision.SetMixedPrecision(model.LM.MixedPrecision()); err != nil { // the tower too
		return nil, err
	}
	return model, nil
}

// openHFVL opens a Qwen2-VL or Qwen2.5-VL checkpoint, its processor, tokenizer and chat
// template, adds the adapters, freezes the tower when asked, and loads the prompts with their
// images; the perturbed pass perturbs them with optimization.perturbation.
func openHFVL(cfg Config) (_ *hfSession[vlPrompt], err error) {
	mc := cfg.Worker.Actor.Model
	key := func(err error) error { return keyErr("worker.actor.model.model_path", "%s: %v", mc.ModelPath, err) }
	vc, err := qwenvl.LoadConfig(mc.ModelPath)
	if err != nil {
		return nil, key(err)
	}
	exp, err := exportOptions(cfg.Worker.Actor.Checkpoint, vc.Text)
	if err != nil {
		return nil, err
	}
	backend, closeBackend, err := cfg.actorBackend() // worker.actor.device
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = closeBackend()
		}
	}()
	model, err := cfg.loadVL(backend)
	if err != nil {
		return nil, err
	}
	model.Vision.Frozen = mc.FreezeVisionTower
	gen, err := hfmodel.LoadGenerationConfig(mc.ModelPath)
	if err != nil {
		return nil, key(err)
	}
	if gen == nil {
		gen = hfmodel.NewGenerationConfig(vc.Text)
	}
	pc, err := qwenvl.LoadProcessorConfig(mc.ModelPath)
	if err != nil {
		return nil, key(err)
	}
	proc, err := qwenvl.NewProcessor(pc)
	if err != nil {
		return nil, key(err)
	}
	tokDir, tok, ct, err := openTokenizer(mc)
	if err != nil {
		return nil, err
	}
	if mc.LoraRank > 0 {
		if err := model.AddLoRA(mc.loraConfig()); err != nil {
			return nil, loraKeyErr(err)
		}
	}
	pert, err := cfg.Perturbation()
	if err != nil {
		return nil, err
	}
	d := cfg.Dataset
	format, err := loadFormatPrompt(d.FormatPrompt)
	if err != nil {
		return nil, err
	}
	rows, err := vlRowsOf(d.TrainFiles, "dataset.train_files", d.TrainSize, 0, d, format)
	if err != nil {
		return nil, err
	}
	train, dropped, err := encodeVLPrompts(rows, ct, tok, pc, d)
	if err != nil {
		return nil, err
	}
	if len(train) < d.RolloutBatchSize {
		return nil, fmt.Errorf("dataset: %d prompts fit dataset.max_prompt_length %d (%d dropped), want >= dataset.rollout_batch_size %d", len(train), d.MaxPromptLength, dropped, d.RolloutBatchSize)
	}
	var vrows []vlRow
	if d.ValFiles != "" || d.TrainFiles == "" { // generated validation ids follow every training id
		if vrows, err = vlRowsOf(d.ValFiles, "dataset.val_files", d.ValSize, 1<<40, d, format); err != nil {
			return nil, err
		}
	}
	val, vdropped, err := encodeVLPrompts(vrows, ct, tok, pc, d)
	if err != nil {
		return nil, err
	}
	m := &vlModel{Model: model, gen: gen, tokDir: tokDir, modelDir: mc.ModelPath, dtype: exp.DType, lora: mc.LoraRank > 0,
		offload: cfg.Worker.Actor.Device == "cuda" && cfg.Worker.Actor.offloadOptimizer()}
	s := &hfSession[vlPrompt]{
		model:    m,
		policy:   vlPolicy(model, proc, gen, tok),
		rewards:  cfg.vlRewards(),
		training: m.training,
		train:    train,
		val:      val,
		export:   m.save,
		perturb:  pert,
		close:    closeBackend,
	}
	s.reference = func() (loop.Scorer[vlPrompt], error) {
		if mc.LoraRank > 0 { // only adapters train: the reference is the model without them, no copy
			return vlPolicy(model.Base(), proc, gen, tok), nil
		}
		base, err := cfg.loadVL(backend) // trained in full: a second, frozen load
		if err != nil {
			return nil, err
		}
		base.Vision.Frozen = true
		return vlPolicy(base, proc, gen, tok), nil
	}
	lora := "full fine-tuning"
	s.exported = hfExportDir + "/ (the model in Hugging Face's layout, " + exp.DType.String() + ", with the processor and tokenizer)"
	tower := "vision tower trained in full"
	if mc.LoraRank > 0 {
		lm, err := model.LM.Params()
		if err != nil {
			return nil, err
		}
		lora = fmt.Sprintf("LoRA rank %d on the language model (%d adapters) and the vision tower (%d adapters)", mc.LoraRank, len(lm)/2, model.TowerAdapters())
		s.exported = hfAdapterDir + "/ (the PEFT adapter) and " + s.exported
		tower = "vision tower trained through its adapters"
	}
	if mc.FreezeVisionTower {
		tower = "vision tower frozen"
	}
	ps, err := model.Params()
	if err != nil {
		return nil, err
	}
	trained := 0
	for _, p := range ps {
		trained += p.Value.Len()
	}
	s.describe = fmt.Sprintf("model %s (%s): %d language-model parameters (%s, %s: %d trained, %s); perturbation %s; %d prompts (%d over max_prompt_length dropped), %d validation prompts (%d dropped)",
		mc.ModelPath, vc.Variant, model.LM.NumParams(), lora, tower, trained, cfg.Worker.Actor.dtypeName(), cfg.Optimization.Perturbation, len(train), dropped, len(val), vdropped)
	return s, nil
}
