package vlm

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/stretchr/testify/require"
)

// TestGenerateCacheMatchesForward checks that the logits seen while sampling with the KV cache
// equal those of a full Forward on prompt+response.
func TestGenerateCacheMatchesForward(t *testing.T) {
	c := tinyConfig()
	c.MaxLen = 12
	m, err := New(c, 11)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(5, 6))
	prompts := [][]int32{{BOS, 5, 6}, {BOS}, {BOS, 7, 8, 9, 4}}
	b := len(prompts)
	img := randImages(rng, c, b)
	seen := make([][][]float32, b)
	out, err := m.generate(img, prompts, 8, 1.5, 1, rand.New(rand.NewPCG(1, 1)), func(r int, lg []float32) {
		seen[r] = append(seen[r], append([]float32(nil), lg...))
	})
	require.NoError(t, err)
	px, _ := img.Uint8s()
	per := len(px) / b
	for r, p := range prompts {
		require.NotEmpty(t, out[r])
		require.Len(t, seen[r], len(out[r]))
		seq := append(append([]int32(nil), p...), out[r]...)
		if len(seq) > c.MaxLen {
			t.Fatalf("row %d: sequence length %d exceeds MaxLen", r, len(seq))
		}
		one := tensor.Must(tensor.FromUint8(px[r*per:(r+1)*per], 1, c.ImageSize, c.ImageSize, c.Channels))
		logits, _, err := m.Forward(one, tensor.Must(tensor.FromInt32(seq, 1, len(seq))))
		require.NoError(t, err)
		lg, _ := logits.Float32s()
		for k, s := range seen[r] {
			pos := len(p) - 1 + k
			full := lg[pos*c.Vocab : (pos+1)*c.Vocab]
			for v := range s {
				require.InDelta(t, full[v], s[v], 1e-4*(1+math.Abs(float64(full[v]))), "row %d step %d token %d", r, k, v)
			}
		}
		for k, id := range out[r] {
			if id == EOS {
				require.Equal(t, len(out[r])-1, k, "EOS must end the response")
			}
		}
	}
}

func TestGenerateDeterministic(t *testing.T) {
	c := tinyConfig()
	c.MaxLen = 12
	m, err := New(c, 2)
	require.NoError(t, err)
	img := randImages(rand.New(rand.NewPCG(9, 9)), c, 4)
	prompts := [][]int32{{BOS, 4}, {BOS, 5}, {BOS, 6, 7}, {BOS}}
	a, err := m.Generate(img, prompts, 6, 1, 0.9, rand.New(rand.NewPCG(3, 3)))
	require.NoError(t, err)
	b, err := m.Generate(img, prompts, 6, 1, 0.9, rand.New(rand.NewPCG(3, 3)))
	require.NoError(t, err)
	require.Equal(t, a, b)
	for r := range a {
		require.LessOrEqual(t, len(a[r]), 6)
	}
}
