package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/examples/qwenvl"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// tinyVL writes what `go run ./examples/hf init -config qwen2-vl.json -tokenizer qwen2_5` writes
// for a config with the real vocabulary and special-token ids: a tiny random Qwen2-VL (or
// Qwen2.5-VL) with the Qwen2.5 tokenizer and Qwen2-VL's chat template.
func tinyVL(t *testing.T, cfgFile string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("../qwenvl/testdata/models", cfgFile))
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(data, &raw))
	text := raw
	if tc, ok := raw["text_config"].(map[string]any); ok {
		text = tc
	}
	text["vocab_size"] = 151936
	for k, v := range map[string]int{"bos_token_id": 151643, "eos_token_id": 151645, "vision_start_token_id": 151652,
		"vision_end_token_id": 151653, "vision_token_id": 151654, "image_token_id": 151655, "video_token_id": 151656} {
		raw[k] = v
	}
	data, err = json.Marshal(raw)
	require.NoError(t, err)
	cfg, err := qwenvl.ParseConfig(data)
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "model")
	require.NoError(t, qwenvl.RandomCheckpoint(cfg, 7).Save(dir, hfmodel.Float32, qwenvl.LayoutLegacy))
	require.NoError(t, hfmodel.CopyTokenizerFiles(dir, filepath.Join(hfTestdata, "qwen2_5")))
	tpl, err := os.ReadFile(filepath.Join(hfTestdata, "qwen2_vl", "chat_template.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "chat_template.json"), tpl, 0o644))
	return dir
}

// vlOverrides is a run of a few seconds on the generated task (32×32 scenes: 4 image tokens
// after the processor's resize to 56×56).
func vlOverrides(model, run string, extra ...string) []string {
	return hfOverrides(model, run, append([]string{"dataset.train_size=8"}, extra...)...)
}

// writeSeedData writes a seed-format JSONL of n rows under dir with PNG and JPEG images of
// odd sizes (paths relative to dir/images, one row with two images, one with none) and
// returns its path.
func writeSeedData(t *testing.T, dir string, n int) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "images"), 0o755))
	rng := rand.New(rand.NewPCG(1, 2))
	var lines []string
	for i := range n {
		w, h := 30+rng.IntN(60), 30+rng.IntN(60)
		img := image.NewRGBA(image.Rect(0, 0, w, h))
		for y := range h {
			for x := range w {
				img.Set(x, y, color.RGBA{uint8(rng.IntN(256)), uint8(rng.IntN(256)), uint8(rng.IntN(256)), 255})
			}
		}
		var buf bytes.Buffer
		name := fmt.Sprintf("img%d.png", i)
		if i%2 == 1 {
			name = fmt.Sprintf("img%d.jpg", i)
			require.NoError(t, jpeg.Encode(&buf, img, nil))
		} else {
			require.NoError(t, png.Encode(&buf, img))
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, "images", name), buf.Bytes(), 0o644))
		var images any = []string{name}
		prompt := fmt.Sprintf("<image>What is %d + %d?", i, i+1)
		switch i {
		case 1:
			images, prompt = name, "How many dots? Answer in \\boxed{}." // one path; no <image>: the image first
		case 2:
			images, prompt = []string{name, "img0.png"}, fmt.Sprintf("<image> and <image>: what is %d + 1?", i)
		case 3:
			images, prompt = nil, "What is 2 + 2?" // text alone
		}
		b, err := json.Marshal(map[string]any{"prompt": prompt, "answer": fmt.Sprint(2*i + 1), "images": images})
		require.NoError(t, err)
		lines = append(lines, string(b))
	}
	path := filepath.Join(dir, "train.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	return path
}

// countingPolicy counts generations and perturbed scoring passes.
type countingPolicy struct {
	*qwenvl.Policy[vlPrompt]
	generate, perturbed int
}

func (p *countingPolicy) Generate(prompts []vlPrompt, s loop.Sampling, rngs []*rand.Rand) ([]loop.Completion, error) {
	p.generate++
	return p.Policy.Generate(prompts, s, rngs)
}

func (p *countingPolicy) LogProbs(b *loop.Batch[vlPrompt], lo, hi int, in loop.Input, logp, ent *tensor.Tensor) error {
	if in.Perturb != nil {
		p.perturbed++
	}
	return p.Policy.LogProbs(b, lo, hi, in, logp, ent)
}

