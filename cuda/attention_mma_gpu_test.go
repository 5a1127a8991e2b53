//go:build cuda

package cuda_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/nntest"
)

// The bounds below allow 2⁻²³ (twice float32's unit roundoff) of relative error per plain
// float32 addition, in any order, and mmaStep = 18·2⁻²³ of the magnitudes of its terms per mma:
// its 16 exact products and the accumulator, each aligned to the largest with less than one
// float32 ulp of it lost (truncation, what NVIDIA tensor cores have been measured to do; round to
// nearest loses less), and the final rounding.
const (
	f32Step = 0x1p-23
	mmaStep = 18 * f32Step
)

// bf16Rand returns n bfloat16 values: normal, scaled by a power of two in [2⁻³, 2³] so that the
// terms of a sum span several binades.
func bf16Rand(r *rand.Rand, n int) []tensor.BF16 {
	v := make([]tensor.BF16, n)
	for i := range v {
		v[i] = tensor.BF16FromFloat32(float32(math.Ldexp(r.NormFloat64(), r.IntN(7)-3)))
	}
	return v
}

// TestAttentionMMAInstruction runs one mma.m16n8k16 (bfloat16 in, float32 accumulate) of the
// attention kernels' mma_bf16_16816 on random A, B and C, loaded from and stored to plain
// row-major matrices through the PTX ISA's fragment layout, against the float64 product: on a
// GPU this checks the layout and the instruction, on the emulator the software model. Each
// element must lie within mmaStep·(|c| + Σ|a·b|) of c + Σ a·b (the products are exact). On the emulator it must also equal, bit for bit, the order the model
// documents: c + a₀b₀ + … + a₁₅b₁₅ left to right in float32.
func TestAttentionMMAInstruction(t *testing.T) {
	be := device(t)
	r := rand.New(rand.NewPCG(21, 1))
	for trial := range 8 {
		a, b := bf16Rand(r, 16*16), bf16Rand(r, 16*8)
		c := randn(r, 16*8, 1)
		if trial == 0 { // C = 0: D is the plain product
			clear(c)
		}
		ad := tensor.Must(tensor.To(be, tensor.Must(tensor.FromBF16(a, 16, 16))))
		bd := tensor.Must(tensor.To(be, tensor.Must(tensor.FromBF16(b, 16, 8))))
		d, err := cuda.MMACheck(be, ad, bd, up(t, be, c, 16, 8))
		if err != nil {
			t.Fatal(err)
		}
		got := host(t, d)
		for i := range 16 {
			for j := range 8 {
				want, abs := float64(c[i*8+j]), math.Abs(float64(c[i*8+j]))
				ordered := c[i*8+j]
				for k := range 16 {
					p := float64(a[i*16+k].Float32()) * float64(b[k*8+j].Float32())
					want += p
					abs += math.Abs(p)
					ordered += a[i*16+k].Float32() * b[k*8+j].Float32()
				}
				g := got[i*8+j]
				if math.Abs(float64(g)-want) > mmaStep*abs {
					t.Fatalf("trial %d: D[%d][%d] = %v, want %v within %g", trial, i, j, g, want, mmaStep*abs)
				}
				if strings.HasPrefix(be.DeviceName(), "cuemu") && math.Float32bits(g) != math.Float32bits(ordered) {
					t.Fatalf("trial %d: emulated D[%d][%d] = %v, the documented order gives %v", trial, i, j, g, ordered)
				}
			}
		}
	}
}

// mmaRef is the float64 attention of one query row over its visible keys, with what the bound
// of TestAttentionMMAForward needs.
type mmaRef struct {
	out    []float64 // Σ w_j v_j
	absOut []float64 // Σ w_j |v_j|
	lse    float64
	logL   float64 // log Σ exp(s_j − m)
	m      float64 // max s_j
	ds     float64 // bound on the float32 error of every score s_j
	n      int     // visible keys
}

