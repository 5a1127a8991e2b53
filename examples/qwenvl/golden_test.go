package qwenvl

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// golden is testdata/golden.json, written by scripts/qwen2vl_preprocess_twin.py.
type golden struct {
	Pillow string `json:"pillow"`
	Cases  []struct {
		Name          string          `json:"name"`
		Images        [][]string      `json:"images"`
		Video         bool            `json:"video"`
		Config        json.RawMessage `json:"config"`
		Grids         [][3]int        `json:"grids"`
		Shape         [2]int          `json:"shape"`
		Stats         Stats           `json:"stats"`
		ResizedSize   [][2]int        `json:"resized_size"`
		ResizedSHA256 []string        `json:"resized_sha256"`
		ResizedPNG    []string        `json:"resized_png"`
		PixelValues   string          `json:"pixel_values"`
		Samples       [][2]float64    `json:"samples"`
	} `json:"cases"`
	Errors []struct {
		Name   string          `json:"name"`
		Images [][]string      `json:"images"`
		Config json.RawMessage `json:"config"`
	} `json:"errors"`
	SmartResize [][6]int `json:"smart_resize"`
	Rope        []struct {
		Name          string       `json:"name"`
		Texts         []string     `json:"texts"`
		ExpandedTexts []string     `json:"expanded_texts"`
		RawIDs        [][]int64    `json:"raw_ids"`
		InputIDs      [][]int64    `json:"input_ids"`
		Mask          [][]int64    `json:"mask"`
		Images        [][3]int     `json:"images"`
		Videos        [][3]int     `json:"videos"`
		TokensPerSec  int          `json:"tokens_per_second"`
		SecondPerGrid []float64    `json:"second_per_grid_ts"`
		Positions     [3][][]int64 `json:"positions"`
		Deltas        []int64      `json:"deltas"`
	} `json:"rope"`
}

