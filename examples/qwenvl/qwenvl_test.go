package qwenvl

import (
	"bytes"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

func TestParseProcessorConfig(t *testing.T) {
	// Qwen2-VL-7B-Instruct's preprocessor_config.json.
	real := `{"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
	  "merge_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
	  "image_std": [0.26862954, 0.26130258, 0.27577711],
	  "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor"}`
	c, err := ParseProcessorConfig([]byte(real))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultProcessorConfig()
	want.MaxPixels = 12845056
	if c != want {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
	// min_pixels / max_pixels override size, as in Qwen2VLImageProcessor.
	c, err = ParseProcessorConfig([]byte(`{"size": {"shortest_edge": 100, "longest_edge": 5000}, "max_pixels": 7000, "image_std": 0.5}`))
	if err != nil || c.MinPixels != 100 || c.MaxPixels != 7000 || c.ImageStd != [3]float64{0.5, 0.5, 0.5} {
		t.Fatalf("got %+v, %v", c, err)
	}
	for _, bad := range []struct{ json, names string }{
		{`{"do_pad": true}`, "do_pad"},
		{`{"resample": 2}`, "resample"},
		{`{"patch_size": 0}`, "patch_size"},
		{`{"merge_size": -1}`, "merge_size"},
		{`{"temporal_patch_size": 0}`, "temporal_patch_size"},
		{`{"min_pixels": 5000, "max_pixels": 100}`, "min_pixels"},
		{`{"image_std": [1, 0, 1]}`, "image_std"},
		{`{"image_mean": [1, 2]}`, "image_mean"},
		{`{"size": {"shortest_edge": 1}}`, "size"},
		{`{"do_resize": "yes"}`, "do_resize"},
		{`[1]`, "JSON object"},
	} {
		_, err := ParseProcessorConfig([]byte(bad.json))
		if err == nil || !errors.Is(err, tensor.ErrParam) || !strings.Contains(err.Error(), bad.names) {
			t.Errorf("%s: error %v, want ErrParam naming %s", bad.json, err, bad.names)
		}
	}
}

func TestToRGB(t *testing.T) {
	// Pillow's convert("RGB") drops alpha without compositing, and replicates gray.
	nrgba := image.NewNRGBA(image.Rect(0, 0, 1, 1))
	nrgba.Pix = []uint8{10, 20, 30, 0}
	gray := image.NewGray(image.Rect(2, 3, 3, 4))
	gray.Pix[0] = 77
	pal := image.NewPaletted(image.Rect(0, 0, 1, 1), color.Palette{color.NRGBA{1, 2, 3, 4}, color.NRGBA{200, 100, 50, 9}})
	pal.Pix[0] = 1
	n64 := image.NewNRGBA64(image.Rect(0, 0, 1, 1))
	n64.SetNRGBA64(0, 0, color.NRGBA64{0x1234, 0xabcd, 0xff00, 0})
	for _, c := range []struct {
		img  image.Image
		want [3]uint8
	}{
		{nrgba, [3]uint8{10, 20, 30}},
		{gray, [3]uint8{77, 77, 77}},
		{pal, [3]uint8{200, 100, 50}},
		{n64, [3]uint8{0x12, 0xab, 0xff}},
	} {
		got, err := ToRGB(c.img)
		if err != nil {
			t.Fatal(err)
		}
		if got.Width != 1 || got.Height != 1 || [3]uint8(got.Pix) != c.want {
			t.Errorf("%T: %v, want %v", c.img, got.Pix, c.want)
		}
	}
	// Fast paths on images whose bounds do not start at the origin, and a translucent RGBA.
	rgba := image.NewRGBA(image.Rect(1, 1, 3, 2))
	rgba.SetRGBA(1, 1, color.RGBA{1, 2, 3, 255})
	rgba.SetRGBA(2, 1, color.RGBA{4, 5, 6, 255})
	sub := image.NewNRGBA(image.Rect(0, 0, 3, 3)).SubImage(image.Rect(1, 2, 3, 3)).(*image.NRGBA)
	sub.SetNRGBA(1, 2, color.NRGBA{7, 8, 9, 0})
	sub.SetNRGBA(2, 2, color.NRGBA{10, 11, 12, 13})
	half := image.NewRGBA(image.Rect(0, 0, 2, 1))
	half.SetRGBA(0, 0, color.RGBA{50, 25, 0, 128})
	half.SetRGBA(1, 0, color.RGBA{9, 9, 9, 255})
	for _, c := range []struct {
		img  image.Image
		want []uint8
	}{
		{rgba, []uint8{1, 2, 3, 4, 5, 6}},
		{sub, []uint8{7, 8, 9, 10, 11, 12}},
		{half, []uint8{99, 49, 0, 9, 9, 9}},
	} {
		got, err := ToRGB(c.img)
		if err != nil || got.Width != 2 || got.Height != 1 || !bytes.Equal(got.Pix, c.want) {
			t.Errorf("%T %v: %v, %v; want %v", c.img, c.img.Bounds(), got, err, c.want)
		}
	}
	for _, bad := range []image.Image{nil, image.NewGray16(image.Rect(0, 0, 1, 1)), image.NewCMYK(image.Rect(0, 0, 1, 1)), image.NewRGBA(image.Rect(0, 0, 0, 0))} {
		if _, err := ToRGB(bad); err == nil {
			t.Errorf("%T: no error", bad)
		}
	}
}

func TestResizeBicubicErrorsAndIdentity(t *testing.T) {
	src := NewRGB(3, 2)
	for i := range src.Pix {
		src.Pix[i] = uint8(i * 13)
	}
	same, err := ResizeBicubic(src, 3, 2)
	if err != nil || !bytes.Equal(same.Pix, src.Pix) || &same.Pix[0] == &src.Pix[0] {
		t.Fatalf("same size must be a copy: %v", err)
	}
	for _, c := range []struct {
		src  *RGB
		w, h int
	}{{nil, 2, 2}, {&RGB{Width: 2, Height: 2, Pix: make([]uint8, 5)}, 2, 2}, {src, 0, 2}, {src, 2, -1}} {
		if _, err := ResizeBicubic(c.src, c.w, c.h); !errors.Is(err, tensor.ErrShape) {
			t.Errorf("ResizeBicubic(%v, %d, %d): %v, want ErrShape", c.src, c.w, c.h, err)
		}
	}
	// A constant image stays constant whatever the scale: the weights sum to one.
	flat := NewRGB(37, 23)
	for i := range flat.Pix {
		flat.Pix[i] = 200
	}
	for _, size := range [][2]int{{5, 4}, {100, 61}, {37, 80}} {
		out, _ := ResizeBicubic(flat, size[0], size[1])
		for _, v := range out.Pix {
			if v != 200 {
				t.Fatalf("%v: constant image changed to %d", size, v)
			}
		}
	}
}

func TestProcessorErrors(t *testing.T) {
	proc, _ := NewProcessor(DefaultProcessorConfig())
	if _, err := proc.Images([]*RGB{NewRGB(20, 50)}); !errors.Is(err, tensor.ErrShape) {
		t.Errorf("20-pixel side: %v, want ErrShape (below the factor 28)", err)
	}
	if _, err := proc.Images([]*RGB{NewRGB(28, 6000)}); !errors.Is(err, tensor.ErrShape) {
		t.Errorf("aspect ratio above 200: %v, want ErrShape", err)
	}
	if _, err := proc.Images([]*RGB{nil}); !errors.Is(err, tensor.ErrShape) {
		t.Errorf("nil image: %v", err)
	}
	if _, err := proc.Video([][]*RGB{{}}); !errors.Is(err, tensor.ErrShape) {
		t.Errorf("video without frames: %v", err)
	}
	cfg := DefaultProcessorConfig()
	cfg.DoResize = false
	noResize, _ := NewProcessor(cfg)
	if _, err := noResize.Images([]*RGB{NewRGB(57, 56)}); !errors.Is(err, tensor.ErrShape) {
		t.Errorf("do_resize false, width 57: %v, want ErrShape", err)
	}
	if _, err := noResize.Video([][]*RGB{{NewRGB(56, 56), NewRGB(84, 56)}}); !errors.Is(err, tensor.ErrShape) {
		t.Errorf("do_resize false, frames of two sizes: %v, want ErrShape", err)
	}
	cfg = DefaultProcessorConfig()
	cfg.Resample = 2
	if _, err := NewProcessor(cfg); !errors.Is(err, tensor.ErrParam) {
		t.Errorf("bilinear: %v, want ErrParam", err)
	}
}

func TestRopeIndexErrors(t *testing.T) {
	tok := Qwen2VLTokens()
	s, img, vid := tok.VisionStartID, tok.ImageID, tok.VideoID
	g := []Grid{{1, 2, 2}}
	for _, c := range []struct {
		name string
		in   RopeInputs
	}{
		{"no rows", RopeInputs{}},
		{"ragged rows", RopeInputs{InputIDs: [][]int64{{1, 2}, {1}}}},
		{"mask shape", RopeInputs{InputIDs: [][]int64{{1, 2}}, Mask: [][]int64{{1}}}},
		{"mask value", RopeInputs{InputIDs: [][]int64{{1, 2}}, Mask: [][]int64{{1, 2}}}},
		{"start at end", RopeInputs{InputIDs: [][]int64{{1, s}}, ImageGrids: g}},
		{"short block", RopeInputs{InputIDs: [][]int64{{s, img, 9}}, ImageGrids: []Grid{{1, 4, 4}}}},
		{"more images than grids", RopeInputs{InputIDs: [][]int64{{s, img, 9, s, img}}, ImageGrids: g}},
		{"unused grid", RopeInputs{InputIDs: [][]int64{{s, img, 9}}, ImageGrids: []Grid{{1, 2, 2}, {1, 2, 2}}}},
		{"odd grid", RopeInputs{InputIDs: [][]int64{{s, img}}, ImageGrids: []Grid{{1, 3, 2}}}},
		{"all padding", RopeInputs{InputIDs: [][]int64{{s, img}, {0, 0}}, Mask: [][]int64{{1, 1}, {0, 0}}, ImageGrids: g}},
		{"seconds count", RopeInputs{InputIDs: [][]int64{{s, vid}}, VideoGrids: g, SecondPerGrid: []float64{1, 2}}},
	} {
		if _, err := RopeIndex(c.in, tok); !errors.Is(err, tensor.ErrShape) && !errors.Is(err, tensor.ErrParam) {
			t.Errorf("%s: %v, want an ErrShape or ErrParam", c.name, err)
		}
	}
	if _, err := ExpandText([]string{ImagePad + ImagePad}, g, nil, 2); err == nil {
		t.Error("ExpandText: two pads, one grid: no error")
	}
	if _, err := ExpandText([]string{"x"}, g, nil, 2); err == nil {
		t.Error("ExpandText: unused grid: no error")
	}
	if _, err := ExpandTokens([][]int64{{img, img}}, g, nil, tok); err == nil {
		t.Error("ExpandTokens: two pads, one grid: no error")
	}
}

func TestRunPreprocessCommand(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "preprocessor_config.json"), []byte(`{"min_pixels": 3136, "max_pixels": 1003520}`), 0o644); err != nil {
		t.Fatal(err)
	}
	img := image.NewNRGBA(image.Rect(0, 0, 97, 61))
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 7)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "a.png")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := RunPreprocessCommand([]string{"-model", dir, "-image", file, file}, &out); err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.Bytes())
	}
	if len(rep.ImageGridTHW) != 2 || rep.ImageGridTHW[0] != [3]int{1, 4, 6} || rep.PixelValuesShape != [2]int{48, 1176} {
		t.Fatalf("report %+v", rep)
	}
	if rep.Images[1].ResizedWidth != 84 || rep.Images[1].ResizedHeight != 56 || rep.Images[1].Tokens != 6 {
		t.Fatalf("image report %+v", rep.Images[1])
	}
	if rep.Stats.Min >= rep.Stats.Max || rep.Stats.Std <= 0 {
		t.Fatalf("stats %+v", rep.Stats)
	}
	for _, args := range [][]string{{"-image", file}, {"-model", dir}, {"-model", t.TempDir(), "-image", file}, {"-model", dir, "-image", filepath.Join(dir, "missing.png")}, {"-bogus"}} {
		if err := RunPreprocessCommand(args, &out); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

func TestParseVisionTokens(t *testing.T) {
	qwen25 := `{"model_type": "qwen2_5_vl", "vision_start_token_id": 151652, "vision_end_token_id": 151653,
	  "image_token_id": 151655, "video_token_id": 151656,
	  "vision_config": {"spatial_merge_size": 2, "tokens_per_second": 2}}`
	tok, err := ParseVisionTokens([]byte(qwen25))
	want := Qwen2VLTokens()
	want.TokensPerSecond = 2
	if err != nil || tok != want {
		t.Fatalf("qwen2_5_vl: %+v, %v; want %+v", tok, err, want)
	}
	qwen2 := strings.Replace(strings.Replace(qwen25, "qwen2_5_vl", "qwen2_vl", 1), `, "tokens_per_second": 2`, "", 1)
	if tok, err := ParseVisionTokens([]byte(qwen2)); err != nil || tok != Qwen2VLTokens() {
		t.Fatalf("qwen2_vl: %+v, %v", tok, err)
	}
	for _, bad := range []string{
		strings.Replace(qwen25, "qwen2_5_vl", "qwen2", 1),
		strings.Replace(qwen25, `"image_token_id": 151655,`, "", 1),
		strings.Replace(qwen25, `"spatial_merge_size": 2`, `"spatial_merge_size": 0`, 1),
		`{`,
	} {
		if _, err := ParseVisionTokens([]byte(bad)); !errors.Is(err, tensor.ErrParam) {
			t.Errorf("%s: %v, want ErrParam", bad, err)
		}
	}
}
