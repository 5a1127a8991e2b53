package nntest

import (
	"math"
	"testing"

	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/tensor"
)

// Attention checks Attention, AttentionLSE and AttentionBackward (causal with grouped-query
// heads, and packed variable-length bidirectional sequences) and the decode path (KVCacheWrite,
// then AttentionDecode over per-sequence cache lengths) against the float64 reference, in
// float32 and in bfloat16.
//
// bfloat16: the inputs are bfloat16 values, which the reference reads exactly; the backward's
// reference reads the backend's own (rounded) forward output, as the backward does. lse is
// float32 and held to the float32 bound. Each bfloat16 output is the float32 result x (within
// atol + rtol·|w| of the reference w) rounded once to nearest, |round(x) − x| <= 2⁻⁸·|x|, so it
// must lie within atol + rtol·|w| + 2⁻⁸·(|w| + atol + rtol·|w|) of w: the float32 bound plus one
// bfloat16 rounding (attnTol).
func Attention(t *testing.T, b tensor.Backend) {
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			attention(t, b, dt)
			t.Run("decode", func(t *testing.T) { decode(t, b, dt) })
		})
	}
}

// attnRtol and attnAtol bound the float32 attention against the float64 reference.
const attnRtol, attnAtol = 1e-4, 1e-4

// attnTol returns the bounds of an output of dtype dt: the float32 ones, plus one bfloat16
// rounding of the output for bfloat16 (see Attention).
func attnTol(dt tensor.DType) (rtol, atol float64) {
	if dt == tensor.BFloat16 {
		return attnRtol + 0x1p-8*(1+attnRtol), attnAtol * (1 + 0x1p-8)
	}
	return attnRtol, attnAtol
}

// attnZeros returns a zero tensor of dtype dt on the backend.
func attnZeros(e env, dt tensor.DType, shape ...int) *tensor.Tensor {
	e.t.Helper()
	d, err := tensor.New(e.b, dt, shape...)
	e.ok(err)
	return d
}

// attnHost returns a float32 or bfloat16 tensor's values, widened to float32.
func attnHost(e env, d *tensor.Tensor) []float32 {
	e.t.Helper()
	if d.DType() == tensor.Float32 {
		return e.host(d)
	}
	h, err := tensor.To(tensor.CPU(), d)
	e.ok(err)
	v, err := h.BF16s()
	e.ok(err)
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = x.Float32()
	}
	return out
}

func attention(t *testing.T, b tensor.Backend, dt tensor.DType) {
	const hq, hkv, d = 4, 2, 32
	bf := dt == tensor.BFloat16
	rtol, atol := attnTol(dt)
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
			qv, kv, vv := e.randn(c.rows*hq*d, 1, bf), e.randn(c.rows*hkv*d, 1, bf), e.randn(c.rows*hkv*d, 1, bf)
			dov := e.randn(c.rows*hq*d, 1, bf)
			cfg := tensor.DefaultAttentionConfig(d, c.causal)
			got := twice(t, func() [][]float32 {
				in := tensor.AttentionInputs{Q: e.put(qv, bf, c.rows, hq, d), K: e.put(kv, bf, c.rows, hkv, d), V: e.put(vv, bf, c.rows, hkv, d)}
				if c.cu != nil {
					in.CuSeqlensQ, in.CuSeqlensK = e.i32(c.cu), e.i32(c.cu)
				}
				out, lse, plain := attnZeros(e, dt, c.rows, hq, d), e.zeros(c.rows, hq), attnZeros(e, dt, c.rows, hq, d)
				e.ok(tensor.AttentionLSE(out, lse, in, cfg))
				e.ok(tensor.Attention(plain, in, cfg))
				dq, dk, dv := attnZeros(e, dt, c.rows, hq, d), attnZeros(e, dt, c.rows, hkv, d), attnZeros(e, dt, c.rows, hkv, d)
				e.ok(tensor.AttentionBackward(dq, dk, dv, tensor.AttentionGrad{AttentionInputs: in, Out: out, LSE: lse, DOut: e.put(dov, bf, c.rows, hq, d)}, cfg))
				return [][]float32{attnHost(e, out), e.host(lse), attnHost(e, plain), attnHost(e, dq), attnHost(e, dk), attnHost(e, dv)}
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
			fwd := out
			if bf {
				fwd = f64(got[0]) // the rounded output the backward reads
			}
			nnref.AttentionBackward(s, seqs, q, k, v, fwd, lse, do, dq, dk, dv)
			for i, w := range [][]float64{out, lse, out, dq, dk, dv} {
				rt, at := rtol, atol
				if i == 1 { // lse is float32 in every dtype
					rt, at = attnRtol, attnAtol
				}
				near(t, []string{"out", "lse", "out (no lse)", "dq", "dk", "dv"}[i], got[i], w, rt, at)
			}
		})
	}
}