func loadGolden(t *testing.T) golden {
	t.Helper()
	data, err := os.ReadFile("testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

func loadTestImage(t *testing.T, name string) *RGB {
	t.Helper()
	img, err := LoadImage(filepath.Join("testdata", "images", name+".png"))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func gridsOf(gs [][3]int) []Grid {
	out := make([]Grid, len(gs))
	for i, g := range gs {
		out[i] = Grid{g[0], g[1], g[2]}
	}
	return out
}

// TestGoldenPreprocess runs every golden case: the resized bytes must equal Pillow's (SHA-256,
// and pixel by pixel where the PNG is kept), grids and shape must be equal, pixel_values within
// 1e-6 of the twin's (all values where stored, else the sampled ones and the statistics).
func TestGoldenPreprocess(t *testing.T) {
	g := loadGolden(t)
	if len(g.Cases) == 0 {
		t.Fatal("no golden cases")
	}
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			cfg, err := ParseProcessorConfig(c.Config)
			if err != nil {
				t.Fatal(err)
			}
			proc, err := NewProcessor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var items [][]*RGB
			for _, frames := range c.Images {
				var imgs []*RGB
				for _, f := range frames {
					imgs = append(imgs, loadTestImage(t, f))
				}
				items = append(items, imgs)
			}
			var got Patches
			if c.Video {
				got, err = proc.Video(items)
			} else {
				var imgs []*RGB
				for _, it := range items {
					imgs = append(imgs, it[0])
				}
				got, err = proc.Images(imgs)
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range got.Resized {
				if [2]int{r.Width, r.Height} != c.ResizedSize[i] {
					t.Fatalf("input %d resized to %dx%d, Pillow %v", i, r.Width, r.Height, c.ResizedSize[i])
				}
				sum := sha256.Sum256(r.Pix)
				if hex.EncodeToString(sum[:]) != c.ResizedSHA256[i] {
					t.Errorf("input %d: resized bytes differ from Pillow's (SHA-256)", i)
				}
				if i < len(c.ResizedPNG) {
					want, err := LoadImage(filepath.Join("testdata", c.ResizedPNG[i]))
					if err != nil {
						t.Fatal(err)
					}
					diff, at := 0, -1
					for j := range want.Pix {
						if d := int(want.Pix[j]) - int(r.Pix[j]); d != 0 {
							diff = max(diff, abs(d))
							at = j
						}
					}
					if diff != 0 {
						t.Errorf("input %d: resized image differs from Pillow's by up to %d levels (last at byte %d)", i, diff, at)
					}
				}
			}
			if gotGrids := grids3(got.Grids); !slices.Equal(gotGrids, c.Grids) {
				t.Fatalf("grids %v, want %v", gotGrids, c.Grids)
			}
			if [2]int{got.Rows, got.Cols} != c.Shape {
				t.Fatalf("shape %dx%d, want %v", got.Rows, got.Cols, c.Shape)
			}
			const tol = 1e-6
			if c.PixelValues != "" {
				want := readF32(t, filepath.Join("testdata", c.PixelValues))
				if len(want) != len(got.Values) {
					t.Fatalf("%d values, golden has %d", len(got.Values), len(want))
				}
				worst := 0.0
				for i := range want {
					worst = max(worst, math.Abs(float64(want[i]-got.Values[i])))
				}
				if worst > tol {
					t.Errorf("pixel_values differ by up to %g (tolerance %g)", worst, tol)
				}
			}
			for _, s := range c.Samples {
				if v := got.Values[int(s[0])]; math.Abs(float64(v)-s[1]) > tol {
					t.Errorf("pixel_values[%d] = %v, want %v", int(s[0]), v, s[1])
				}
			}
			st := StatsOf(got.Values)
			for _, p := range [][3]float64{{st.Mean, c.Stats.Mean, 1e-9}, {st.Std, c.Stats.Std, 1e-9}, {st.Min, c.Stats.Min, 0}, {st.Max, c.Stats.Max, 0}, {st.Sum, c.Stats.Sum, 1e-9 * float64(len(got.Values))}} {
				if math.Abs(p[0]-p[1]) > p[2]*max(1, math.Abs(p[1])) {
					t.Errorf("stats %+v, want %+v", st, c.Stats)
					break
				}
			}
		})
	}
}

func TestGoldenPreprocessErrors(t *testing.T) {
	g := loadGolden(t)
	for _, c := range g.Errors {
		cfg, err := ParseProcessorConfig(c.Config)
		if err != nil {
			t.Fatal(err)
		}
		proc, err := NewProcessor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := proc.Images([]*RGB{loadTestImage(t, c.Images[0][0])}); err == nil {
			t.Errorf("%s: no error; Hugging Face raises one", c.Name)
		}
	}
}

func TestGoldenSmartResize(t *testing.T) {
	g := loadGolden(t)
	if len(g.SmartResize) == 0 {
		t.Fatal("no smart_resize goldens")
	}
	for _, r := range g.SmartResize {
		h, w, err := SmartResize(r[0], r[1], 28, r[2], r[3])
		if r[4] < 0 {
			if err == nil {
				t.Errorf("SmartResize(%d, %d, %d, %d) = %d, %d; Hugging Face raises", r[0], r[1], r[2], r[3], h, w)
			}
			continue
		}
		if err != nil || h != r[4] || w != r[5] {
			t.Errorf("SmartResize(%d, %d, %d, %d) = %d, %d, %v; want %d, %d", r[0], r[1], r[2], r[3], h, w, err, r[4], r[5])
		}
	}
}

func TestGoldenRope(t *testing.T) {
	g := loadGolden(t)
	if len(g.Rope) == 0 {
		t.Fatal("no get_rope_index goldens (the twin ran without torch)")
	}
	for _, c := range g.Rope {
		t.Run(c.Name, func(t *testing.T) {
			tok := Qwen2VLTokens()
			tok.TokensPerSecond = c.TokensPerSec
			images, videos := gridsOf(c.Images), gridsOf(c.Videos)
			texts, err := ExpandText(c.Texts, images, videos, tok.MergeSize)
			if err != nil {
				t.Fatal(err)
			}
			for i := range texts {
				if texts[i] != c.ExpandedTexts[i] {
					t.Fatalf("ExpandText row %d = %q, want %q", i, texts[i], c.ExpandedTexts[i])
				}
			}
			ids, err := ExpandTokens(c.RawIDs, images, videos, tok)
			if err != nil {
				t.Fatal(err)
			}
			for r := range ids {
				unpadded := c.InputIDs[r][len(c.InputIDs[r])-len(ids[r]):]
				if !slices.Equal(ids[r], unpadded) {
					t.Fatalf("ExpandTokens row %d = %v, want %v", r, ids[r], unpadded)
				}
			}
			got, err := RopeIndex(RopeInputs{InputIDs: c.InputIDs, Mask: c.Mask, ImageGrids: images, VideoGrids: videos, SecondPerGrid: c.SecondPerGrid}, tok)
			if err != nil {
				t.Fatal(err)
			}
			for a := range 3 {
				for r := range c.InputIDs {
					if !slices.Equal(got.Positions[a][r], c.Positions[a][r]) {
						t.Errorf("axis %d row %d: %v\nwant %v", a, r, got.Positions[a][r], c.Positions[a][r])
					}
				}
			}
			if !slices.Equal(got.Deltas, c.Deltas) {
				t.Errorf("deltas %v, want %v", got.Deltas, c.Deltas)
			}
		})
	}
}

func readF32(t *testing.T, path string) []float32 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return out
}

func grids3(gs []Grid) [][3]int {
	out := make([][3]int, len(gs))
	for i, g := range gs {
		out[i] = [3]int{g.T, g.H, g.W}
	}
	return out
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
