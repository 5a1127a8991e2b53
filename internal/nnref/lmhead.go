package nnref

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/parallel"
)

// Tile sizes of the LM head kernels: the only logits that exist at any time are one tile per
// goroutine (256 KiB of float32). The forward takes LMForwardRows hidden states by
// LMForwardChunk vocabulary rows (a 896-wide chunk of the weight, 900 KiB, stays in L2 while
// every row block passes over it); the backward takes LMVocabChunk vocabulary rows at a time,
// LMRowBlock rows per goroutine.
const (
	LMForwardRows  = 256
	LMForwardChunk = 256
	LMRowBlock     = 64
	LMVocabChunk   = 1024
)

// LMKernels computes the LM head's tiles for hidden states h [n, d] and the head weight w
// [v, d]: its three matrix products and its two per-row loops over a tile of logits. The
// reference's are RefKernels; the CPU's go through the packed GEMM and the log-prob family's
// vector loops. A logit must not depend on the tile it is computed in.
type LMKernels[F Float] interface {
	// Logits writes z [hi−lo, c1−c0] = h[lo:hi]·w[c0:c1]ᵀ.
	Logits(lo, hi, c0, c1 int, z []F)
	// AddDHidden adds dz [hi−lo, c1−c0] · w[c0:c1] into dh[lo:hi] (dh is [n, d]).
	AddDHidden(lo, hi, c0, c1 int, dz, dh []F)
	// AddDWeight adds dzᵀ · h[lo:hi] into dw[c0:c1] (dz is [hi−lo, c1−c0], dw is [v, d]).
	AddDWeight(lo, hi, c0, c1 int, dz, dw []F)
	// BeginChunk is called, with no other call in flight, before the backward works on
	// vocabulary rows [c0, c1): the CPU kernels pack that chunk of wᵀ for AddDHidden then.
	BeginChunk(c0, c1 int)
	// Fold returns the maximum m of a row of logits (−Inf when all are −Inf, and then s = t =
	// 0), s = Σ exp(z−m) and t = Σ exp(z−m)·(z−m).
	Fold(z []F) (m F, s, t float64)
	// GradRow writes the logits gradient of a row (dz may be z): with p = exp(z − lse),
	// dz = (gl·(1[j=y] − p) − ge·p·(z − lse + ent)) / temp; y < 0 or past the row means the
	// target is elsewhere.
	GradRow(dz, z []F, y int, lse, gl, ge, ent float64, temp F)
}

// RefKernels are the reference's: each logit is Dot(h_i, w_v), each gradient sum runs in
// ascending order, exp is float64.
type RefKernels[F Float] struct {
	D    int
	H, W []F
}

func (r RefKernels[F]) Fold(z []F) (m F, s, t float64) {
	m = F(math.Inf(-1))
	for _, x := range z {
		m = max(m, x)
	}
	if math.IsInf(float64(m), -1) {
		return m, 0, 0
	}
	for _, x := range z {
		u := float64(x - m)
		e := math.Exp(u)
		s += e
		t += e * u
	}
	return m, s, t
}

func (r RefKernels[F]) GradRow(dz, z []F, y int, lse, gl, ge, ent float64, temp F) {
	for j, x := range z {
		lp := float64(x) - lse
		p := math.Exp(lp)
		g := -gl*p - ge*p*(lp+ent)
		if j == y {
			g += gl
		}
		dz[j] = F(g / float64(temp))
	}
}

func (r RefKernels[F]) Logits(lo, hi, c0, c1 int, z []F) {
	gemmRows(false, true, 0, hi-lo, hi-lo, c1-c0, r.D, r.H[lo*r.D:hi*r.D], r.W[c0*r.D:c1*r.D], false, z[:(hi-lo)*(c1-c0)])
}

func (r RefKernels[F]) AddDHidden(lo, hi, c0, c1 int, dz, dh []F) {
	gemmRows(false, false, 0, hi-lo, hi-lo, r.D, c1-c0, dz[:(hi-lo)*(c1-c0)], r.W[c0*r.D:c1*r.D], true, dh[lo*r.D:hi*r.D])
}

