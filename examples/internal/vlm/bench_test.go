package vlm

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// BenchmarkForwardBackward is one trainer micro-step at the default size: 96 sequences
// (16 prompts × 6 responses) of 40 text tokens + 16 patches.
func BenchmarkForwardBackward(b *testing.B) {
	c := DefaultConfig(100)
	const rows, l = 96, 40
	m, err := New(c, 1)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	img, tok := randImages(rng, c, rows), randTokens(rng, c, rows, l)
	dl := make([]float32, rows*l*c.Vocab)
	for i := range dl {
		dl[i] = float32(rng.NormFloat64()) * 1e-3
	}
	dlogits := tensor.Must(tensor.FromFloat32(dl, rows, l, c.Vocab))
	b.Run(fmt.Sprintf("cpu/shape=%dx%d", rows, l), func(b *testing.B) {
		for b.Loop() {
			_, act, err := m.Forward(img, tok)
			if err != nil {
				b.Fatal(err)
			}
			if err := m.Backward(act, dlogits); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(rows*l*b.N)/b.Elapsed().Seconds(), "tokens/s")
	})
}

// BenchmarkGenerate samples 64 responses of 20 tokens (EOS never stops them early: the model
// is untrained and sampling runs to maxNew unless EOS is drawn) after 20-token prompts.
func BenchmarkGenerate(b *testing.B) {
	c := DefaultConfig(100)
	const rows, plen, maxNew = 64, 20, 20
	m, err := New(c, 1)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	img := randImages(rng, c, rows)
	prompts := make([][]int32, rows)
	for r := range prompts {
		prompts[r] = []int32{BOS}
		for range plen - 1 {
			prompts[r] = append(prompts[r], int32(3+rng.IntN(c.Vocab-3)))
		}
	}
	b.Run(fmt.Sprintf("cpu/rows=%d", rows), func(b *testing.B) {
		toks := 0
		for b.Loop() {
			out, err := m.Generate(img, prompts, maxNew, 1, 1, rand.New(rand.NewPCG(7, 7)))
			if err != nil {
				b.Fatal(err)
			}
			for _, o := range out {
				toks += len(o)
			}
		}
		b.ReportMetric(float64(toks)/b.Elapsed().Seconds(), "tokens/s")
	})
}