// mmaRow computes the reference of query row qi (a [d] slice) over keys ks and values vs ([n][d]
// slices, the visible ones).
func mmaRow(q []float64, ks, vs [][]float64, scale float64) mmaRef {
	d := len(q)
	ref := mmaRef{out: make([]float64, d), absOut: make([]float64, d), m: math.Inf(-1), n: len(ks)}
	s := make([]float64, len(ks))
	maxAbs, maxS := 0.0, 0.0
	for j, k := range ks {
		a := 0.0
		for c := range d {
			s[j] += q[c] * k[c]
			a += math.Abs(q[c] * k[c])
		}
		s[j] *= scale
		maxAbs = max(maxAbs, a)
		maxS = max(maxS, math.Abs(s[j]))
		ref.m = max(ref.m, s[j])
	}
	// ⌈d/16⌉ mma of exact products, then the rounding of the product by scale.
	ref.ds = scale*float64((d+15)/16)*mmaStep*maxAbs + f32Step*maxS
	l := 0.0
	for j := range s {
		s[j] = math.Exp(s[j] - ref.m)
		l += s[j]
	}
	for j, v := range vs {
		w := s[j] / l
		for c := range d {
			ref.out[c] += w * v[c]
			ref.absOut[c] += w * math.Abs(v[c])
		}
	}
	ref.logL = math.Log(l)
	ref.lse = ref.m + ref.logL
	return ref
}

