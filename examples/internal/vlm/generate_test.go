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
	out, err := m.generate(img, prompts, 8, 1.5, 1, 0, shared(rand.New(rand.NewPCG(1, 1))), func(r int, lg []float32) {
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

// TestSampleTopK: with top_k the draws stay among the k most likely tokens, in the frequencies
// of their renormalised probabilities; top_k off or >= vocab leaves the draw unchanged.
func TestSampleTopK(t *testing.T) {
	logits := []float32{0, 3, 1, 2.5, -1, 2}
	probs, order := make([]float64, 6), make([]int, 6)
	rng := rand.New(rand.NewPCG(1, 2))
	counts := map[int32]int{}
	const n = 20000
	for range n {
		counts[sample(logits, 1, 1, 2, rng, probs, order)]++
	}
	require.Len(t, counts, 2, "only tokens 1 and 3: %v", counts)
	p1 := 1 / (1 + math.Exp(2.5-3)) // renormalised over the top 2
	require.InDelta(t, p1, float64(counts[1])/n, 0.015)

	// top_k with top_p: the nucleus among the top 3 (probabilities ∝ e^3, e^2.5, e^2).
	counts = map[int32]int{}
	for range n {
		counts[sample(logits, 1, 0.5, 3, rng, probs, order)]++
	}
	require.Equal(t, map[int32]int{1: n}, counts, "e^3/(e^3+e^2.5+e^2) > 0.5: the nucleus is token 1 alone")

	// Off (0) and >= vocab draw exactly as without top_k.
	for _, k := range []int{0, 6, 10} {
		a, b := rand.New(rand.NewPCG(7, 7)), rand.New(rand.NewPCG(7, 7))
		for range 100 {
			require.Equal(t, sample(logits, 1, 1, 0, a, probs, order), sample(logits, 1, 1, k, b, probs, order))
		}
	}
}

// TestGenerateRowsIndependent: with a source per row, a row's response is the same whether it
// is sampled with the whole batch or alone with the rows after it (a data-parallel shard).
func TestGenerateRowsIndependent(t *testing.T) {
	c := tinyConfig()
	c.MaxLen = 12
	m, err := New(c, 3)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(7, 8))
	prompts := [][]int32{{BOS, 5}, {BOS, 6, 7}, {BOS}, {BOS, 4, 4}}
	img := randImages(rng, c, len(prompts))
	rngs := func(lo, hi int) []*rand.Rand {
		var out []*rand.Rand
		for r := lo; r < hi; r++ {
			out = append(out, rand.New(rand.NewPCG(1, uint64(r))))
		}
		return out
	}
	all, err := m.GenerateRows(img, prompts, 8, 1.5, 1, 0, rngs(0, 4))
	require.NoError(t, err)
	part, err := m.GenerateRows(tensor.Must(img.Rows(2, 4)), prompts[2:], 8, 1.5, 1, 0, rngs(2, 4))
	require.NoError(t, err)
	require.Equal(t, all[2:], part)
	_, err = m.GenerateRows(img, prompts, 8, 1.5, 1, 0, rngs(0, 3))
	require.ErrorIs(t, err, tensor.ErrShape)
}