// TestVLPerturbedPass is VPPO on the real pixels: one generation per step (the perturbed pass
// scores the completions already sampled), a perturbed scoring pass per step, and perception
// scores that are non-zero on the rows with images and exactly zero on the text-only row.
func TestVLPerturbedPass(t *testing.T) {
	model := tinyVL(t, "qwen2-vl.json")
	data := writeSeedData(t, t.TempDir(), 4)
	cfg := mustConfig(t, hfOverrides(model, filepath.Join(t.TempDir(), "run"), "dataset.train_files="+data,
		"dataset.rollout_batch_size=4", "worker.actor.global_batch_size=4", "worker.actor.model.lora_rank=4",
		"optimization.perturbation=gaussian_noise", "dataset.shuffle=false"))
	require.NoError(t, cfg.validateModelPath())
	require.True(t, cfg.Optimization.EnablePerceptionFiltering, "a VL model_path keeps VPPO's defaults")
	s, err := openHFVL(cfg)
	require.NoError(t, err)
	require.NotNil(t, s.perturb)
	require.Len(t, s.train, 4)
	assert.Len(t, s.train[2].images, 2)
	assert.Empty(t, s.train[3].images)
	cp := &countingPolicy{Policy: s.policy.(*qwenvl.Policy[vlPrompt])}
	s.policy = cp
	tr, err := newHFTrainer(cfg, s, 2)
	require.NoError(t, err)
	for step := 1; step <= 2; step++ {
		res, err := tr.loop.Step(context.Background())
		require.NoError(t, err)
		assert.Equal(t, step, cp.generate, "one generation per step")
		assert.Equal(t, step, cp.perturbed, "one perturbed scoring pass per step")
		require.NotNil(t, res.PerceptionScore)
		ps, err := res.PerceptionScore.Float32s()
		require.NoError(t, err)
		mask, err := res.ResponseMask.Float32s()
		require.NoError(t, err)
		T := res.PerceptionScore.Shape()[1]
		for row := range res.Batch.Len() {
			nonzero, tokens := 0, 0
			for j := range T {
				if mask[row*T+j] != 0 {
					tokens++
					if ps[row*T+j] != 0 {
						nonzero++
					}
				}
			}
			if len(res.Batch.Prompts[row].images) == 0 {
				assert.Zero(t, nonzero, "step %d row %d: no image, no perception", step, row)
			} else if tokens > 0 {
				assert.NotZero(t, nonzero, "step %d row %d: the perturbed image changes no log-prob", step, row)
			}
		}
		res.Release()
	}
}

// vlSample is the sample `hf logits` builds for one image and a few text tokens.
func vlSample(t *testing.T, m *qwenvl.Model, dir string) qwenvl.Sample {
	t.Helper()
	pc, err := qwenvl.LoadProcessorConfig(dir)
	require.NoError(t, err)
	proc, err := qwenvl.NewProcessor(pc)
	require.NoError(t, err)
	img, err := qwenvl.LoadImage("../qwenvl/testdata/images/odd_rgb.png")
	require.NoError(t, err)
	patches, err := proc.Images([]*qwenvl.RGB{img})
	require.NoError(t, err)
	rows, err := qwenvl.ExpandTokens([][]int64{{151644, 872, 198, 151652, 151655, 151653, 3838, 374}}, patches.Grids, nil, m.Config.Tokens)
	require.NoError(t, err)
	var ids []int32
	for _, id := range rows[0] {
		ids = append(ids, int32(id))
	}
	return qwenvl.Sample{IDs: ids, Images: patches}
}

func vlLogits(t *testing.T, m *qwenvl.Model, s qwenvl.Sample) []float32 {
	t.Helper()
	lg, err := m.Logits(s)
	require.NoError(t, err)
	v, err := lg.Float32s()
	require.NoError(t, err)
	return v
}

