package qwenvl_test

import (
	"fmt"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/qwenvl"
)

func ExampleSmartResize() {
	// 1280×720 at the default bounds: each side rounds to a multiple of 28 (720/28 = 25.7 → 26).
	h, w, _ := qwenvl.SmartResize(720, 1280, 28, 56*56, 28*28*1280)
	fmt.Println(h, w)
	// 42/28 = 1.5 and 70/28 = 2.5 both round to 2, as Python's round does.
	h, w, _ = qwenvl.SmartResize(42, 70, 28, 56*56, 28*28*1280)
	fmt.Println(h, w)
	// Output:
	// 728 1288
	// 56 56
}

func ExampleProcessor_Images() {
	proc, _ := qwenvl.NewProcessor(qwenvl.DefaultProcessorConfig())
	img := qwenvl.NewRGB(100, 60) // black
	p, _ := proc.Images([]*qwenvl.RGB{img})
	fmt.Println("image_grid_thw", p.Grids[0], "pixel_values", p.Rows, "x", p.Cols)
	fmt.Println("LLM tokens", p.Grids[0].Tokens(2))
	fmt.Printf("black, normalised: %.4f\n", p.Values[0])
	// Output:
	// image_grid_thw {1 4 8} pixel_values 32 x 1176
	// LLM tokens 8
	// black, normalised: -1.7923
}

func ExampleRopeIndex() {
	tok := qwenvl.Qwen2VLTokens()
	grid := qwenvl.Grid{T: 1, H: 4, W: 4} // 2×2 merged tokens
	rows, _ := qwenvl.ExpandTokens([][]int64{{7, tok.VisionStartID, tok.ImageID, 151653, 8}}, []qwenvl.Grid{grid}, nil, tok)
	fmt.Println(rows[0])
	rope, _ := qwenvl.RopeIndex(qwenvl.RopeInputs{InputIDs: rows, ImageGrids: []qwenvl.Grid{grid}}, tok)
	for a, name := range []string{"t", "h", "w"} {
		fmt.Println(name, rope.Positions[a][0])
	}
	fmt.Println("delta", rope.Deltas[0])
	// Output:
	// [7 151652 151655 151655 151655 151655 151653 8]
	// t [0 1 2 2 2 2 4 5]
	// h [0 1 2 2 3 3 4 5]
	// w [0 1 2 3 2 3 4 5]
	// delta -2
}

// ExampleModel_Generate builds a tiny random Qwen2.5-VL, preprocesses one image, expands its
// placeholder by the image's grid and runs the whole model.
func ExampleModel_Generate() {
	cfg, _ := qwenvl.LoadConfigFile("testdata/models/qwen2.5-vl.json")
	m, _ := qwenvl.Load(qwenvl.RandomCheckpoint(cfg, 1))
	proc, _ := qwenvl.NewProcessor(qwenvl.DefaultProcessorConfig())
	img := qwenvl.NewRGB(90, 60) // resized to 84×56: a 4×6 patch grid, 6 tokens
	patches, _ := proc.Images([]*qwenvl.RGB{img})
	tok := cfg.Tokens
	prompt := [][]int64{{1, tok.VisionStartID, tok.ImageID, cfg.VisionEndID, 5}}
	ids, _ := qwenvl.ExpandTokens(prompt, patches.Grids, nil, tok)
	s := qwenvl.Sample{Images: patches}
	for _, id := range ids[0] {
		s.IDs = append(s.IDs, int32(id))
	}
	logits, _ := m.Logits(s)
	fmt.Println("grid", patches.Grids[0], "tokens", len(s.IDs), "logits", logits.Shape())
	out, _ := m.Generate([]qwenvl.Sample{s}, hflm.Sampling{MaxNewTokens: 3, TopP: 1}, nil)
	fmt.Println("new tokens", len(out[0]))
	// Output:
	// grid {1 4 6} tokens 10 logits [10 128]
	// new tokens 3
}