func (r RefKernels[F]) BeginChunk(c0, c1 int) {}

func (r RefKernels[F]) AddDWeight(lo, hi, c0, c1 int, dz, dw []F) {
	gemmRows(true, false, 0, c1-c0, c1-c0, r.D, hi-lo, dz[:(hi-lo)*(c1-c0)], r.H[lo*r.D:hi*r.D], true, dw[c0*r.D:c1*r.D])
}

// LMHead writes, for each of the n hidden states h [n, d], the log-probability of its target
// and the entropy of softmax(h·wᵀ / temp) over the vocabulary rows of w [v, d], without building
// the [n, v] logits. It runs in parallel over vocabulary chunks, so each chunk of w is read
// once: every tile of logits (LMForwardRows rows of the chunk) is reduced to its row maxima m and
// the sums s = Σ exp(z − m) and t = Σ exp(z − m)(z − m) (float64), and the chunks' partial sums
// are then merged per row in chunk order, rescaled to the running maximum. Finally
// logsumexp = m + log s, logp = z_y − logsumexp (clamped at −MaxFloat32 as
// tensor.LogProbEntropy does) and the entropy is log s − t/s. A logit is h_i·w_v (from prod)
// divided by temp.
func LMHead[F Float](n, v int, prod LMKernels[F], targets []int32, temp F, logp, ent []F) {
	type partial struct {
		m    F
		s, t float64
	}
	nc := (v + LMForwardChunk - 1) / LMForwardChunk
	parts := make([]partial, nc*n)
	zy := make([]F, n)
	parallel.For(nc, max(1, nc/32), func(clo, chi int) {
		z := make([]F, LMForwardRows*LMForwardChunk)
		for c := clo; c < chi; c++ {
			c0 := c * LMForwardChunk
			vc := min(v-c0, LMForwardChunk)
			for lo := 0; lo < n; lo += LMForwardRows {
				hi := min(lo+LMForwardRows, n)
				lmLogits(prod, lo, hi, c0, vc, temp, z)
				for r := range hi - lo {
					zr := z[r*vc : (r+1)*vc]
					if y := int(targets[lo+r]) - c0; y >= 0 && y < vc {
						zy[lo+r] = zr[y] // one chunk holds the target
					}
					var p partial
					p.m, p.s, p.t = prod.Fold(zr)
					parts[c*n+lo+r] = p
				}
			}
		}
	})
	parallel.For(n, LMRowBlock, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			m, s, t := F(math.Inf(-1)), 0.0, 0.0
			for c := range nc {
				p := parts[c*n+i]
				if math.IsInf(float64(p.m), -1) { // every logit of the chunk is −Inf
					continue
				}
				nm := max(m, p.m)
				s1, t1 := rebase(s, t, m, nm)
				s2, t2 := rebase(p.s, p.t, p.m, nm)
				m, s, t = nm, s1+s2, t1+t2
			}
			lse := float64(m) + math.Log(s)
			logp[i] = F(math.Max(float64(zy[i])-lse, -math.MaxFloat32))
			ent[i] = F(math.Log(s) - t/s)
		}
	})
}

// rebase returns the sums s = Σ exp(z − m) and t = Σ exp(z − m)(z − m) of a partial with
// maximum m relative to a maximum nm >= m.
func rebase[F Float](s, t float64, m, nm F) (float64, float64) {
	if s == 0 {
		return 0, 0
	}
	c := math.Exp(float64(m - nm))
	return c * s, c * (t + s*float64(m-nm))
}

// lmLogits writes the logits of hidden rows [lo, hi) and vocabulary rows [c0, c0+vc) into
// z [hi−lo, vc], divided by temp.
func lmLogits[F Float](prod LMKernels[F], lo, hi, c0, vc int, temp F, z []F) {
	prod.Logits(lo, hi, c0, c0+vc, z)
	if temp == 1 {
		return
	}
	for j := range z[:(hi-lo)*vc] {
		z[j] /= temp
	}
}