// TestModelPathVLLoRA is the "done when" on the bundled task: a tiny Qwen2-VL trains
// VPPO with LoRA on the language model and the vision tower for 2 steps; the adapter has
// PEFT's names of the published Qwen2-VL layout (base_model.model.model.layers.… and
// base_model.model.visual.…), and the export's logits (what `hf logits` computes: LoadDir,
// Logits) equal the base's with the saved adapter merged, bit for bit. With
// freeze_vision_tower the tower's adapters stay zero (verl freezes model.visual after adding
// them) and the exported tower is the base's; without, it differs.
func TestModelPathVLLoRA(t *testing.T) {
	model := tinyVL(t, "qwen2-vl.json")
	for _, freeze := range []bool{true, false} {
		t.Run(fmt.Sprint("freeze=", freeze), func(t *testing.T) {
			run := filepath.Join(t.TempDir(), "run")
			cfg, err := LoadConfig("", vlOverrides(model, run, "worker.actor.model.lora_rank=4", "worker.actor.model.lora_alpha=8",
				"worker.actor.model.target_modules=[q_proj,v_proj,down_proj,qkv,fc2]", fmt.Sprint("worker.actor.model.freeze_vision_tower=", freeze)))
			require.NoError(t, err)
			var out, errOut bytes.Buffer
			sum, err := Run(context.Background(), cfg, &out, &errOut)
			require.NoError(t, err, errOut.String())
			assert.Equal(t, 2, sum.Steps)
			assert.Contains(t, out.String(), "LoRA rank 4 on the language model (6 adapters) and the vision tower (4 adapters)")
			lines, err := ReadMetrics(filepath.Join(run, "metrics.jsonl"))
			require.NoError(t, err)
			require.Len(t, lines, 2)
			var perception bool
			for k, v := range lines[0].Metrics {
				if strings.Contains(k, "perception") && v != nil && *v != 0 {
					perception = true
				}
			}
			assert.True(t, perception, "no non-zero perception metric: %v", lines[0].Metrics)

			adapter := filepath.Join(run, hfAdapterDir)
			ts, err := hfmodel.ReadSafetensors(filepath.Join(adapter, hflm.AdapterWeightsFile))
			require.NoError(t, err)
			require.Len(t, ts, 2*(2*3+2*2)) // 2 layers × 3 modules and 2 blocks × 2 modules, × (A, B)
			towerB := 0.0
			for _, x := range ts {
				assert.True(t, strings.HasPrefix(x.Name, "base_model.model.model.layers.") || strings.HasPrefix(x.Name, "base_model.model.visual.blocks."), x.Name)
				if strings.HasPrefix(x.Name, "base_model.model.visual.") && strings.HasSuffix(x.Name, "lora_B.weight") {
					for _, v := range x.Float32s() {
						towerB = max(towerB, float64(v*v))
					}
				}
			}
			assert.Equal(t, freeze, towerB == 0, "the tower's B after training, freeze_vision_tower=%v", freeze)
			export := filepath.Join(run, hfExportDir)
			for _, f := range []string{"config.json", "preprocessor_config.json", "model.safetensors", "tokenizer.json", "chat_template.json"} {
				require.FileExists(t, filepath.Join(export, f))
			}
			exported, err := qwenvl.LoadDir(export)
			require.NoError(t, err)
			merged, err := qwenvl.LoadDir(model)
			require.NoError(t, err)
			smp := vlSample(t, merged, model)
			base := vlLogits(t, merged, smp)
			bck, err := merged.Checkpoint()
			require.NoError(t, err)
			require.NoError(t, merged.LoadLoRA(adapter))
			require.NoError(t, merged.MergeLoRA())
			got := vlLogits(t, exported, smp)
			require.NotEqual(t, base, got)
			require.Equal(t, vlLogits(t, merged, smp), got)
			eck, err := exported.Checkpoint()
			require.NoError(t, err)
			towerMoved := false
			for name, w := range eck.Weights {
				if strings.HasPrefix(name, "visual.") {
					towerMoved = towerMoved || !assert.ObjectsAreEqual(w, bck.Weights[name])
				}
			}
			assert.Equal(t, !freeze, towerMoved, "the exported tower moved, freeze_vision_tower=%v", freeze)
		})
	}
}