// decode writes a prompt and then one token per step into a two-sequence cache of different
// lengths (of dtype dt) and checks each step's attention against the reference over the cached
// rows.
func decode(t *testing.T, b tensor.Backend, dt tensor.DType) {
	const bn, sMax, hq, hkv, d = 2, 40, 4, 1, 16
	bf := dt == tensor.BFloat16
	rtol, atol := attnTol(dt)
	e := newEnv(t, b, 25)
	kc, vc := attnZeros(e, dt, bn, sMax, hkv, d), attnZeros(e, dt, bn, sMax, hkv, d)
	kHost, vHost := make([]float64, bn*sMax*hkv*d), make([]float64, bn*sMax*hkv*d)
	lens := []int32{0, 0}
	cfg := tensor.DefaultAttentionConfig(d, true)
	for step, tn := range []int{7, 1, 1, 3} { // a 7-token prompt, two single tokens, a 3-token draft
		if step == 0 {
			lens[1] = 2 // the second sequence already holds two positions (written below)
			kv := e.randn(bn*2*hkv*d, 1, bf)
			e.ok(tensor.KVCacheWrite(kc, e.put(kv, bf, bn, 2, hkv, d), e.i32([]int32{sMax - 2, 0})))
			e.ok(tensor.KVCacheWrite(vc, e.put(kv, bf, bn, 2, hkv, d), e.i32([]int32{sMax - 2, 0})))
			copy(kHost[(sMax*1)*hkv*d:], f64(kv[2*hkv*d:]))
			copy(vHost[(sMax*1)*hkv*d:], f64(kv[2*hkv*d:]))
		}
		kn, vn, qv := e.randn(bn*tn*hkv*d, 1, bf), e.randn(bn*tn*hkv*d, 1, bf), e.randn(bn*tn*hq*d, 1, bf)
		starts := e.i32(append([]int32(nil), lens...))
		e.ok(tensor.KVCacheWrite(kc, e.put(kn, bf, bn, tn, hkv, d), starts))
		e.ok(tensor.KVCacheWrite(vc, e.put(vn, bf, bn, tn, hkv, d), starts))
		seqs := make([]nnref.Seq, bn)
		for i := range bn {
			row := hkv * d
			copy(kHost[(i*sMax+int(lens[i]))*row:], f64(kn[i*tn*row:(i+1)*tn*row]))
			copy(vHost[(i*sMax+int(lens[i]))*row:], f64(vn[i*tn*row:(i+1)*tn*row]))
			lens[i] += int32(tn)
			seqs[i] = nnref.Seq{Q0: i * tn, QN: tn, K0: i * sMax, KN: int(lens[i])}
		}
		got := twice(t, func() [][]float32 {
			out := attnZeros(e, dt, bn, tn, hq, d)
			e.ok(tensor.AttentionDecode(out, tensor.DecodeInputs{Q: e.put(qv, bf, bn, tn, hq, d), KCache: kc, VCache: vc, Lens: e.i32(append([]int32(nil), lens...))}, cfg))
			return [][]float32{attnHost(e, out)}
		})
		want := make([]float64, len(qv))
		s := nnref.AttnShape{Hq: hq, Hkv: hkv, D: d, Causal: true, Scale: 1 / math.Sqrt(d)}
		nnref.Attention(s, seqs, f64(qv), kHost, vHost, want, nil)
		near(t, "out", got[0], want, rtol, atol)
	}
}
