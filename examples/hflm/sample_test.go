package hflm

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sortSample is the sampler written with a full sort of the vocabulary: the reference the
// partial selection must match token for token given the same draws.
func sortSample(logits []float32, s Sampling, rng *rand.Rand) int32 {
	v := len(logits)
	order := make([]int32, v)
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(logits[b], logits[a]) })
	n := v
	if s.TopK > 0 && s.TopK < v {
		n = s.TopK
	}
	top := float64(logits[order[0]]) / s.Temperature
	p := func(id int32) float64 { return math.Exp(float64(logits[id])/s.Temperature - top) }
	byID := slices.Clone(order[:n])
	slices.Sort(byID)
	sum := 0.0
	for _, id := range byID {
		sum += p(id)
	}
	kept, acc := n, sum
	if s.TopP < 1 {
		kept, acc = 0, 0
		for kept < n {
			acc += p(order[kept])
			kept++
			if acc >= s.TopP*sum {
				break
			}
		}
	}
	u := rng.Float64() * acc
	for _, id := range order[:kept] {
		u -= p(id)
		if u < 0 {
			return id
		}
	}
	return order[kept-1]
}

// TestSamplerMatchesSort draws from peaked, flat and tied logits with every kind of cut and
// checks that the partial selection returns the full sort's token for every draw.
func TestSamplerMatchesSort(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	const v = 1000
	shapes := map[string]func(i int) float32{
		"normal": func(int) float32 { return float32(r.NormFloat64() * 3) },
		"peaked": func(i int) float32 {
			if i%997 == 3 {
				return 12 + float32(r.NormFloat64())
			}
			return float32(r.NormFloat64())
		},
		"flat":  func(int) float32 { return float32(r.NormFloat64() * 1e-3) },
		"ties":  func(int) float32 { return float32(r.IntN(5)) },
		"equal": func(int) float32 { return 0.5 },
	}
	sp := &sampler{}
	draws := 0
	for name, gen := range shapes {
		logits := make([]float32, v)
		for i := range logits {
			logits[i] = gen(i)
		}
		for _, temp := range []float64{0.3, 1, 1.7} {
			for _, k := range []int{0, 1, 2, 40, 63, 64, 65, 1000, v - 1, v, v + 3} {
				for _, p := range []float64{1, 0.999, 0.9, 0.5, 0.01} {
					s := Sampling{Temperature: temp, TopK: k, TopP: p}
					seed := uint64(draws)
					a, b := rand.New(rand.NewPCG(seed, 1)), rand.New(rand.NewPCG(seed, 1))
					for range 3 {
						want := sortSample(logits, s, a)
						got := sp.sample(logits, s, b)
						require.Equal(t, want, got, "%s %+v", name, s)
						draws++
					}
				}
			}
		}
	}
	t.Logf("%d draws agree", draws)
}

// TestSamplerTime checks the point of the partial selection at Qwen2.5's vocabulary: a draw
// from peaked logits (a trained model's) costs far less than the full sort.
func TestSamplerTime(t *testing.T) {
	if testing.Short() {
		t.Skip("timing")
	}
	r := rand.New(rand.NewPCG(3, 3))
	logits := make([]float32, 151936)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 4)
	}
	s := Sampling{Temperature: 1, TopP: 0.95, TopK: 0}
	sp := &sampler{}
	timeOf := func(f func()) time.Duration {
		best := time.Duration(math.MaxInt64)
		for range 5 {
			t0 := time.Now()
			f()
			best = min(best, time.Since(t0))
		}
		return best
	}
	sel := timeOf(func() { sp.sample(logits, s, r) })
	full := timeOf(func() { sortSample(logits, s, r) })
	t.Logf("per draw: partial selection %v, full sort %v", sel, full)
	require.Less(t, sel, full/2)
}
