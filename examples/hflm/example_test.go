package hflm_test

import (
	"fmt"
	"os"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
)

// A tiny random Qwen2: its next-token logits, and the log-probability of a completion.
func Example() {
	data, err := os.ReadFile("testdata/qwen2-tied.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg, err := hfmodel.ParseConfig(data)
	if err != nil {
		fmt.Println(err)
		return
	}
	ck, err := hfmodel.RandomCheckpoint(cfg, 1) // or hfmodel.Open(dir), or hflm.LoadDir(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := hflm.Load(ck)
	if err != nil {
		fmt.Println(err)
		return
	}
	logits, err := m.Logits([]int32{1, 5, 9})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("parameters:", m.NumParams(), "logits:", logits.Shape())
	s, err := m.Score([][]int32{{1, 5}}, [][]int32{{9, 14}}, 1, false)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("log p(9, 14 | 1, 5) per token: %.2f\n", s.LogProbs[0])
	// Output:
	// parameters: 22816 logits: [3 128]
	// log p(9, 14 | 1, 5) per token: [-5.19 -4.95]
}
