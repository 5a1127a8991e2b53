package vlm

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// blockW holds one decoder block's weights (or gradients). Linear weights are [in, out].
type blockW[F Float] struct {
	ln1G, ln1B []F // [D]
	wqkv, bqkv []F // [D, 3D], [3D]: query, key, value columns, each split into heads
	wo, bo     []F // [D, D], [D]
	ln2G, ln2B []F // [D]
	w1, b1     []F // [D, M], [M]
	w2, b2     []F // [M, D], [D]
}

// weights holds all trainable values (or their gradients) as flat row-major slices.
type weights[F Float] struct {
	patchW, patchB, patchPos []F // [P²C, D], [D], [NP, D]
	tokEmb, tokPos           []F // [V, D], [MaxLen, D]
	blocks                   []blockW[F]
	lnfG, lnfB               []F // [D]
	headW, headB             []F // [D, V], [V]
}

type initKind int

const (
	initZero initKind = iota
	initOne
	initNormal
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
		{"patch.w", []int{c.patchLen(), d}, initNormal, lin(c.patchLen())},
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
			pspec{p + "attn.wqkv", []int{d, 3 * d}, initNormal, lin(d)},
			pspec{p + "attn.bqkv", []int{3 * d}, initZero, 0},
			pspec{p + "attn.wo", []int{d, d}, initNormal, lin(d) * resid},
			pspec{p + "attn.bo", []int{d}, initZero, 0},
			pspec{p + "ln2.g", []int{d}, initOne, 0},
			pspec{p + "ln2.b", []int{d}, initZero, 0},
			pspec{p + "mlp.w1", []int{d, m}, initNormal, lin(d)},
			pspec{p + "mlp.b1", []int{m}, initZero, 0},
			pspec{p + "mlp.w2", []int{m, d}, initNormal, lin(m) * resid},
			pspec{p + "mlp.b2", []int{d}, initZero, 0},
		)
	}
	return append(s,
		pspec{"lnf.g", []int{d}, initOne, 0},
		pspec{"lnf.b", []int{d}, initZero, 0},
		pspec{"head.w", []int{d, v}, initNormal, lin(d)},
		pspec{"head.b", []int{v}, initZero, 0},
	)
}

// slots returns pointers to w's slices in the order of specs.
func (w *weights[F]) slots() []*[]F {
	s := []*[]F{&w.patchW, &w.patchB, &w.patchPos, &w.tokEmb, &w.tokPos}
	for l := range w.blocks {
		b := &w.blocks[l]
		s = append(s, &b.ln1G, &b.ln1B, &b.wqkv, &b.bqkv, &b.wo, &b.bo, &b.ln2G, &b.ln2B, &b.w1, &b.b1, &b.w2, &b.b2)
	}
	return append(s, &w.lnfG, &w.lnfB, &w.headW, &w.headB)
}

// bind makes weights whose slices are vals (in specs order).
func bind[F Float](c Config, vals [][]F) weights[F] {
	w := weights[F]{blocks: make([]blockW[F], c.Layers)}
	for i, p := range w.slots() {
		*p = vals[i]
	}
	return w
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
		}
		out[i] = v
	}
	return out
}