// TestAttentionMMAForward checks the tensor-core bfloat16 forward (attention_mma_fwd_bf16) —
// and that the backend runs it for bfloat16 — against the float64 attention of the same
// bfloat16 inputs: head dimensions 128, 80, 64, 40 (not a multiple of 16: zero-padded) and 20
// (not a multiple of 8: staged element by element), causal and bidirectional, grouped-query and
// not, packed sequences of lengths 1, 65, 0 and 65, query tiles cut by the sequence end, T = 1,
// and decoding (queries at the end of longer caches).
//
// The bound, per query row with n visible keys: a score is d exact bfloat16 products summed in
// ⌈d/16⌉ mma, |Δs| <= ds = scale·⌈d/16⌉·mmaStep·max_j Σ_c|q_c·k_jc| + 2⁻²³·max|s|. A weight
// w_j = p_j / Σp moves by at most 2·ds from the scores (m cancels), 2·2⁻²² from expf (two ulp,
// numerator and sum), 2⁻¹⁶ from the two-bfloat16 split of p, 2·⌈n/16⌉·mmaStep from P·V (hi and
// lo), n·2⁻²³ from l, ⌈n/64⌉·2⁻²³ from the rescalings and 2·2⁻²³ from the division: together
// E, relative, so the float32 output x is within E·Σ_j w_j|v_j| of the reference o, and the
// stored bfloat16 within a further 2⁻⁸·|x| <= 2⁻⁸·(|o| + E·Σ w|v|). lse = m + log l is within
// ds + 2⁻²² + n·2⁻²³ (l's relative error) + 2⁻²²·|log l| (logf) + 2⁻²³·(|m| + |lse|) (the
// roundings of m and of the sum).
func TestAttentionMMAForward(t *testing.T) {
	be := device(t)
	var launched []string
	defer cuda.OnLaunch(func(name string) { launched = append(launched, name) })()
	for _, c := range []struct {
		name     string
		d, hq, h int // head dimension, query heads, key/value heads
		causal   bool
		cu       []int32 // nil: one sequence of rows
		rows     int
		decode   []int32 // decode: cache lengths (one query per sequence), rows is the cache size
	}{
		{"d128-causal-gqa-ragged", 128, 4, 2, true, nil, 150, nil},
		{"d64-bidirectional-varlen", 64, 2, 1, false, []int32{0, 1, 66, 66, 131}, 131, nil},
		{"d80-causal-varlen", 80, 3, 3, true, []int32{0, 70, 77}, 77, nil},
		{"d40-causal", 40, 2, 2, true, nil, 20, nil},
		{"d20-bidirectional", 20, 2, 1, false, nil, 33, nil},
		{"d128-T1", 128, 2, 1, true, nil, 1, nil},
		{"d128-decode", 128, 4, 1, true, nil, 130, []int32{1, 64, 129}},
	} {
		t.Run(c.name, func(t *testing.T) {
			launched = launched[:0]
			r := rand.New(rand.NewPCG(uint64(c.d), uint64(c.rows)))
			bn := len(c.decode) // decode: sequences, each a cache of c.rows rows
			qRows, kRows := c.rows, c.rows
			if bn > 0 {
				qRows, kRows = bn, bn*c.rows
			}
			qv, kv, vv := bf16Rand(r, qRows*c.hq*c.d), bf16Rand(r, kRows*c.h*c.d), bf16Rand(r, kRows*c.h*c.d)
			put := func(v []tensor.BF16, shape ...int) *tensor.Tensor {
				return tensor.Must(tensor.To(be, tensor.Must(tensor.FromBF16(v, shape...))))
			}
			cfg := tensor.DefaultAttentionConfig(c.d, c.causal)
			out := tensor.Must(tensor.New(be, tensor.BFloat16, qRows, c.hq, c.d))
			var lse *tensor.Tensor
			// seqs: [q0, qn, k0, kn] per sequence, as the kernel reads them.
			var seqs [][4]int
			if bn > 0 {
				out = tensor.Must(tensor.New(be, tensor.BFloat16, bn, 1, c.hq, c.d))
				in := tensor.DecodeInputs{Q: put(qv, bn, 1, c.hq, c.d), KCache: put(kv, bn, c.rows, c.h, c.d),
					VCache: put(vv, bn, c.rows, c.h, c.d), Lens: upI(t, be, c.decode, bn)}
				if err := tensor.AttentionDecode(out, in, cfg); err != nil {
					t.Fatal(err)
				}
				for i, n := range c.decode {
					seqs = append(seqs, [4]int{i, 1, i * c.rows, int(n)})
				}
			} else {
				lse = tensor.Must(tensor.New(be, tensor.Float32, qRows, c.hq))
				in := tensor.AttentionInputs{Q: put(qv, qRows, c.hq, c.d), K: put(kv, kRows, c.h, c.d), V: put(vv, kRows, c.h, c.d)}
				if c.cu != nil {
					in.CuSeqlensQ, in.CuSeqlensK = upI(t, be, c.cu, len(c.cu)), upI(t, be, c.cu, len(c.cu))
					for i := 1; i < len(c.cu); i++ {
						n := int(c.cu[i] - c.cu[i-1])
						seqs = append(seqs, [4]int{int(c.cu[i-1]), n, int(c.cu[i-1]), n})
					}
				} else {
					seqs = [][4]int{{0, c.rows, 0, c.rows}}
				}
				if err := tensor.AttentionLSE(out, lse, in, cfg); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Contains(launched, "attention_mma_fwd_bf16") || slices.ContainsFunc(launched, func(n string) bool {
				return strings.HasPrefix(n, "attention_fwd_")
			}) {
				t.Fatalf("kernels launched: %v, want attention_mma_fwd_bf16 alone", launched)
			}
			gotOut := host(t, out)
			var gotLSE []float32
			if lse != nil {
				gotLSE = host(t, lse)
			}
			row := func(v []tensor.BF16, heads, i, h int) []float64 {
				x := make([]float64, c.d)
				for j := range x {
					x[j] = float64(v[(i*heads+h)*c.d+j].Float32())
				}
				return x
			}
			bad := 0
			for _, s := range seqs {
				for qi := range s[1] {
					for h := range c.hq {
						hk := h / (c.hq / c.h)
						var ks, vs [][]float64
						for kj := range s[3] {
							if !c.causal || kj <= qi+s[3]-s[1] {
								ks, vs = append(ks, row(kv, c.h, s[2]+kj, hk)), append(vs, row(vv, c.h, s[2]+kj, hk))
							}
						}
						ref := mmaRow(row(qv, c.hq, s[0]+qi, h), ks, vs, float64(cfg.Scale))
						e := 2*ref.ds + 2*0x1p-22 + 0x1p-16 + float64(2*((ref.n+15)/16))*mmaStep + float64(ref.n+(ref.n+63)/64+2)*f32Step
						at := (s[0]+qi)*c.hq + h
						for j := range c.d {
							g, w := float64(gotOut[at*c.d+j]), ref.out[j]
							if tol := e*ref.absOut[j] + 0x1p-8*(math.Abs(w)+e*ref.absOut[j]); !(math.Abs(g-w) <= tol) {
								if bad++; bad <= 3 {
									t.Errorf("out[row %d, head %d, %d] = %v, want %v within %.3g", s[0]+qi, h, j, g, w, tol)
								}
							}
						}
						if gotLSE != nil {
							tol := ref.ds + 0x1p-22 + float64(ref.n)*f32Step + 0x1p-22*math.Abs(ref.logL) + f32Step*(math.Abs(ref.m)+math.Abs(ref.lse))
							if g := float64(gotLSE[at]); !(math.Abs(g-ref.lse) <= tol) {
								if bad++; bad <= 3 {
									t.Errorf("lse[row %d, head %d] = %v, want %v within %.3g", s[0]+qi, h, g, ref.lse, tol)
								}
							}
						}
					}
				}
			}
			if bad > 0 {
				t.Fatalf("%d values outside the bound", bad)
			}
		})
	}
}

// TestAttentionMMABackward checks the tensor-core bfloat16 backward (attention_mma_dq_bwd_bf16,
// attention_mma_dkdv_bwd_bf16) — and that the backend runs it for bfloat16 — against the float64
// backward of the same bfloat16 inputs, fed the device's own rounded output as the backward
// reads it, over the shapes of TestAttentionMMAForward, with unit normal inputs. The bound is tensor/nntest's for
// bfloat16 attention: the float32 one, 1e-4·(1 + |w|), which the split of P and dS keeps, plus
// one bfloat16 rounding of the result, 2⁻⁸ of its magnitude.
func TestAttentionMMABackward(t *testing.T) {
	be := device(t)
	var launched []string
	defer cuda.OnLaunch(func(name string) { launched = append(launched, name) })()
	for _, c := range []struct {
		name     string
		d, hq, h int
		causal   bool
		cu       []int32
		rows     int
	}{
		{"d128-causal-gqa-ragged", 128, 4, 2, true, nil, 150},
		{"d64-bidirectional-varlen", 64, 2, 1, false, []int32{0, 1, 66, 66, 131}, 131},
		{"d80-causal-varlen", 80, 3, 3, true, []int32{0, 70, 77}, 77},
		{"d40-causal", 40, 2, 2, true, nil, 20},
		{"d20-bidirectional", 20, 2, 1, false, nil, 33},
		{"d128-T1", 128, 2, 1, true, nil, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c.d), uint64(c.rows)+1))
			n, nq, nk := c.rows, c.rows*c.hq*c.d, c.rows*c.h*c.d
			// unit normals, as in nntest, whose float32 bound the test borrows (it scales with the
			// magnitudes of the terms, which the power-of-two spread of bf16Rand would inflate)
			unit := func(m int) []tensor.BF16 {
				v := make([]tensor.BF16, m)
				for i := range v {
					v[i] = tensor.BF16FromFloat32(float32(r.NormFloat64()))
				}
				return v
			}
			qv, kv, vv, dov := unit(nq), unit(nk), unit(nk), unit(nq)
			put := func(v []tensor.BF16, heads int) *tensor.Tensor {
				return tensor.Must(tensor.To(be, tensor.Must(tensor.FromBF16(v, n, heads, c.d))))
			}
			zeros := func(heads int) *tensor.Tensor { return tensor.Must(tensor.New(be, tensor.BFloat16, n, heads, c.d)) }
			cfg := tensor.DefaultAttentionConfig(c.d, c.causal)
			in := tensor.AttentionInputs{Q: put(qv, c.hq), K: put(kv, c.h), V: put(vv, c.h)}
			seqs := []nnref.Seq{{Q0: 0, QN: n, K0: 0, KN: n}}
			if c.cu != nil {
				in.CuSeqlensQ, in.CuSeqlensK = upI(t, be, c.cu, len(c.cu)), upI(t, be, c.cu, len(c.cu))
				seqs = seqs[:0]
				for i := 1; i < len(c.cu); i++ {
					l := int(c.cu[i] - c.cu[i-1])
					seqs = append(seqs, nnref.Seq{Q0: int(c.cu[i-1]), QN: l, K0: int(c.cu[i-1]), KN: l})
				}
			}
			out, lse := zeros(c.hq), tensor.Must(tensor.New(be, tensor.Float32, n, c.hq))
			if err := tensor.AttentionLSE(out, lse, in, cfg); err != nil {
				t.Fatal(err)
			}
			launched = launched[:0]
			dq, dk, dv := zeros(c.hq), zeros(c.h), zeros(c.h)
			if err := tensor.AttentionBackward(dq, dk, dv, tensor.AttentionGrad{AttentionInputs: in, Out: out, LSE: lse, DOut: put(dov, c.hq)}, cfg); err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(launched, "attention_mma_dq_bwd_bf16") || !slices.Contains(launched, "attention_mma_dkdv_bwd_bf16") ||
				slices.ContainsFunc(launched, func(n string) bool {
					return strings.HasPrefix(n, "attention_dq_") || strings.HasPrefix(n, "attention_dkdv_")
				}) {
				t.Fatalf("kernels launched: %v, want the attention_mma_ backward", launched)
			}
			f64 := func(v []tensor.BF16) []float64 {
				x := make([]float64, len(v))
				for i, b := range v {
					x[i] = float64(b.Float32())
				}
				return x
			}
			widen := func(v []float32) []float64 {
				x := make([]float64, len(v))
				for i, f := range v {
					x[i] = float64(f)
				}
				return x
			}
			s := nnref.AttnShape{Hq: c.hq, Hkv: c.h, D: c.d, Causal: c.causal, Scale: float64(cfg.Scale)}
			q, k, v, do := f64(qv), f64(kv), f64(vv), f64(dov)
			wantOut, wantLSE := make([]float64, nq), make([]float64, n*c.hq)
			nnref.Attention(s, seqs, q, k, v, wantOut, wantLSE)
			wdq, wdk, wdv := make([]float64, nq), make([]float64, nk), make([]float64, nk)
			nnref.AttentionBackward(s, seqs, q, k, v, widen(host(t, out)), wantLSE, do, wdq, wdk, wdv)
			const rtol, atol = 1e-4, 1e-4
			for i, g := range []*tensor.Tensor{dq, dk, dv} {
				got, want := host(t, g), [][]float64{wdq, wdk, wdv}[i]
				bad := 0
				for j, w := range want {
					f := atol + rtol*math.Abs(w)
					if e := math.Abs(float64(got[j]) - w); !(e <= f+0x1p-8*(math.Abs(w)+f)) {
						if bad++; bad <= 3 {
							t.Errorf("%s[%d] = %v, want %v", []string{"dq", "dk", "dv"}[i], j, got[j], w)
						}
					}
				}
				if bad > 0 {
					t.Fatalf("%s: %d of %d values outside the bound", []string{"dq", "dk", "dv"}[i], bad, len(want))
				}
			}
		})
	}
}

// TestAttentionMMAOff runs tensor/nntest's attention suite with bfloat16 on the scalar kernels
// of attention.cu (which the backend otherwise keeps for head dimensions over 128): the
// implementation the tensor-core kernels replaced stays tested against the same reference.
func TestAttentionMMAOff(t *testing.T) {
	be := device(t)
	defer cuda.ScalarBF16Attention()()
	nntest.Attention(t, be)
}
