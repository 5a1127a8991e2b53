package hflm

import (
	"cmp"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
)

// sampler draws tokens from logits, reusing its buffer across calls. It never sorts the
// vocabulary (a sort of 151936 ids costs ~20 ms, and a flat distribution — random weights, or a
// draw in a real model's tail — walks most of it): the token where the running mass crosses the
// draw is found by a mass-weighted selection in expected O(V). Candidates are ordered highest
// logit first, the lower id on ties; a partition around a pivot in that order sums the mass of
// the side before it, the crossing is in that side or the other (or is the pivot), and only the
// last small block is sorted and walked (or the whole block left after 2·log₂V rounds: the
// worst case, O(V log V)). The TopP cut is found the same way.
type sampler struct {
	c []cand
}

// cand is a candidate token: key orders it (see candKey) and p is its unnormalised
// probability.
type cand struct {
	key uint64
	p   float64
}

// candKey is a key whose unsigned order is the candidates' order: the logit's bits made
// monotone and inverted in the high word (higher logits first, -0 as +0 so that they tie),
// the id in the low word (the lower id first on ties).
func candKey(z float32, id int) uint64 {
	if z == 0 {
		z = 0
	}
	b := math.Float32bits(z)
	if b>>31 != 0 {
		b = ^b
	} else {
		b |= 1 << 31
	}
	return uint64(^b)<<32 | uint64(uint32(id))
}

func (c cand) id() int32 { return int32(uint32(c.key)) }

// sample returns the next token for one row's logits: greedy at temperature 0, else drawn from
// softmax(logits / Temperature) cut to the TopK most likely tokens, then to the smallest prefix
// (in order) whose probability reaches TopP (at least one token; TopP >= 1 keeps all).
// The normalising sum runs over the candidates in id order, so it does not depend on how they
// are ordered; the draw u = rng·(kept mass) picks the first kept token, in order, at which the
// running mass passes u. Masses of the selection's blocks are summed in the order the
// partitions leave them, so a token differs from a full sort's sequential walk only when u (or
// TopP times the sum) lies within rounding of the boundary between two tokens.
func (sp *sampler) sample(logits []float32, s Sampling, rng *rand.Rand) int32 {
	if s.Temperature == 0 {
		best := 0
		for i, z := range logits {
			if z > logits[best] {
				best = i
			}
		}
		return int32(best)
	}
	kept, acc := sp.prepare(logits, s)
	return sp.draw(kept, rng.Float64()*acc)
}

// prepare computes the candidates' probabilities and the cuts: sp.c[:kept] are the kept
// tokens (in no particular order) and acc is their mass.
func (sp *sampler) prepare(logits []float32, s Sampling) (kept int, acc float64) {
	v := len(logits)
	n := v
	if s.TopK > 0 && s.TopK < v {
		n = s.TopK
	}
	top := float32(math.Inf(-1)) // the top logit is a candidate whatever TopK
	for _, z := range logits {
		if z > top { // not the builtin max, whose NaN and ±0 handling costs more than the rest
			top = z
		}
	}
	t, top64 := s.Temperature, float64(top)/s.Temperature
	prob := func(z float32) float64 { return math.Exp(float64(z)/t - top64) }
	sp.c = slices.Grow(sp.c[:0], v)[:v]
	c := sp.c
	sum := 0.0
	if n == v {
		for i, z := range logits {
			p := prob(z)
			c[i] = cand{candKey(z, i), p}
			sum += p
		}
	} else {
		for i, z := range logits {
			c[i] = cand{key: candKey(z, i)}
		}
		selectFirst(c, n)
		last := c[0].key // the n-th candidate in order
		for _, e := range c[1:n] {
			last = max(last, e.key)
		}
		for i, z := range logits {
			if candKey(z, i) <= last {
				sum += prob(z)
			}
		}
		for i := range c[:n] {
			c[i].p = prob(logits[c[i].id()])
		}
	}
	if s.TopP >= 1 {
		return n, sum
	}
	i, through := cross(c[:n], s.TopP*sum, true)
	return i + 1, through
}

// draw returns the kept token at which the running mass, in order, passes u.
func (sp *sampler) draw(kept int, u float64) int32 {
	i, _ := cross(sp.c[:kept], u, false)
	return sp.c[i].id()
}