// LMHeadGrad is what LMHeadBackward reads besides the hidden states and the head weight: the
// targets, the forward's outputs, and the gradients flowing into them (nil DEnt means zero).
type LMHeadGrad[F Float] struct {
	Targets     []int32
	LogP, Ent   []F
	DLogP, DEnt []F
	Temp        F
	// BF16 rounds the logits gradient to bfloat16 (nearest, ties to even) before its products
	// with w and h, as a bfloat16 autograd does; they then multiply exact bfloat16 values.
	BF16 bool
}

// lmGradTile writes into z the gradient with respect to the logits of hidden rows [lo, hi) and
// vocabulary rows [c0, c0+vc): with p = exp(z − lse) and lse = z_y − logp,
// dz = dlogp·(1[v=y] − p) − dent·p·(log p + H), and dlogits = dz / temp.
func lmGradTile[F Float](prod LMKernels[F], lo, hi, c0, vc int, g LMHeadGrad[F], lse []float64, z []F) {
	lmLogits(prod, lo, hi, c0, vc, g.Temp, z)
	for r := range hi - lo {
		i := lo + r
		ge := 0.0
		if g.DEnt != nil {
			ge = float64(g.DEnt[i])
		}
		zr := z[r*vc : (r+1)*vc]
		prod.GradRow(zr, zr, int(g.Targets[i])-c0, lse[i], float64(g.DLogP[i]), ge, float64(g.Ent[i]), g.Temp)
	}
}

// LMHeadBackward writes dh [n, d] (overwritten) and dw [v, d] (overwritten, or added to when
// acc) for LMHead, recomputing the logits once, one vocabulary chunk (LMVocabChunk rows) at a
// time: the chunk's logits gradient for every row (a [n, LMVocabChunk] buffer, never [n, v]),
// computed in parallel over row blocks, each block then adding its product with the chunk of w
// into its rows of dh; then dw's chunk gets the gradient's product with h (a GEMM the kernels
// parallelise themselves). Each sum runs in a fixed order — dh over the chunks in ascending
// order, dw over the rows — so results do not depend on the number of goroutines. A nil dw
// means a frozen head: its product, the third of the backward's three GEMM-sized passes, is
// skipped. lse = z_y − logp takes z_y from a one-logit tile.
func LMHeadBackward[F Float](n, d, v int, prod LMKernels[F], g LMHeadGrad[F], dh, dw []F, acc bool) {
	lse := make([]float64, n)
	parallel.For(n, LMRowBlock, func(lo, hi int) {
		var zy [1]F
		for i := lo; i < hi; i++ {
			y := int(g.Targets[i])
			lmLogits(prod, i, i+1, y, 1, g.Temp, zy[:])
			lse[i] = float64(zy[0]) - float64(g.LogP[i])
		}
	})
	clear(dh[:n*d])
	z := make([]F, n*min(v, LMVocabChunk))
	for c0 := 0; c0 < v; c0 += LMVocabChunk {
		c1 := min(v, c0+LMVocabChunk)
		vc := c1 - c0
		prod.BeginChunk(c0, c1)
		parallel.For(n, LMRowBlock, func(lo, hi int) {
			zt := z[lo*vc : hi*vc]
			lmGradTile(prod, lo, hi, c0, vc, g, lse, zt)
			if g.BF16 {
				RoundBF16(zt)
			}
			prod.AddDHidden(lo, hi, c0, c1, zt, dh)
		})
		if dw == nil {
			continue
		}
		if !acc {
			clear(dw[c0*d : c1*d])
		}
		prod.AddDWeight(0, n, c0, c1, z[:n*vc], dw)
	}
}

// RoundBF16 rounds every element of x to the nearest bfloat16 (ties to even; NaN stays NaN),
// through float32.
func RoundBF16[F Float](x []F) {
	for i, v := range x {
		b := math.Float32bits(float32(v))
		if b&0x7fffffff > 0x7f800000 {
			continue
		}
		b += 0x7fff + (b>>16)&1
		x[i] = F(math.Float32frombits(b &^ 0xffff))
	}
}
