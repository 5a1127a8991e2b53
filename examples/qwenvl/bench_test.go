package qwenvl

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/internal/cputime"
	"github.com/mtrl-go/mtrl/tensor"
)

// benchImage is a 1280×720 frame with detail everywhere (a 720p screenshot's size).
func benchImage() *RGB {
	img := NewRGB(1280, 720)
	for i := range img.Pix {
		img.Pix[i] = uint8(i*7 + i/3840*13)
	}
	return img
}

// BenchmarkPreprocess1280x720 times Processor.Images on one 1280×720 RGB image at the default
// min/max pixels (resized to 1288×728, 4784 patches): resize, rescale, normalise, patchify.
func BenchmarkPreprocess1280x720(b *testing.B) {
	proc, err := NewProcessor(DefaultProcessorConfig())
	if err != nil {
		b.Fatal(err)
	}
	imgs := []*RGB{benchImage()}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := proc.Images(imgs); err != nil {
			b.Fatal(err)
		}
	}
	perImage := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(1/perImage, "images/s")
	b.ReportMetric(1280*720/1e6/perImage, "MP/s")
}

// BenchmarkResizeBicubic1280x720 times the resize alone, to 1288×728.
func BenchmarkResizeBicubic1280x720(b *testing.B) {
	img := benchImage()
	b.ResetTimer()
	for b.Loop() {
		if _, err := ResizeBicubic(img, 1288, 728); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(1280*720/1e6/(b.Elapsed().Seconds()/float64(b.N)), "MP/s")
}

// benchTower is Qwen2.5-VL's vision tower (3B/7B: dim 1280, 16 heads, MLP 3420, window 112,
// RMSNorm, gated SiLU) or Qwen2-VL's (dim 1280, MLP 5120, LayerNorm, quick_gelu) with random
// weights and QWENVL_BENCH_DEPTH blocks (default 2; Qwen2.5-VL's last block attends fully),
// and the pixel_values of one 224×224 image (16×16 = 256 patches).
func benchTower(b *testing.B, cfgFile string) (*Vision, Patches) {
	c, err := LoadConfigFile(filepath.Join("testdata", "models", cfgFile))
	if err != nil {
		b.Fatal(err)
	}
	v := c.Vision
	v.Depth = 2
	if s := os.Getenv("QWENVL_BENCH_DEPTH"); s != "" {
		if v.Depth, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	if c.Variant == Qwen25VL {
		v.FullAttBlocks = []int{v.Depth - 1}
	}
	t, err := newVision(c.Variant, v, randomWeights(visionSpecs(c.Variant, v), 0.02, 1), tensor.CPU())
	if err != nil {
		b.Fatal(err)
	}
	return t, testPatches([][3]int{{1, 16, 16}}, v.PatchDim())
}

// benchPatches reports patches per wall-second and per CPU-second of the process.
func benchPatches(b *testing.B, patches int, run func()) {
	cpu0, _ := cputime.Process()
	b.ResetTimer()
	for b.Loop() {
		run()
	}
	cpu1, ok := cputime.Process()
	b.ReportMetric(float64(patches*b.N)/b.Elapsed().Seconds(), "patches/s")
	if ok {
		b.ReportMetric(float64(patches*b.N)/(cpu1-cpu0).Seconds(), "patches/cpu-s")
	}
}

// BenchmarkVisionTower times the tower's forward (inference) and forward + backward (the
// trained tower of an RL update) on one 224×224 image; scripts/qwen2vl_torch_twin.py bench
// times the same with PyTorch.
func BenchmarkVisionTower(b *testing.B) {
	for _, cfg := range []string{"qwen2-vl-2b-instruct-config.json", "qwen2.5-vl-7b-config-nested.json"} {
		t, p := benchTower(b, cfg)
		name := map[string]string{"qwen2-vl-2b-instruct-config.json": "qwen2-vl", "qwen2.5-vl-7b-config-nested.json": "qwen2.5-vl"}[cfg]
		b.Run(name+"/forward", func(b *testing.B) {
			benchPatches(b, p.Rows, func() {
				if _, _, err := t.Forward(p.Values, p.Grids, false); err != nil {
					b.Fatal(err)
				}
			})
		})
		train := func(t *Vision) func(b *testing.B) {
			return func(b *testing.B) {
				benchPatches(b, p.Rows, func() {
					out, a, err := t.Forward(p.Values, p.Grids, true)
					if err != nil {
						b.Fatal(err)
					}
					if err := t.Backward(a, out); err != nil {
						b.Fatal(err)
					}
				})
			}
		}
		b.Run(name+"/train", train(t))
		// LoRA rank 16 on every linear layer (all-linear) of a fresh tower: the frozen base
		// gets no weight gradients, the adapters theirs.
		lt, _ := benchTower(b, cfg)
		if err := lt.addLoRA(hflm.LoRAConfig{Rank: 16, Alpha: 32}, func(i int) bool { return i > 0 }, 0, nil); err != nil {
			b.Fatal(err)
		}
		b.Run(name+"/train-lora", train(lt))
	}
}

// bench3BConfig is Qwen2.5-VL-3B-Instruct's config (the 7B file's with the 3B text widths:
// hidden 2048, MLP 11008, 16 heads, 2 key/value heads, vocabulary 151936, tied embeddings; the
// tower's merger out to 2048) cut to QWENVL_BENCH_VISION_DEPTH vision blocks (default 4, the
// last attending fully, as every eighth does) and QWENVL_BENCH_LM_LAYERS decoder layers
// (default 2).
func bench3BConfig(b *testing.B) *Config {
	data, err := os.ReadFile(filepath.Join("testdata", "models", "qwen2.5-vl-7b-config-nested.json"))
	if err != nil {
		b.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(data, &c); err != nil {
		b.Fatal(err)
	}
	envInt := func(name string, def int) int {
		if s := os.Getenv(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
		return def
	}
	vd, layers := envInt("QWENVL_BENCH_VISION_DEPTH", 4), envInt("QWENVL_BENCH_LM_LAYERS", 2)
	text := c["text_config"].(map[string]any)
	for _, m := range []map[string]any{c, text} {
		m["hidden_size"], m["intermediate_size"], m["num_attention_heads"] = 2048, 11008, 16
		m["num_key_value_heads"], m["vocab_size"], m["num_hidden_layers"] = 2, 151936, layers
		m["tie_word_embeddings"] = true
		delete(m, "layer_types")
	}
	vis := c["vision_config"].(map[string]any)
	vis["out_hidden_size"], vis["depth"], vis["fullatt_block_indexes"] = 2048, vd, []int{vd - 1}
	out, err := json.Marshal(c)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := ParseConfig(out)
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

// benchModel loads random weights for c (as RandomCheckpoint draws them) one tensor at a time
// through bfloat16 checkpoint tensors, so that no float32 copy of the whole checkpoint exists
// besides the model's own.
func benchModel(b *testing.B, c *Config) *Model {
	byName := map[string]*hfmodel.Tensor{}
	for _, s := range expectedTensors(c) {
		w := randomWeights([]specShape{s}, c.Text.InitializerRange, 1)
		t, err := hfmodel.NewTensor(s.name, s.shape, w[s.name], hfmodel.BFloat16)
		if err != nil {
			b.Fatal(err)
		}
		byName[s.name] = t
	}
	m, err := load(c, byName, tensor.CPU())
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// benchPrompt is a chat prompt around one 448×448 image: 12 text tokens, <|vision_start|>,
// the image's 256 tokens (32×32 patches merged 2×2), <|vision_end|>, 12 text tokens.
func benchPrompt(c *Config) Sample {
	grid := [][3]int{{1, 32, 32}}
	s := Sample{Images: testPatches(grid, c.Vision.PatchDim())}
	text := func(k int) {
		for i := range 12 {
			s.IDs = append(s.IDs, int32(100+k*50+i))
		}
	}
	text(0)
	s.IDs = append(s.IDs, int32(c.Tokens.VisionStartID))
	for range 32 * 32 / 4 {
		s.IDs = append(s.IDs, int32(c.Tokens.ImageID))
	}
	s.IDs = append(s.IDs, int32(c.VisionEndID))
	text(1)
	return s
}

// BenchmarkForward3B times Qwen2.5-VL-3B's forward at its real widths, depth cut (see
// bench3BConfig), random weights: the tower alone on one 448×448 image (1024 patches), and
// the whole prefill of benchPrompt (tower, features scattered into the embeddings, M-RoPE
// decoder, the LM head on the last token: Generate of one greedy token), and the language
// model's part alone (the prefill given the tower's features), in float32 and in bf16 mixed
// precision (Model.SetMixedPrecision: the tower's and the language model's GEMMs on bfloat16).
// scripts/qwen2vl_torch_twin.py forward is its PyTorch twin; scripts/qwenvl-vs-torch
// runs both.
func BenchmarkForward3B(b *testing.B) {
	c := bench3BConfig(b)
	m := benchModel(b, c)
	s := benchPrompt(c)
	runtime.GC()
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		if err := m.SetMixedPrecision(dt); err != nil {
			b.Fatal(err)
		}
		name := map[tensor.DType]string{tensor.Float32: "float32", tensor.BFloat16: "bf16"}[dt]
		b.Run(name+"/tower", func(b *testing.B) {
			benchPatches(b, s.Images.Rows, func() {
				if _, _, err := m.Vision.Forward(s.Images.Values, s.Images.Grids, false); err != nil {
					b.Fatal(err)
				}
			})
		})
		pre, err := m.prepare([]Sample{s}, nil, false) // the tower's features, computed once
		if err != nil {
			b.Fatal(err)
		}
		for _, part := range []string{"lm", "prefill"} {
			b.Run(name+"/"+part, func(b *testing.B) {
				cpu0, _ := cputime.Process()
				b.ResetTimer()
				for b.Loop() {
					var err error
					if part == "lm" {
						_, err = m.LM.GenerateInput(pre.in, pre.deltas, hflm.Sampling{MaxNewTokens: 1}, nil)
					} else {
						_, err = m.Generate([]Sample{s}, hflm.Sampling{MaxNewTokens: 1}, nil)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				cpu1, ok := cputime.Process()
				b.ReportMetric(float64(len(s.IDs)*b.N)/b.Elapsed().Seconds(), "tokens/s")
				if ok {
					b.ReportMetric(float64(len(s.IDs)*b.N)/(cpu1-cpu0).Seconds(), "tokens/cpu-s")
				}
			})
		}
	}
}

// BenchmarkTower3B times BenchmarkForward3B's tower alone (Qwen2.5-VL-3B's, depth cut, random
// weights, one 448×448 image: 1024 patches) without the language model's memory: the forward
// and forward + backward (a trained tower), in float32 and in bf16 mode.
func BenchmarkTower3B(b *testing.B) {
	c := bench3BConfig(b)
	t, err := newVision(c.Variant, c.Vision, randomWeights(visionSpecs(c.Variant, c.Vision), c.Text.InitializerRange, 1), tensor.CPU())
	if err != nil {
		b.Fatal(err)
	}
	p := testPatches([][3]int{{1, 32, 32}}, c.Vision.PatchDim())
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		if err := t.SetMixedPrecision(dt); err != nil {
			b.Fatal(err)
		}
		name := map[tensor.DType]string{tensor.Float32: "float32", tensor.BFloat16: "bf16"}[dt]
		b.Run(name+"/forward", func(b *testing.B) {
			benchPatches(b, p.Rows, func() {
				if _, _, err := t.Forward(p.Values, p.Grids, false); err != nil {
					b.Fatal(err)
				}
			})
		})
		b.Run(name+"/train", func(b *testing.B) {
			benchPatches(b, p.Rows, func() {
				out, a, err := t.Forward(p.Values, p.Grids, true)
				if err != nil {
					b.Fatal(err)
				}
				if err := t.Backward(a, out); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}