// cross finds the first candidate i in order whose running mass (its own included) passes r:
// exceeds it, or reaches it when reach is set. It rearranges c so that c[:i] are the
// candidates before it (in no particular order) and returns i with the mass of c[:i+1]. When
// rounding leaves r unreached it returns the last candidate in order of the block it reached
// (the last of c when the partitions always went on).
func cross(c []cand, r float64, reach bool) (int, float64) {
	passes := func(m, r float64) bool { return m > r || (reach && m == r) }
	lo, hi := 0, len(c)
	below := 0.0 // the mass of c[:lo]
	for depth := 2 * bits.Len(uint(hi)); hi-lo > 32 && depth > 0; depth-- {
		p, m := partition(c[lo:hi])
		p += lo
		if p > lo && passes(m, r) {
			hi = p
			continue
		}
		r, below = r-m, below+m
		if passes(c[p].p, r) {
			return p, below + c[p].p
		}
		r, below = r-c[p].p, below+c[p].p
		lo = p + 1
	}
	sortCands(c[lo:hi])
	for i := lo; i < hi; i++ {
		if passes(c[i].p, r) {
			return i, below + c[i].p
		}
		r, below = r-c[i].p, below+c[i].p
	}
	return hi - 1, below
}

// selectFirst rearranges c so that c[:k] are its k first candidates in order (in no
// particular order): quickselect, a sort past 2·log₂ rounds (the worst case).
func selectFirst(c []cand, k int) {
	lo, hi := 0, len(c)
	for depth := 2 * bits.Len(uint(hi)); hi-lo > 32; depth-- {
		if depth == 0 {
			sortCands(c[lo:hi])
			return
		}
		p, _ := partition(c[lo:hi])
		p += lo
		switch {
		case k == p || k == p+1:
			return
		case k < p:
			hi = p
		default:
			lo = p + 1
		}
	}
	sortCands(c[lo:hi])
}

// partition moves the candidates before a pivot (the median of the first, middle and last) to
// the front of c, the pivot after them, and returns the pivot's index and the mass before it.
// The loop has no data-dependent branch (Lomuto's scheme with a swap every step), so a flat
// distribution's coin-flip comparisons cost no mispredictions; adding +0 for the candidates
// left behind keeps the sum the one over the front's candidates alone.
func partition(c []cand) (int, float64) {
	n := len(c)
	mid := n / 2
	if c[mid].key < c[0].key {
		c[mid], c[0] = c[0], c[mid]
	}
	if c[n-1].key < c[0].key {
		c[n-1], c[0] = c[0], c[n-1]
	}
	if c[mid].key < c[n-1].key {
		c[mid], c[n-1] = c[n-1], c[mid]
	}
	pivot := c[n-1].key
	p, m := 0, 0.0
	for j := range n - 1 {
		e := c[j]
		c[j] = c[p]
		c[p] = e
		var b int
		if e.key < pivot {
			b = 1
		}
		m += math.Float64frombits(math.Float64bits(e.p) & -uint64(b))
		p += b
	}
	c[p], c[n-1] = c[n-1], c[p]
	return p, m
}

func sortCands(c []cand) {
	slices.SortFunc(c, func(a, b cand) int { return cmp.Compare(a.key, b.key) })
}

// samplers draws the tokens of many rows at once, each worker with its own scratch. A row's
// token depends only on its logits and its own random source, so the tokens are the ones a
// serial loop over the rows draws.
type samplers struct {
	sp []sampler
}

// newSamplers makes scratch for up to workers rows at once.
func newSamplers(workers int) *samplers {
	return &samplers{sp: make([]sampler, max(1, workers))}
}

// sampleRows sets out[j] to the token of rows[j], whose logits are logits[r·v : (r+1)·v],
// drawn with rngs[r] (nil when greedy).
func (ss *samplers) sampleRows(out []int32, logits []float32, v int, rows []int, s Sampling, rngs []*rand.Rand) {
	one := func(sp *sampler, j int) {
		r := rows[j]
		var rng *rand.Rand
		if s.Temperature > 0 {
			rng = rngs[r]
		}
		out[j] = sp.sample(logits[r*v:(r+1)*v], s, rng)
	}
	w := min(len(ss.sp), len(rows))
	if w <= 1 {
		for j := range rows {
			one(&ss.sp[0], j)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for k := range w {
		wg.Go(func() {
			for j := int(next.Add(1) - 1); j < len(rows); j = int(next.Add(1) - 1) {
				one(&ss.sp[k], j)
			}
		})
	}
	wg.Wait()
}
