package qwenvl_test

import (
	"fmt"

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
