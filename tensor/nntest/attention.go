package nntest

import (
	"math"
	"testing"

	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/tensor"
)

// Attention checks Attention, AttentionLSE and AttentionBackward (causal with grouped-query
// heads, and packed variable-length bidirectional sequences) and the decode path (KVCacheWrite,
// then AttentionDecode over per-sequence cache lengths) against the float64 reference.
func Attention(t *testing.T, b tensor.Backend) {
	const hq, hkv, d = 4, 2, 32
	for _, c := range []struct {
		name   string
		causal bool
		cu     []int32 // nil: one sequence
		rows   int
	}{
		{"causal-gqa", true, nil, 150},                                // three key tiles
		{"varlen-bidirectional", false, []int32{0, 5, 5, 75, 83}, 83}, // an empty sequence too
		{"varlen-causal", true, []int32{0, 66, 70}, 70},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, b, 24)
			qv, kv, vv := e.randn(c.rows*hq*d, 1, false), e.randn(c.rows*hkv*d, 1, false), e.randn(c.rows*hkv*d, 1, false)
			dov := e.randn(c.rows*hq*d, 1, false)
			cfg := tensor.DefaultAttentionConfig(d, c.causal)
			got := twice(t, func() [][]float32 {
				in := tensor.AttentionInputs{Q: e.f32(qv, c.rows, hq, d), K: e.f32(kv, c.rows, hkv, d), V: e.f32(vv, c.rows, hkv, d)}
				if c.cu != nil {
					in.CuSeqlensQ, in.CuSeqlensK = e.i32(c.cu), e.i32(c.cu)
				}
				out, lse, plain := e.zeros(c.rows, hq, d), e.zeros(c.rows, hq), e.zeros(c.rows, hq, d)
				e.ok(tensor.AttentionLSE(out, lse, in, cfg))
				e.ok(tensor.Attention(plain, in, cfg))
				dq, dk, dv := e.zeros(c.rows, hq, d), e.zeros(c.rows, hkv, d), e.zeros(c.rows, hkv, d)
				e.ok(tensor.AttentionBackward(dq, dk, dv, tensor.AttentionGrad{AttentionInputs: in, Out: out, LSE: lse, DOut: e.f32(dov, c.rows, hq, d)}, cfg))
				return [][]float32{e.host(out), e.host(lse), e.host(plain), e.host(dq), e.host(dk), e.host(dv)}
			})
			s := nnref.AttnShape{Hq: hq, Hkv: hkv, D: d, Causal: c.causal, Scale: float64(cfg.Scale)}
			seqs := []nnref.Seq{{Q0: 0, QN: c.rows, K0: 0, KN: c.rows}}
			if c.cu != nil {
				seqs = seqs[:0]
				for i := 1; i < len(c.cu); i++ {
					n := int(c.cu[i] - c.cu[i-1])
					seqs = append(seqs, nnref.Seq{Q0: int(c.cu[i-1]), QN: n, K0: int(c.cu[i-1]), KN: n})
				}
			}
			q, k, v, do := f64(qv), f64(kv), f64(vv), f64(dov)
			out, lse := make([]float64, len(q)), make([]float64, c.rows*hq)
			nnref.Attention(s, seqs, q, k, v, out, lse)
			dq, dk, dv := make([]float64, len(q)), make([]float64, len(k)), make([]float64, len(v))
			nnref.AttentionBackward(s, seqs, q, k, v, out, lse, do, dq, dk, dv)
			for i, w := range [][]float64{out, lse, out, dq, dk, dv} {
				near(t, []string{"out", "lse", "out (no lse)", "dq", "dk", "dv"}[i], got[i], w, 1e-4, 1e-4)
			}
		})
	}
	t.Run("decode", func(t *testing.T) { decode(t, b) })
}

// decode writes a prompt and then one token per step into a two-sequence cache of different
// lengths and checks each step's attention against the reference over the cached rows.
func decode(t *testing.T, b tensor.Backend) {
	const bn, sMax, hq, hkv, d = 2, 40, 4, 1, 16
	e := newEnv(t, b, 25)
	kc, vc := e.zeros(bn, sMax, hkv, d), e.zeros(bn, sMax, hkv, d)
	kHost, vHost := make([]float64, bn*sMax*hkv*d), make([]float64, bn*sMax*hkv*d)
	lens := []int32{0, 0}
	cfg := tensor.DefaultAttentionConfig(d, true)
	for step, tn := range []int{7, 1, 1, 3} { // a 7-token prompt, two single tokens, a 3-token draft
		if step == 0 {
			lens[1] = 2 // the second sequence already holds two positions (written below)
			kv := e.randn(bn*2*hkv*d, 1, false)
			e.ok(tensor.KVCacheWrite(kc, e.f32(kv, bn, 2, hkv, d), e.i32([]int32{sMax - 2, 0})))
			e.ok(tensor.KVCacheWrite(vc, e.f32(kv, bn, 2, hkv, d), e.i32([]int32{sMax - 2, 0})))
			copy(kHost[(sMax*1)*hkv*d:], f64(kv[2*hkv*d:]))
			copy(vHost[(sMax*1)*hkv*d:], f64(kv[2*hkv*d:]))
		}
		kn, vn, qv := e.randn(bn*tn*hkv*d, 1, false), e.randn(bn*tn*hkv*d, 1, false), e.randn(bn*tn*hq*d, 1, false)
		starts := e.i32(append([]int32(nil), lens...))
		e.ok(tensor.KVCacheWrite(kc, e.f32(kn, bn, tn, hkv, d), starts))
		e.ok(tensor.KVCacheWrite(vc, e.f32(vn, bn, tn, hkv, d), starts))
		seqs := make([]nnref.Seq, bn)
		for i := range bn {
			row := hkv * d
			copy(kHost[(i*sMax+int(lens[i]))*row:], f64(kn[i*tn*row:(i+1)*tn*row]))
			copy(vHost[(i*sMax+int(lens[i]))*row:], f64(vn[i*tn*row:(i+1)*tn*row]))
			lens[i] += int32(tn)
			seqs[i] = nnref.Seq{Q0: i * tn, QN: tn, K0: i * sMax, KN: int(lens[i])}
		}
		got := twice(t, func() [][]float32 {
			out := e.zeros(bn, tn, hq, d)
			e.ok(tensor.AttentionDecode(out, tensor.DecodeInputs{Q: e.f32(qv, bn, tn, hq, d), KCache: kc, VCache: vc, Lens: e.i32(append([]int32(nil), lens...))}, cfg))
			return [][]float32{e.host(out)}
		})
		want := make([]float64, len(qv))
		s := nnref.AttnShape{Hq: hq, Hkv: hkv, D: d, Causal: true, Scale: 1 / math.Sqrt(d)}
		nnref.Attention(s, seqs, f64(qv), kHost, vHost, want, nil)
		near(t, "out", got[0], want, 1e-4, 1e-4)
	}
}
