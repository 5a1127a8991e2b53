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
