package nnref

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/parallel"
)

// The LM head kernels compute logits in tiles of LMRowBlock hidden states by LMVocabChunk
// vocabulary rows: the only logits that exist at any time (64 KiB of float32 per goroutine).
const (
	LMRowBlock   = 16
	LMVocabChunk = 1024
)

// LMHead writes, for each of the n hidden states h [n, d], the log-probability of its target
// and the entropy of softmax(h·wᵀ / temp) over the vocabulary rows of w [v, d], without building
// the [n, v] logits: each tile of logits is folded into a running max m, s = Σ exp(z − m) and
// t = Σ exp(z − m)(z − m) (float64), rescaled when the max grows; then logsumexp = m + log s,
// logp = z_y − logsumexp (clamped at −MaxFloat32 as tensor.LogProbEntropy does) and the
// entropy is log s − t/s. A logit is Dot(h_i, w_v) / temp, bit for bit.
func LMHead[F Float](n, d, v int, h, w []F, targets []int32, temp F, logp, ent []F) {
	parallel.For(n, LMRowBlock, func(lo, hi int) {
		rb := hi - lo
		z := make([]F, rb*LMVocabChunk)
		m := make([]F, rb)
		s, t := make([]float64, rb), make([]float64, rb)
		zy := make([]F, rb)
		for r := range m {
			m[r] = F(math.Inf(-1))
		}
		for c0 := 0; c0 < v; c0 += LMVocabChunk {
			vc := min(v-c0, LMVocabChunk)
			lmLogits(lo, hi, c0, vc, d, h, w, temp, z)
			for r := range rb {
				zr := z[r*vc : (r+1)*vc]
				if y := int(targets[lo+r]) - c0; y >= 0 && y < vc {
					zy[r] = zr[y]
				}
				bm := F(math.Inf(-1))
				for _, x := range zr {
					bm = max(bm, x)
				}
				if bm > m[r] {
					if s[r] > 0 {
						c := math.Exp(float64(m[r] - bm))
						t[r] = c * (t[r] + s[r]*float64(m[r]-bm))
						s[r] *= c
					}
					m[r] = bm
				}
				if math.IsInf(float64(m[r]), -1) {
					continue
				}
				for _, x := range zr {
					u := float64(x - m[r])
					e := math.Exp(u)
					s[r] += e
					t[r] += e * u
				}
			}
		}
		for r := range rb {
			lse := float64(m[r]) + math.Log(s[r])
			logp[lo+r] = F(math.Max(float64(zy[r])-lse, -math.MaxFloat32))
			ent[lo+r] = F(math.Log(s[r]) - t[r]/s[r])
		}
	})
}

// lmLogits writes the logits of hidden rows [lo, hi) and vocabulary rows [c0, c0+vc) into
// z [hi−lo, vc], divided by temp.
func lmLogits[F Float](lo, hi, c0, vc, d int, h, w []F, temp F, z []F) {
	rb := hi - lo
	gemmRows(false, true, 0, rb, rb, vc, d, h[lo*d:hi*d], w[c0*d:(c0+vc)*d], false, z[:rb*vc])
	for j := range z[:rb*vc] {
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
}

// lmGradTile writes into z the gradient with respect to the logits of hidden rows [lo, hi) and
// vocabulary rows [c0, c0+vc): with p = exp(z − lse) and lse = z_y − logp,
// dz = dlogp·(1[v=y] − p) − dent·p·(log p + H), and dlogits = dz / temp.
func lmGradTile[F Float](lo, hi, c0, vc, d int, h, w []F, g LMHeadGrad[F], lse []float64, z []F) {
	lmLogits(lo, hi, c0, vc, d, h, w, g.Temp, z)
	for r := range hi - lo {
		i := lo + r
		y := int(g.Targets[i]) - c0
		gl, ge, ent := float64(g.DLogP[i]), 0.0, float64(g.Ent[i])
		if g.DEnt != nil {
			ge = float64(g.DEnt[i])
		}
		zr := z[r*vc : (r+1)*vc]
		for j, x := range zr {
			lp := float64(x) - lse[i]
			p := math.Exp(lp)
			dz := -gl*p - ge*p*(lp+ent)
			if j == y {
				dz += gl
			}
			zr[j] = F(dz / float64(g.Temp))
		}
	}
}

// LMHeadBackward writes dh [n, d] (overwritten) and dw [v, d] (overwritten, or added to when
// acc) for LMHead, recomputing the logits tile by tile. dh is computed in parallel over row
// blocks and dw in parallel over vocabulary chunks, each summing in a fixed order, so the
// logits are computed twice (four GEMM-sized passes in all instead of three) in exchange for no
// floating-point atomics and no per-goroutine copies of dw.
func LMHeadBackward[F Float](n, d, v int, h, w []F, g LMHeadGrad[F], dh, dw []F, acc bool) {
	lse := make([]float64, n)
	for i := range n {
		zy := Dot(h[i*d:(i+1)*d], w[int(g.Targets[i])*d:][:d]) / g.Temp
		lse[i] = float64(zy) - float64(g.LogP[i])
	}
	parallel.For(n, LMRowBlock, func(lo, hi int) {
		z := make([]F, (hi-lo)*LMVocabChunk)
		clear(dh[lo*d : hi*d])
		for c0 := 0; c0 < v; c0 += LMVocabChunk {
			vc := min(v-c0, LMVocabChunk)
			lmGradTile(lo, hi, c0, vc, d, h, w, g, lse, z)
			gemmRows(false, false, 0, hi-lo, hi-lo, d, vc, z[:(hi-lo)*vc], w[c0*d:(c0+vc)*d], true, dh[lo*d:hi*d])
		}
	})
	parallel.For(v, LMVocabChunk, func(c0, c1 int) {
		vc := c1 - c0
		z := make([]F, LMRowBlock*vc)
		if !acc {
			clear(dw[c0*d : c1*d])
		}
		for lo := 0; lo < n; lo += LMRowBlock {
			hi := min(lo+LMRowBlock, n)
			lmGradTile(lo, hi, c0, vc, d, h, w, g, lse, z)
			gemmRows(true, false, 0, vc, vc, d, hi-lo, z[:(hi-lo)*vc], h[lo*d:hi*d], true, dw[c0*d:c1*d])
		}
	})
}
