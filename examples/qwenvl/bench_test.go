package qwenvl

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/mtrl-go/mtrl/internal/cputime"
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
	t, err := newVision(c.Variant, v, randomWeights(visionSpecs(c.Variant, v), 0.02, 1))
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
