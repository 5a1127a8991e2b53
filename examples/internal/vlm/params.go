package vlm

import (
	"fmt"
	"math"
	"math/rand/v2"
)

type initKind int

const (
	initZero initKind = iota
	initOne
	initNormal
	// initLinear is initNormal for a linear weight stored [out, in]: the values are drawn in
	// [in, out] order and transposed, so a model of a given seed has the same function as when
	// the weights were stored [in, out].
	initLinear
)

// pspec describes one parameter: its name, shape and initial distribution.
type pspec struct {
	name  string
	shape []int
	init  initKind
	std   float64
}

// specs lists the parameters in their stable order (the order of Model.Params and of slots).
func specs(c Config) []pspec {
	d, m, v := c.Dim, c.MLPDim, c.Vocab
	resid := 1 / math.Sqrt(float64(2*c.Layers)) // GPT-2 style scaling of residual projections
	lin := func(in int) float64 { return 1 / math.Sqrt(float64(in)) }
	s := []pspec{
		{"patch.w", []int{d, c.patchLen()}, initLinear, lin(c.patchLen())},
		{"patch.b", []int{d}, initZero, 0},
		{"patch.pos", []int{c.Patches(), d}, initNormal, 0.1},
		{"tok.emb", []int{v, d}, initNormal, 1},
		{"tok.pos", []int{c.MaxLen, d}, initNormal, 0.1},
	}
	for l := range c.Layers {
		p := fmt.Sprintf("block%d.", l)
		s = append(s,
			pspec{p + "ln1.g", []int{d}, initOne, 0},
			pspec{p + "ln1.b", []int{d}, initZero, 0},
			pspec{p + "attn.wqkv", []int{3 * d, d}, initLinear, lin(d)},
			pspec{p + "attn.bqkv", []int{3 * d}, initZero, 0},
			pspec{p + "attn.wo", []int{d, d}, initLinear, lin(d) * resid},
			pspec{p + "attn.bo", []int{d}, initZero, 0},
			pspec{p + "ln2.g", []int{d}, initOne, 0},
			pspec{p + "ln2.b", []int{d}, initZero, 0},
			pspec{p + "mlp.w1", []int{m, d}, initLinear, lin(d)},
			pspec{p + "mlp.b1", []int{m}, initZero, 0},
			pspec{p + "mlp.w2", []int{d, m}, initLinear, lin(m) * resid},
			pspec{p + "mlp.b2", []int{d}, initZero, 0},
		)
	}
	return append(s,
		pspec{"lnf.g", []int{d}, initOne, 0},
		pspec{"lnf.b", []int{d}, initZero, 0},
		pspec{"head.w", []int{v, d}, initLinear, lin(d)},
		pspec{"head.b", []int{v}, initZero, 0},
	)
}

// initValues fills fresh parameter values deterministically from seed.
func initValues(c Config, seed uint64) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, 0x766c6d5f696e6974)) // "vlm_init"
	sp := specs(c)
	out := make([][]float32, len(sp))
	for i, p := range sp {
		n := 1
		for _, d := range p.shape {
			n *= d
		}
		v := make([]float32, n)
		switch p.init {
		case initOne:
			for j := range v {
				v[j] = 1
			}
		case initNormal:
			for j := range v {
				v[j] = float32(rng.NormFloat64() * p.std)
			}
		case initLinear:
			out, in := p.shape[0], p.shape[1]
			for j := range in * out { // j = i·out + o in the [in, out] order
				v[(j%out)*in+j/out] = float32(rng.NormFloat64() * p.std)
			}
		}
		out[i] = v
	}
	return out
}
