package nnref

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// attentionNaive materialises each sequence's scores, masks, softmaxes and multiplies: the
// textbook definition the tiled kernel must reproduce.
func attentionNaive(s AttnShape, seqs []Seq, q, k, v []float64, rows int) (out, lse []float64) {
	out, lse = make([]float64, rows*s.Hq*s.D), make([]float64, rows*s.Hq)
	for _, sq := range seqs {
		for h := range s.Hq {
			g := h / (s.Hq / s.Hkv)
			for i := range sq.QN {
				sc := make([]float64, sq.KN)
				m := math.Inf(-1)
				for j := range sq.KN {
					sc[j] = math.Inf(-1)
					if s.Causal && j > i+sq.KN-sq.QN {
						continue
					}
					var dot float64
					for d := range s.D {
						dot += q[((sq.Q0+i)*s.Hq+h)*s.D+d] * k[((sq.K0+j)*s.Hkv+g)*s.D+d]
					}
					sc[j] = dot * s.Scale
					m = math.Max(m, sc[j])
				}
				var z float64
				for j := range sc {
					z += math.Exp(sc[j] - m)
				}
				if math.IsInf(m, -1) { // no key visible
					lse[(sq.Q0+i)*s.Hq+h] = m
					continue
				}
				lse[(sq.Q0+i)*s.Hq+h] = m + math.Log(z)
				for j := range sc {
					p := math.Exp(sc[j]-m) / z
					for d := range s.D {
						out[((sq.Q0+i)*s.Hq+h)*s.D+d] += p * v[((sq.K0+j)*s.Hkv+g)*s.D+d]
					}
				}
			}
		}
	}
	return out, lse
}

func TestAttention(t *testing.T) {
	for _, c := range []struct {
		name       string
		hq, hkv, d int
		causal     bool
		seqs       []Seq
		qRows      int
		kRows      int
	}{
		{"bidirectional", 2, 2, 4, false, []Seq{{0, 70, 0, 70}}, 70, 70}, // two key tiles
		{"causal-gqa", 4, 2, 4, true, []Seq{{0, 130, 0, 130}}, 130, 130}, // three key tiles
		{"varlen", 2, 1, 3, true, []Seq{{0, 3, 0, 3}, {3, 5, 3, 5}, {8, 1, 8, 1}}, 9, 9},
		{"decode", 2, 1, 4, true, []Seq{{0, 1, 0, 7}, {1, 2, 10, 5}}, 3, 20}, // cache rows of two sequences
		{"more-queries-than-keys", 1, 1, 2, true, []Seq{{0, 4, 0, 2}}, 4, 2}, // first two queries see nothing
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(16, uint64(c.qRows)))
			s := AttnShape{Hq: c.hq, Hkv: c.hkv, D: c.d, Causal: c.causal, Scale: 1 / math.Sqrt(float64(c.d))}
			q, k, v := randn(r, c.qRows*c.hq*c.d, 1), randn(r, c.kRows*c.hkv*c.d, 1), randn(r, c.kRows*c.hkv*c.d, 1)
			out, lse := make([]float64, len(q)), make([]float64, c.qRows*c.hq)
			Attention(s, c.seqs, q, k, v, out, lse)
			wo, wl := attentionNaive(s, c.seqs, q, k, v, c.qRows)
			near(t, "out", out, wo, 1e-12)
			near(t, "lse", lse, wl, 1e-12)
		})
	}
}

func TestAttentionGradient(t *testing.T) {
	for _, causal := range []bool{false, true} {
		t.Run(fmt.Sprint("causal=", causal), func(t *testing.T) {
			r := rand.New(rand.NewPCG(17, 18))
			s := AttnShape{Hq: 4, Hkv: 2, D: 3, Causal: causal, Scale: 0.7}
			seqs := []Seq{{0, 3, 0, 3}, {3, 2, 3, 4}} // the second has a cached prefix
			q, k, v := randn(r, 5*4*3, 1), randn(r, 7*2*3, 1), randn(r, 7*2*3, 1)
			rOut := randn(r, len(q), 1)
			out, lse := make([]float64, len(q)), make([]float64, 5*4)
			loss := func() float64 { Attention(s, seqs, q, k, v, out, lse); return dotLoss(rOut, out) }
			loss()
			dq, dk, dv := make([]float64, len(q)), make([]float64, len(k)), make([]float64, len(v))
			AttentionBackward(s, seqs, q, k, v, out, lse, rOut, dq, dk, dv)
			fd(t, "dq", q, loss, dq)
			fd(t, "dk", k, loss, dk)
			fd(t, "dv", v, loss, dv)
		})
	}
}
