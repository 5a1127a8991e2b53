package nnref

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/parallel"
)

// Seq is one sequence of an attention call: its queries are rows [Q0, Q0+QN) of q, its keys and
// values rows [K0, K0+KN) of k and v. Packed variable-length batches (cu_seqlens) and KV-cache
// decoding are both lists of Seqs.
type Seq struct{ Q0, QN, K0, KN int }

// AttnShape is the geometry of an attention call: Hq query heads share Hkv key/value heads
// (grouped-query attention: query head h reads key/value head h/(Hq/Hkv)), each of size D.
// With Causal, query i of a sequence sees keys j <= i + KN − QN (the queries are the last QN
// positions, which covers prefill, where QN = KN, and decoding with a cache).
type AttnShape struct {
	Hq, Hkv, D int
	Causal     bool
	Scale      float64
}

// KeyTile is how many keys the attention kernels score at a time: the only score buffer.
const KeyTile = 64

// keyLimit is the number of keys query row i (0-based within its sequence) may see.
func (s AttnShape) keyLimit(q Seq, i int) int {
	if !s.Causal {
		return q.KN
	}
	return max(0, min(q.KN, i+q.KN-q.QN+1))
}

// Attention writes out = softmax(q·kᵀ·scale)·v per sequence and query head and, when lse is
// not nil, the log-sum-exp of each row of scaled scores (lse [rows of q, Hq]). q and out are
// [rows, Hq, D], k and v [rows, Hkv, D]. Keys are visited in tiles of KeyTile with the online
// softmax (running max, rescaled sum and accumulator), so no score matrix is built. A query that
// sees no key (causal, more queries than keys) gets out = 0 and lse = −Inf.
func Attention[F Float](s AttnShape, seqs []Seq, q, k, v, out, lse []F) {
	parallel.For(len(seqs)*s.Hq, 1, func(lo, hi int) {
		sc := make([]F, KeyTile)
		acc := make([]F, s.D)
		for job := lo; job < hi; job++ {
			sq, h := seqs[job/s.Hq], job%s.Hq
			g := h / (s.Hq / s.Hkv)
			for i := range sq.QN {
				qr := q[((sq.Q0+i)*s.Hq+h)*s.D:][:s.D]
				or := out[((sq.Q0+i)*s.Hq+h)*s.D:][:s.D]
				m, l := F(math.Inf(-1)), F(0)
				clear(acc)
				n := s.keyLimit(sq, i)
				for j0 := 0; j0 < n; j0 += KeyTile {
					j1 := min(j0+KeyTile, n)
					tm := F(math.Inf(-1))
					for j := j0; j < j1; j++ {
						kr := k[((sq.K0+j)*s.Hkv+g)*s.D:][:s.D]
						sc[j-j0] = F(Dot(qr, kr) * F(s.Scale))
						tm = max(tm, sc[j-j0])
					}
					if tm > m { // rescale what the earlier tiles summed
						c := F(math.Exp(float64(m - tm)))
						l *= c
						for d := range acc {
							acc[d] *= c
						}
						m = tm
					}
					for j := j0; j < j1; j++ {
						p := F(math.Exp(float64(sc[j-j0] - m)))
						l += p
						vr := v[((sq.K0+j)*s.Hkv+g)*s.D:][:s.D]
						for d, vv := range vr {
							acc[d] += F(p * vv)
						}
					}
				}
				for d := range or {
					if n == 0 {
						or[d] = 0
					} else {
						or[d] = acc[d] / l
					}
				}
				if lse != nil {
					lse[(sq.Q0+i)*s.Hq+h] = m + F(math.Log(float64(l)))
				}
			}
		}
	})
}

// AttentionBackward writes dq, dk and dv (overwritten) from dout, the forward's out and lse,
// recomputing the probabilities p = exp(q·k·scale − lse) one score at a time (no score matrix):
// dv_j = Σ_i p_ij dout_i, ds_ij = p_ij (dout_i·v_j − dout_i·out_i), dq_i = scale Σ_j ds_ij k_j,
// dk_j = scale Σ_i ds_ij q_i. One goroutine owns each (sequence, key/value head), so the sums
// over the query heads of a group run in a fixed order.
func AttentionBackward[F Float](s AttnShape, seqs []Seq, q, k, v, out, lse, dout, dq, dk, dv []F) {
	group := s.Hq / s.Hkv
	parallel.For(len(seqs)*s.Hkv, 1, func(lo, hi int) {
		for job := lo; job < hi; job++ {
			sq, g := seqs[job/s.Hkv], job%s.Hkv
			for j := range sq.KN {
				clear(dk[((sq.K0+j)*s.Hkv+g)*s.D:][:s.D])
				clear(dv[((sq.K0+j)*s.Hkv+g)*s.D:][:s.D])
			}
			for h := g * group; h < (g+1)*group; h++ {
				for i := range sq.QN {
					row := ((sq.Q0+i)*s.Hq + h) * s.D
					qr, dor, dqr := q[row:][:s.D], dout[row:][:s.D], dq[row:][:s.D]
					clear(dqr)
					di := Dot(dor, out[row:][:s.D])
					li := lse[(sq.Q0+i)*s.Hq+h]
					for j := range s.keyLimit(sq, i) {
						kv := ((sq.K0+j)*s.Hkv + g) * s.D
						kr, vr := k[kv:][:s.D], v[kv:][:s.D]
						p := F(math.Exp(float64(F(Dot(qr, kr)*F(s.Scale)) - li)))
						ds := F(F(p*(Dot(dor, vr)-di)) * F(s.Scale))
						dkr, dvr := dk[kv:][:s.D], dv[kv:][:s.D]
						for d := range dqr {
							dvr[d] += F(p * dor[d])
							dqr[d] += F(ds * kr[d])
							dkr[d] += F(ds * qr[d])
						}
					}
				}
			}
		}
	})
}