// TestModelPathVLResume: 4 steps on seed-format JSONL (PNG and JPEG of odd sizes) equal 2
// steps, a resume and 2 more bit for bit (metrics, optimizer, state, export), with LoRA
// (all-linear: the tower's adapters too) and its dropout, and validation every 2 steps.
func TestModelPathVLResume(t *testing.T) {
	model := tinyVL(t, "qwen2.5-vl.json")
	data := writeSeedData(t, t.TempDir(), 6)
	common := []string{"training.steps=4", "dataset.train_files=" + data, "dataset.val_files=" + data, "dataset.val_batch_size=3",
		"dataset.shuffle=true", "training.val_freq=2", "training.save_freq=0", "worker.actor.model.lora_rank=4",
		"worker.actor.model.lora_dropout=0.3", "dataset.max_pixels=2000"}
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	runHFTest(t, context.Background(), vlOverrides(model, a, common...))
	runHFTest(t, context.Background(), vlOverrides(model, b, append(common, "training.steps=2")...))
	runHFTest(t, context.Background(), vlOverrides(model, b, append(common, "training.find_last_checkpoint=true")...))
	sameRun(t, a, b, 4)
	lines, err := ReadMetrics(filepath.Join(a, "metrics.jsonl"))
	require.NoError(t, err)
	require.Len(t, lines, 5) // validation before training, then 4 steps
	for _, l := range lines {
		assert.Equal(t, l.Step%2 == 0, l.Metrics["val/reward_score"] != nil, "step %d", l.Step)
	}
	ts, err := hfmodel.ReadSafetensors(filepath.Join(a, "checkpoints/global_step_4", ckptModel))
	require.NoError(t, err)
	tower := 0
	for _, x := range ts {
		if strings.HasPrefix(x.Name, "base_model.model.visual.") {
			tower++
		}
	}
	assert.Equal(t, 2*(5*3+2), tower, "the checkpoint's tower adapters (3 blocks × 5 projections and the merger's 2, × (A, B))")
	for _, f := range []string{"checkpoints/global_step_4/" + ckptOptimizer, "checkpoints/global_step_4/" + ckptModel, hfExportDir + "/model.safetensors", hfAdapterDir + "/" + hflm.AdapterWeightsFile} {
		fa, err := os.ReadFile(filepath.Join(a, f))
		require.NoError(t, err)
		fb, err := os.ReadFile(filepath.Join(b, f))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(fa, fb), "%s differs", f)
	}
}

