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

// reference is the sampler written plainly in float64: the vocabulary fully sorted (highest
// logit first, the lower id on ties), the sum in id order, the TopP cut and the draw sequential
// walks in that order.
type reference struct {
	order  []int32   // the candidates in order
	p      []float64 // p[i]: the unnormalised probability of order[i]
	prefix []float64 // prefix[i]: p[0] + … + p[i], summed in order
	sum    float64
}

func newReference(logits []float32, order []int32, s Sampling) *reference {
	if s.TopK > 0 && s.TopK < len(order) {
		order = order[:s.TopK]
	}
	r := &reference{order: order}
	top := float64(logits[order[0]]) / s.Temperature
	acc := 0.0
	in := make([]bool, len(logits))
	for _, id := range order {
		p := math.Exp(float64(logits[id])/s.Temperature - top)
		acc += p
		r.p, r.prefix = append(r.p, p), append(r.prefix, acc)
		in[id] = true
	}
	for id, z := range logits {
		if in[id] {
			r.sum += math.Exp(float64(z)/s.Temperature - top)
		}
	}
	return r
}

// sorted returns the token ids in order: highest logit first, the lower id on ties.
func sorted(logits []float32) []int32 {
	order := make([]int32, len(logits))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(logits[b], logits[a]) })
	return order
}

// cut returns how many candidates TopP keeps and their mass.
func (r *reference) cut(topP float64) (int, float64) {
	if topP >= 1 {
		return len(r.p), r.sum
	}
	acc := 0.0
	for i, p := range r.p {
		if acc += p; acc >= topP*r.sum {
			return i + 1, acc
		}
	}
	return len(r.p), acc
}

// draw returns the position in order of the kept token that u picks.
func (r *reference) draw(kept int, u float64) int {
	for i, p := range r.p[:kept] {
		if u -= p; u < 0 {
			return i
		}
	}
	return kept - 1
}

// atBoundary says whether x lies within tol of every boundary between order positions a and
// b: the cases where summing the same masses in another order may pick b instead of a.
func (r *reference) atBoundary(a, b int, x, tol float64) bool {
	for i := min(a, b); i < max(a, b); i++ {
		if math.Abs(r.prefix[i]-x) > tol {
			return false
		}
	}
	return true
}

