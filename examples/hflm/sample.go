package hflm

import (
	"cmp"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
)

// sampler draws tokens from logits, reusing its buffers across calls. It never sorts the whole
// vocabulary (a sort of 151936 ids costs ~20 ms per draw): the candidates come out in order —
// highest logit first, the lower id on ties — a block at a time by partial selection
// (quickselect, then a sort of the block alone), and a draw stops at the block where its mass
// is reached. A peaked distribution costs O(V); a flat one no more than a sort.
type sampler struct {
	ids   []int32
	probs []float64 // probs[i] is the unnormalised probability of ids[i], for the ordered prefix
	o     ordered
}

// sample returns the next token for one row's logits: greedy at temperature 0, else drawn from
// softmax(logits / Temperature) cut to the TopK most likely tokens, then to the smallest prefix
// (in order) whose probability reaches TopP (at least one token; TopP >= 1 keeps all).
// The normalising sum runs over the candidates in id order, so it does not depend on how they
// are ordered; the draw u = rng·(kept mass) walks the kept tokens in order.
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
	v := len(logits)
	n := v
	if s.TopK > 0 && s.TopK < v {
		n = s.TopK
	}
	sp.ids = sp.ids[:0]
	for i := range v {
		sp.ids = append(sp.ids, int32(i))
	}
	o := &sp.o
	*o = ordered{logits: logits, ids: sp.ids}
	if n < v {
		o.selectFirst(0, v, n)
		slices.Sort(o.ids[:n]) // the candidates in id order, for the sum
	}
	cand := o.ids[:n]
	top := float32(math.Inf(-1))
	for _, id := range cand {
		top = max(top, logits[id])
	}
	t, top64 := s.Temperature, float64(top)/s.Temperature
	prob := func(id int32) float64 { return math.Exp(float64(logits[id])/t - top64) }
	sum := 0.0
	for _, id := range cand {
		sum += prob(id)
	}
	sp.probs = sp.probs[:0]
	done, block := 0, 64 // o.ids[:done] are in order, their probabilities in sp.probs
	extend := func() {
		c := min(block, n-done)
		block *= 2
		if done+c < n {
			o.selectFirst(done, n, c)
		}
		o.sort(done, done+c)
		for _, id := range o.ids[done : done+c] {
			sp.probs = append(sp.probs, prob(id))
		}
		done += c
	}
	kept, acc := n, sum
	if s.TopP < 1 {
		kept, acc = 0, 0
		for kept < n {
			if kept == done {
				extend()
			}
			acc += sp.probs[kept]
			kept++
			if acc >= s.TopP*sum {
				break
			}
		}
	}
	u := rng.Float64() * acc
	for i := range kept {
		if i == done {
			extend()
		}
		u -= sp.probs[i]
		if u < 0 {
			return o.ids[i]
		}
	}
	for done < kept { // rounding left u >= 0: the last kept token
		extend()
	}
	return o.ids[kept-1]
}

// ordered orders token ids by their logits: higher first, the lower id on ties.
type ordered struct {
	logits []float32
	ids    []int32
}

func (o *ordered) before(a, b int32) bool {
	la, lb := o.logits[a], o.logits[b]
	return la > lb || (la == lb && a < b)
}

func (o *ordered) sort(lo, hi int) {
	slices.SortFunc(o.ids[lo:hi], func(a, b int32) int {
		if c := cmp.Compare(o.logits[b], o.logits[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
}

// selectFirst rearranges ids[lo:hi] so that ids[lo:lo+c] are its c first ids (in no particular
// order): quickselect with median-of-three pivots, a sort past 2·log₂ rounds (the worst case).
func (o *ordered) selectFirst(lo, hi, c int) {
	k := lo + c
	ids := o.ids
	for depth := 2 * bits.Len(uint(hi-lo)); hi-lo > 16; depth-- {
		if depth == 0 {
			break
		}
		mid := lo + (hi-lo)/2
		if o.before(ids[mid], ids[lo]) {
			ids[mid], ids[lo] = ids[lo], ids[mid]
		}
		if o.before(ids[hi-1], ids[lo]) {
			ids[hi-1], ids[lo] = ids[lo], ids[hi-1]
		}
		if o.before(ids[mid], ids[hi-1]) {
			ids[mid], ids[hi-1] = ids[hi-1], ids[mid]
		}
		pivot, p := ids[hi-1], lo // the median of the three, moved to the end
		for j := lo; j < hi-1; j++ {
			if o.before(ids[j], pivot) {
				ids[p], ids[j] = ids[j], ids[p]
				p++
			}
		}
		ids[p], ids[hi-1] = ids[hi-1], ids[p]
		switch {
		case k == p || k == p+1:
			return
		case k < p:
			hi = p
		default:
			lo = p + 1
		}
	}
	if lo < k && k < hi {
		o.sort(lo, hi)
	}
}