// TestVLRowsAndImages: EasyR1's process_image bounds, the user turn's image entries, and the
// refusals of bad rows naming the column.
func TestVLRowsAndImages(t *testing.T) {
	img := qwenvl.NewRGB(100, 50)
	got, err := processImage(img, 0, 1000) // √(1000/5000) = 0.447…: 44 × 22
	require.NoError(t, err)
	assert.Equal(t, [2]int{44, 22}, [2]int{got.Width, got.Height})
	got, err = processImage(img, 20000, 0) // √(20000/5000) = 2: 200 × 100
	require.NoError(t, err)
	assert.Equal(t, [2]int{200, 100}, [2]int{got.Width, got.Height})
	got, err = processImage(img, 1000, 10000) // within bounds: unchanged
	require.NoError(t, err)
	assert.Same(t, img, got)

	conv, err := vlTurn("<image> and <image>: same?", 2)
	require.NoError(t, err)
	assert.JSONEq(t, `{"messages":[{"role":"user","content":[{"type":"image"},{"type":"text","text":" and "},{"type":"image"},{"type":"text","text":": same?"}]}]}`, string(conv))
	conv, err = vlTurn("What?", 1)
	require.NoError(t, err)
	assert.JSONEq(t, `{"messages":[{"role":"user","content":[{"type":"image"},{"type":"text","text":"What?"}]}]}`, string(conv))
	_, err = vlTurn("<image> What?", 2)
	assert.ErrorContains(t, err, "1 <image> placeholders and the row 2 images")

	dir := t.TempDir()
	data := writeSeedData(t, dir, 2)
	d := mustConfig(t, nil).Dataset
	rows, err := loadVLRows(data, d, nil)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	for _, c := range []struct{ line, want string }{
		{`{"prompt": "p", "answer": "1", "images": ["img0.png"], "videos": ["v.mp4"]}`, `column "videos" (dataset.video_key)`},
		{`{"prompt": "p", "answer": "1", "images": ["nope.png"]}`, "missing image file"},
		{`{"prompt": "<image> p", "answer": "1", "images": ["img0.png", "img1.jpg"]}`, "1 <image> placeholders and the row 2 images"},
		{`{"prompt": ["p"], "answer": "1"}`, `column "prompt" (dataset.prompt_key)`},
		{`{"prompt": "p", "images": ["img0.png"]}`, `no "answer" column`},
	} {
		bad := filepath.Join(dir, "bad.jsonl")
		require.NoError(t, os.WriteFile(bad, []byte(c.line+"\n"), 0o644))
		_, err := loadVLRows(bad, d, nil)
		assert.ErrorContains(t, err, c.want, c.line)
	}
	ignore := d
	ignore.IgnoreVideos = true
	bad := filepath.Join(dir, "videos.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte(`{"prompt": "p", "answer": "1", "images": ["img0.png"], "videos": ["v.mp4"]}`+"\n"), 0o644))
	_, err = loadVLRows(bad, ignore, nil)
	assert.NoError(t, err, "dataset.ignore_videos")
}

// TestModelPathVLRefusals: what the VL path does not do is a configuration error naming the
// key, before the run directory exists.
func TestModelPathVLRefusals(t *testing.T) {
	model := tinyVL(t, "qwen2-vl.json")
	dir := t.TempDir()
	data := writeSeedData(t, dir, 2)
	videos := filepath.Join(dir, "videos.jsonl")
	require.NoError(t, os.WriteFile(videos, []byte(`{"prompt": "p", "answer": "1", "images": ["img0.png"], "videos": ["v.mp4"]}`+"\n"), 0o644))
	for _, c := range []struct {
		extra []string
		want  string
	}{
		{[]string{"worker.reward.mdi_weight=1"}, "worker.reward.mdi_weight"},
		{[]string{"dataset.train_files=" + videos}, `column "videos" (dataset.video_key)`},
		{[]string{"dataset.train_files=" + data, "dataset.max_prompt_length=10"}, "0 prompts fit dataset.max_prompt_length 10 (2 dropped)"},
		{[]string{"dataset.train_files=" + data, "dataset.max_prompt_length=10", "dataset.filter_overlong_prompts=false"}, "(chat template applied, image tokens expanded) exceeds dataset.max_prompt_length 10"},
		{[]string{"optimization.advantage_estimator=gae"}, "optimization.advantage_estimator"},
		{[]string{"worker.actor.model.lora_rank=2", "worker.actor.model.target_modules=[q_proj,qkv_typo]"}, `worker.actor.model.target_modules: hflm.LoRAConfig.Resolve: TargetModules: "qkv_typo" matches no module`},
		{[]string{"worker.actor.model.lora_rank=2", "worker.actor.model.target_modules=qkv", "worker.actor.model.exclude_modules=qkv"}, "worker.actor.model.exclude_modules"},
	} {
		run := filepath.Join(t.TempDir(), "run")
		cfg, err := LoadConfig("", vlOverrides(model, run, c.extra...))
		require.NoError(t, err)
		var out, errOut bytes.Buffer
		_, err = Run(context.Background(), cfg, &out, &errOut)
		require.ErrorContains(t, err, c.want, c.extra)
		assert.NoDirExists(t, run, c.extra)
	}
}

// TestVLMixedPrecision: mixed_precision_dtype=bf16 switches the tower along with the language
// model, in the trained model and in the reference's second load (the tower trained).
func TestVLMixedPrecision(t *testing.T) {
	model := tinyVL(t, "qwen2.5-vl.json")
	data := writeSeedData(t, t.TempDir(), 4)
	cfg := mustConfig(t, hfOverrides(model, filepath.Join(t.TempDir(), "run"), "dataset.train_files="+data,
		"dataset.rollout_batch_size=4", "worker.actor.global_batch_size=4", "worker.actor.fsdp.mixed_precision_dtype=bf16"))
	s, err := openHFVL(cfg)
	require.NoError(t, err)
	m := s.model.(*vlModel)
	assert.Equal(t, tensor.BFloat16, m.LM.MixedPrecision())
	assert.Equal(t, tensor.BFloat16, m.Vision.MixedPrecision())
	ref, err := s.reference()
	require.NoError(t, err)
	rm := ref.(*qwenvl.Policy[vlPrompt]).Model
	require.NotSame(t, m.Vision, rm.Vision)
	assert.Equal(t, tensor.BFloat16, rm.Vision.MixedPrecision())
}