// TestSamplerMatchesSort draws from normal, peaked, flat, tied, equal and ±0 logits, at 1000 tokens
// and at Qwen2.5's 151936, with every kind of cut, and checks each draw against the reference
// given the same uniform: the kept count and the token must agree unless TopP·sum (for the
// cut) or u (for the token) lies within rounding of a boundary between the two answers, the
// error bound of summing the kept masses twice (2·n·2⁻⁵³ of the sum each). It counts those
// cases (none are expected: boundaries are ~1/V of the mass apart, rounding ~n·2⁻⁵³). Equal
// logits have masses of 1, summed exactly in any order: there every draw must agree.
func TestSamplerMatchesSort(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	shapes := []struct {
		name string
		gen  func(i int) float32
	}{
		{"normal", func(int) float32 { return float32(r.NormFloat64() * 3) }},
		{"peaked", func(i int) float32 {
			if i%997 == 3 {
				return 12 + float32(r.NormFloat64())
			}
			return float32(r.NormFloat64())
		}},
		{"flat", func(int) float32 { return float32(r.NormFloat64() * 1e-3) }},
		{"ties", func(int) float32 { return float32(r.IntN(5)) }},
		{"equal", func(int) float32 { return 0.5 }},
		{"zeros", func(int) float32 { return []float32{0, float32(math.Copysign(0, -1)), 1, -1}[r.IntN(4)] }}, // -0 ties +0
	}
	type config struct {
		temps []float64
		ks    []int
		ps    []float64
		draws int
	}
	configs := map[int]config{
		1000:   {[]float64{0.3, 1, 1.7}, []int{0, 1, 2, 40, 63, 64, 65, 1000, 999, 1000, 1003}, []float64{1, 0.999, 0.9, 0.5, 0.01}, 10},
		151936: {[]float64{1, 0.7}, []int{-1, 50, 100000}, []float64{1, 0.95, 0.5}, 16},
	}
	sp := &sampler{}
	draws, cutEdges, drawEdges := 0, 0, 0
	for v, cf := range configs {
		for _, sh := range shapes {
			logits := make([]float32, v)
			for i := range logits {
				logits[i] = sh.gen(i)
			}
			order := sorted(logits)
			for _, temp := range cf.temps {
				for _, k := range cf.ks {
					for _, p := range cf.ps {
						s := Sampling{Temperature: temp, TopK: k, TopP: p}
						ref := newReference(logits, order, s)
						tol := math.Ldexp(float64(len(ref.p))*ref.sum, -51)
						wantKept, wantAcc := ref.cut(p)
						kept, acc := sp.prepare(logits, s)
						draws += cf.draws
						if kept != wantKept {
							require.True(t, sh.name != "equal" && ref.atBoundary(kept-1, wantKept-1, p*ref.sum, tol),
								"%s V=%d %+v: keeps %d, the reference %d", sh.name, v, s, kept, wantKept)
							cutEdges += cf.draws
							continue
						}
						in := make([]bool, v)
						for _, id := range ref.order[:kept] {
							in[id] = true
						}
						for _, c := range sp.c[:kept] { // kept distinct ids, each the reference's
							require.True(t, in[c.id()], "%s V=%d %+v: token %d kept", sh.name, v, s, c.id())
						}
						u01 := rand.New(rand.NewPCG(uint64(draws), 1))
						for range cf.draws { // each draw leaves the kept set permuted for the next
							x := u01.Float64()
							got, want := sp.draw(kept, x*acc), ref.draw(kept, x*wantAcc)
							if got != ref.order[want] {
								at := slices.Index(ref.order, got)
								require.True(t, sh.name != "equal" && at >= 0 && ref.atBoundary(at, want, x*wantAcc, tol),
									"%s V=%d %+v u=%v: token %d, the reference %d", sh.name, v, s, x, got, ref.order[want])
								drawEdges++
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d draws agree but for %d at a TopP boundary and %d at a token boundary", draws, cutEdges, drawEdges)
}

// TestSamplerExactBoundaries: with equal logits every mass is 1 and every sum exact, so the
// boundaries are hit exactly. A draw u = k leaves u − k = 0, not below 0: token k (ids are in
// order); TopP = k/V reaches the target with k tokens and keeps k.
func TestSamplerExactBoundaries(t *testing.T) {
	const v = 1000
	logits := make([]float32, v)
	sp := &sampler{}
	for _, k := range []int{0, 1, 63, 64, 500, 999} {
		kept, acc := sp.prepare(logits, Sampling{Temperature: 1, TopP: 1})
		require.Equal(t, v, kept)
		require.Equal(t, float64(v), acc)
		require.Equal(t, int32(k), sp.draw(kept, float64(k)), "u = %d", k)
		if k > 0 {
			kept, acc = sp.prepare(logits, Sampling{Temperature: 1, TopP: float64(k) / v})
			require.Equal(t, k, kept, "TopP %d/%d", k, v)
			require.Equal(t, float64(k), acc)
		}
	}
}

// chiSquareBound is the chi-square statistic of df degrees of freedom exceeded with
// probability about 1e-6 (Wilson and Hilferty's approximation, z = 4.75).
func chiSquareBound(df int) float64 {
	d := float64(df)
	c := 2 / (9 * d)
	return d * math.Pow(1-c+4.75*math.Sqrt(c), 3)
}

// TestSamplerFrequencies draws many tokens and compares their frequencies with the
// probabilities of the reference (softmax, cut as documented) by a chi-square test: over the
// tokens of a small vocabulary, and over 10 equal-count blocks (in order) of a flat
// distribution over Qwen2.5's vocabulary. No token outside the kept set may be drawn.
func TestSamplerFrequencies(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	small := make([]float32, 200)
	for i := range small {
		small[i] = float32(r.NormFloat64() * 1.5)
	}
	small[7], small[9] = small[3], small[3] // tied logits
	flat := make([]float32, 151936)
	for i := range flat {
		flat[i] = float32(r.NormFloat64() * 0.05) // random weights: entropy near log V
	}
	cases := []struct {
		logits []float32
		s      Sampling
		draws  int
		blocks int // 0: a bin per token
	}{
		{small, Sampling{Temperature: 1, TopP: 1}, 40000, 0},
		{small, Sampling{Temperature: 0.7, TopP: 0.9}, 40000, 0},
		{small, Sampling{Temperature: 1.3, TopP: 0.8, TopK: 20}, 40000, 0},
		{small, Sampling{Temperature: 1, TopP: 1, TopK: 10}, 40000, 0},
		{flat, Sampling{Temperature: 1, TopP: 1, TopK: -1}, 2000, 20},
	}
	sp := &sampler{}
	for ci, c := range cases {
		ref := newReference(c.logits, sorted(c.logits), c.s)
		kept, acc := ref.cut(c.s.TopP)
		bin := make(map[int32]int, kept) // token -> bin
		var want []float64               // expected count per bin
		for i, id := range ref.order[:kept] {
			b := i
			if c.blocks > 0 {
				b = i * c.blocks / kept
			}
			bin[id] = b
			if b == len(want) {
				want = append(want, 0)
			}
			want[b] += ref.p[i] / acc * float64(c.draws)
		}
		got := make([]float64, len(want))
		rng := rand.New(rand.NewPCG(uint64(ci), 9))
		draw := func() int32 { return sp.sample(c.logits, c.s, rng) }
		if c.blocks > 0 { // prepared once (the large vocabulary's exps), drawn as sample draws
			kept, acc := sp.prepare(c.logits, c.s)
			draw = func() int32 { return sp.draw(kept, rng.Float64()*acc) }
		}
		for range c.draws {
			b, ok := bin[draw()]
			require.True(t, ok, "case %d: a token outside the kept set", ci)
			got[b]++
		}
		// bins expected fewer than 5 times are merged into one
		chi, df, restGot, restWant := 0.0, -1, 0.0, 0.0
		for b := range want {
			if want[b] < 5 {
				restGot, restWant = restGot+got[b], restWant+want[b]
				continue
			}
			chi += (got[b] - want[b]) * (got[b] - want[b]) / want[b]
			df++
		}
		if restWant > 0 {
			chi += (restGot - restWant) * (restGot - restWant) / restWant
			df++
		}
		t.Logf("case %d %+v: chi-square %.1f over %d degrees of freedom (bound %.1f)", ci, c.s, chi, df, chiSquareBound(df))
		require.Less(t, chi, chiSquareBound(df), "case %d %+v", ci, c.s)
	}
}

// TestSampleRowsSerial: the worker pool draws each row's token with that row's random source,
// exactly the tokens of a serial loop, whatever the number of workers.
func TestSampleRowsSerial(t *testing.T) {
	const b, v = 13, 5000
	r := rand.New(rand.NewPCG(2, 2))
	logits := make([]float32, b*v)
	for i := range logits {
		logits[i] = float32(r.NormFloat64())
	}
	rows := []int{0, 2, 3, 5, 6, 7, 8, 9, 11, 12}
	s := Sampling{Temperature: 0.9, TopP: 0.95, TopK: 400}
	rngs := func() []*rand.Rand {
		out := make([]*rand.Rand, b)
		for i := range out {
			out[i] = rand.New(rand.NewPCG(uint64(i), 3))
		}
		return out
	}
	want := make([]int32, len(rows))
	serial, sp := rngs(), &sampler{}
	for step := range 3 {
		for j, i := range rows {
			want[j] = sp.sample(logits[i*v:(i+1)*v], s, serial[i])
		}
		for _, w := range []int{1, 2, 4, 16} {
			got, par := make([]int32, len(rows)), rngs()
			for range step + 1 {
				newSamplers(w).sampleRows(got, logits, v, rows, s, par)
			}
			require.Equal(t, want, got, "step %d, %d workers", step, w)
		}
	}
}

// TestSamplerTime checks the point of the selection at Qwen2.5's vocabulary, with EasyR1's
// defaults (temperature 1, no cut): a draw from flat logits (random weights, or a draw in a
// trained model's tail) costs far less than a full sort and a walk.
func TestSamplerTime(t *testing.T) {
	if testing.Short() {
		t.Skip("timing")
	}
	r := rand.New(rand.NewPCG(3, 3))
	logits := make([]float32, 151936)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 0.05)
	}
	s := Sampling{Temperature: 1, TopP: 1, TopK: -1}
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
	full := timeOf(func() {
		ref := newReference(logits, sorted(logits), s)
		ref.draw(len(ref.p), r.Float64()*ref.sum)
	})
	t.Logf("per draw: selection %v, full sort %v", sel, full)
	require.Less(t, sel, full/2)
}

// BenchmarkSample draws one token from Qwen2.5's vocabulary with EasyR1's defaults
// (temperature 1, no cut), from flat logits (random weights) and from peaked ones.
func BenchmarkSample(b *testing.B) {
	r := rand.New(rand.NewPCG(4, 4))
	for _, c := range []struct {
		name  string
		scale float64
	}{{"flat", 0.05}, {"peaked", 4}} {
		logits := make([]float32, 151936)
		for i := range logits {
			logits[i] = float32(r.NormFloat64() * c.scale)
		}
		s := Sampling{Temperature: 1, TopP: 1, TopK: -1}
		b.Run(c.name, func(b *testing.B) {
			sp := &sampler{}
			for b.Loop() {
				sp.sample(logits, s, r)
			}
		})
	}
}
