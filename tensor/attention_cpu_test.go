package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mtrl-go/mtrl/internal/asmcheck"
	"github.com/mtrl-go/mtrl/internal/cputime"
	"github.com/mtrl-go/mtrl/internal/nnref"
)

// TestAttentionAsmUpToDate fails when attention_amd64.s or attention_stub_amd64.go differ from
// what internal/asmgen generates: edit the generator, then run go generate ./tensor.
func TestAttentionAsmUpToDate(t *testing.T) { asmcheck.UpToDate(t, "attention", "tensor") }

// TestAttentionRowKernelsVsGo checks the vector row kernels against their pure-Go twins: the
// running-maximum rule (kept, moved past tau, first tile from −Inf), the exps and sums, and
// the backward row, on rows with large, small and masked (−Inf) scores.
func TestAttentionRowKernelsVsGo(t *testing.T) {
	impls := attnImpls.SIMD()
	if len(impls) == 0 {
		t.Skip("no SIMD implementation in this build or on this CPU (pure Go only)")
	}
	r := rand.New(rand.NewPCG(5, 6))
	close := func(a, b float32) bool {
		return a == b || math.Abs(float64(a-b)) <= 4e-7*math.Abs(float64(b))+1e-37
	}
	for _, im := range impls {
		for _, n := range []int{16, 32, 64, 128} {
			for _, m := range []float32{float32(math.Inf(-1)), -3, 0, 2, 40} {
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(r.NormFloat64() * 4)
				}
				x[n/2] = float32(math.Inf(-1))
				want := slices.Clone(x)
				wm, ws := softmaxRowGo(want, m, attnTau)
				gm, gs := im.Kernels.softmax(x, m, attnTau)
				// the sums add the same terms in a different order: n float32 roundings apart
				if gm != wm || !(math.Abs(float64(gs-ws)) <= float64(n)*0x1p-24*float64(ws)) {
					t.Fatalf("%s n=%d m=%v: softmax returned (%v, %v), want (%v, %v)", im.Name, n, m, gm, gs, wm, ws)
				}
				for i := range x {
					if !close(x[i], want[i]) {
						t.Fatalf("%s n=%d m=%v: x[%d] = %v, want %v", im.Name, n, m, i, x[i], want[i])
					}
				}
			}
			p, dp, lse, dlt := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
			for i := range p {
				p[i], dp[i] = float32(r.NormFloat64()*3), float32(r.NormFloat64())
				lse[i], dlt[i] = p[i]+float32(r.ExpFloat64()*5), float32(r.NormFloat64())
			}
			wp, wdp := slices.Clone(p), slices.Clone(dp)
			restore := attnImpls.Use("go")
			bwdRow(wp, wdp, lse, dlt)
			restore()
			im.Kernels.bwd(p, dp, lse, dlt)
			for i := range p {
				if !close(p[i], wp[i]) || !close(dp[i], wdp[i]) {
					t.Fatalf("%s n=%d: bwd row %d = (%v, %v), want (%v, %v)", im.Name, n, i, p[i], dp[i], wp[i], wdp[i])
				}
			}
		}
	}
}

// attnCase is one attention call on host slices and its float64 reference.
type attnCase struct {
	name string
	s    nnref.AttnShape
	seqs []nnref.Seq
	tq   int
	tk   int
}

func attnCases() []attnCase {
	seq := func(q0, qn, k0, kn int) nnref.Seq { return nnref.Seq{Q0: q0, QN: qn, K0: k0, KN: kn} }
	return []attnCase{
		// several key panels and query blocks, GQA of 7 (blocks cut through a token's heads)
		{"causal-gqa7-d64", nnref.AttnShape{Hq: 14, Hkv: 2, D: 64, Causal: true}, []nnref.Seq{seq(0, 150, 0, 150)}, 150, 150},
		// head dimension past the AVX-512 width (the AVX2 and pure-Go rest columns)
		{"causal-d80", nnref.AttnShape{Hq: 2, Hkv: 1, D: 80, Causal: true}, []nnref.Seq{seq(0, 70, 0, 70)}, 70, 70},
		{"bidirectional-d24", nnref.AttnShape{Hq: 4, Hkv: 4, D: 24}, []nnref.Seq{seq(0, 33, 0, 140)}, 33, 140},
		// decode: one query token of 7 heads over a cache (the unpacked path), and 3 draft tokens
		{"decode-gqa7", nnref.AttnShape{Hq: 14, Hkv: 2, D: 64, Causal: true}, []nnref.Seq{seq(0, 1, 0, 130), seq(1, 3, 130, 67)}, 4, 197},
		// decode with a head dimension that is not a multiple of 4, and queries that see no key
		{"decode-d18-empty", nnref.AttnShape{Hq: 3, Hkv: 1, D: 18, Causal: true}, []nnref.Seq{seq(0, 4, 0, 2), seq(4, 2, 2, 300)}, 6, 302},
		// a cached prefix (fewer queries than keys), more queries than keys, an empty sequence
		{"varlen-causal", nnref.AttnShape{Hq: 6, Hkv: 2, D: 32, Causal: true},
			[]nnref.Seq{seq(0, 5, 0, 130), seq(5, 90, 130, 20), seq(95, 0, 150, 7), seq(95, 65, 157, 65)}, 160, 222},
	}
}

func (c attnCase) inputs(seed uint64) (q, k, v, dout []float32) {
	r := rand.New(rand.NewPCG(seed, 7))
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	s := c.s
	return fill(c.tq * s.Hq * s.D), fill(c.tk * s.Hkv * s.D), fill(c.tk * s.Hkv * s.D), fill(c.tq * s.Hq * s.D)
}

func f64s(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// TestAttentionCPUVsReference checks the tiled kernels, forward and backward, against the
// float64 reference at shapes the conformance suite does not reach: head dimensions that are
// not a multiple of the micro-kernel width, GQA groups that do not divide a block, cached
// prefixes and queries that see no key. Every SIMD implementation and the pure-Go twins run.
func TestAttentionCPUVsReference(t *testing.T) {
	for _, c := range attnCases() {
		for _, name := range attnImpls.Names() {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				defer attnImpls.Use(name)()
				s := c.s
				s.Scale = 1 / math.Sqrt(float64(s.D))
				q, k, v, dout := c.inputs(1)
				out, lse := make([]float32, len(q)), make([]float32, c.tq*s.Hq)
				attentionCPU(s, c.seqs, q, k, v, out, lse)
				dq, dk, dv := make([]float32, len(q)), make([]float32, len(k)), make([]float32, len(v))
				attentionBackwardCPU(s, c.seqs, q, k, v, out, lse, dout, dq, dk, dv)

				q6, k6, v6, do6 := f64s(q), f64s(k), f64s(v), f64s(dout)
				wout, wlse := make([]float64, len(q)), make([]float64, len(lse))
				nnref.Attention(s, c.seqs, q6, k6, v6, wout, wlse)
				wdq, wdk, wdv := make([]float64, len(q)), make([]float64, len(k)), make([]float64, len(v))
				nnref.AttentionBackward(s, c.seqs, q6, k6, v6, wout, wlse, do6, wdq, wdk, wdv)
				for i, w := range [][]float64{wout, wlse, wdq, wdk, wdv} {
					got := [][]float32{out, lse, dq, dk, dv}[i]
					name := []string{"out", "lse", "dq", "dk", "dv"}[i]
					for j := range w {
						g := float64(got[j])
						if math.IsInf(w[j], -1) && math.IsInf(g, -1) {
							continue
						}
						if !(math.Abs(g-w[j]) <= 1e-4+1e-4*math.Abs(w[j])) {
							t.Fatalf("%s[%d] = %.7g, want %.7g", name, j, g, w[j])
						}
					}
				}
			})
		}
	}
}

// TestAttentionBF16IsRoundedF32 checks the bfloat16 kernels (forward on both paths, backward)
// against their definition: the float32 kernels on the widened inputs, each output rounded to
// nearest even once. The float32 kernels run in the same order on the same values, so the two
// agree bit for bit; the conformance suite (tensor/nntest) holds both to the float64 reference.
func TestAttentionBF16IsRoundedF32(t *testing.T) {
	round := func(x []float32) []BF16 {
		out := make([]BF16, len(x))
		for i, v := range x {
			out[i] = BF16FromFloat32(v)
		}
		return out
	}
	widen := func(x []BF16) []float32 {
		out := make([]float32, len(x))
		for i, v := range x {
			out[i] = v.Float32()
		}
		return out
	}
	for _, c := range attnCases() {
		for _, name := range attnImpls.Names() {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				defer attnImpls.Use(name)()
				s := c.s
				s.Scale = 1 / math.Sqrt(float64(s.D))
				q32, k32, v32, do32 := c.inputs(5)
				q, k, v, dout := round(q32), round(k32), round(v32), round(do32)
				q32, k32, v32, do32 = widen(q), widen(k), widen(v), widen(dout)
				check := func(what string, got []BF16, want []float32) {
					t.Helper()
					for i, w := range round(want) {
						if got[i] != w {
							t.Fatalf("%s[%d] = %#04x (%v), want %#04x (%v)", what, i, got[i], got[i].Float32(), w, w.Float32())
						}
					}
				}
				checkF := func(what string, got, want []float32) {
					t.Helper()
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
						}
					}
				}
				for _, path := range []string{"auto", "packed", "decode"} {
					if path == "decode" && !slices.ContainsFunc(c.seqs, func(q nnref.Seq) bool { return q.QN > 0 && q.QN <= 4 }) {
						continue
					}
					out, lse := make([]BF16, len(q)), make([]float32, c.tq*s.Hq)
					wout, wlse := make([]float32, len(q)), make([]float32, c.tq*s.Hq)
					switch path {
					case "auto":
						attentionCPU(s, c.seqs, q, k, v, out, lse)
						attentionCPU(s, c.seqs, q32, k32, v32, wout, wlse)
					case "packed":
						attentionPackedCPU(s, c.seqs, q, k, v, out, lse)
						attentionPackedCPU(s, c.seqs, q32, k32, v32, wout, wlse)
					case "decode":
						attentionDecodeCPU(s, c.seqs, q, k, v, out, lse)
						attentionDecodeCPU(s, c.seqs, q32, k32, v32, wout, wlse)
					}
					check(path+" out", out, wout)
					checkF(path+" lse", lse, wlse)
					if path != "auto" {
						continue
					}
					dq, dk, dv := make([]BF16, len(q)), make([]BF16, len(k)), make([]BF16, len(v))
					attentionBackwardCPU(s, c.seqs, q, k, v, out, lse, dout, dq, dk, dv)
					wdq, wdk, wdv := make([]float32, len(q)), make([]float32, len(k)), make([]float32, len(v))
					attentionBackwardCPU(s, c.seqs, q32, k32, v32, widen(out), lse, do32, wdq, wdk, wdv)
					check("dq", dq, wdq)
					check("dk", dk, wdk)
					check("dv", dv, wdv)
				}
			})
		}
	}
}

// TestAttentionDecodeVsPacked checks the unpacked decode path against the packed tiles on the
// decode-shaped calls (a few queries per sequence), GQA included: both are float32 with different
// summation orders, so they agree to float32 rounding, not bits.
func TestAttentionDecodeVsPacked(t *testing.T) {
	for _, c := range attnCases() {
		if !slices.ContainsFunc(c.seqs, func(q nnref.Seq) bool { return q.QN > 0 && q.QN <= 4 }) {
			continue
		}
		for _, name := range attnImpls.Names() {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				defer attnImpls.Use(name)()
				s := c.s
				s.Scale = 1 / math.Sqrt(float64(s.D))
				q, k, v, _ := c.inputs(4)
				out, lse := make([]float32, len(q)), make([]float32, c.tq*s.Hq)
				wout, wlse := make([]float32, len(q)), make([]float32, c.tq*s.Hq)
				attentionDecodeCPU(s, c.seqs, q, k, v, out, lse)
				attentionPackedCPU(s, c.seqs, q, k, v, wout, wlse)
				for i, w := range [][]float32{wout, wlse} {
					got := [][]float32{out, lse}[i]
					for j := range w {
						g, w := float64(got[j]), float64(w[j])
						if math.IsInf(w, -1) && math.IsInf(g, -1) {
							continue
						}
						if !(math.Abs(g-w) <= 1e-5+1e-5*math.Abs(w)) {
							t.Fatalf("%s[%d] = %.7g, packed %.7g", []string{"out", "lse"}[i], j, g, w)
						}
					}
				}
			})
		}
	}
}

// TestAttentionBackwardSchedules checks that the two backward schedules (one pass per sequence
// and key/value head; split dK/dV and dQ passes) give the same bits, so the result does not
// depend on GOMAXPROCS, and that dK and dV rows of keys no query sees are overwritten.
func TestAttentionBackwardSchedules(t *testing.T) {
	defer func(f func() int) { attnWorkers = f }(attnWorkers)
	for _, c := range attnCases() {
		t.Run(c.name, func(t *testing.T) {
			s := c.s
			s.Scale = 1 / math.Sqrt(float64(s.D))
			q, k, v, dout := c.inputs(2)
			out, lse := make([]float32, len(q)), make([]float32, c.tq*s.Hq)
			attentionCPU(s, c.seqs, q, k, v, out, lse)
			var got [2][][]float32
			for i, w := range []int{1, 1 << 20} {
				attnWorkers = func() int { return w }
				dq, dk, dv := make([]float32, len(q)), make([]float32, len(k)), make([]float32, len(v))
				for _, x := range [][]float32{dq, dk, dv} {
					for j := range x {
						x[j] = float32(math.NaN())
					}
				}
				attentionBackwardCPU(s, c.seqs, q, k, v, out, lse, dout, dq, dk, dv)
				got[i] = [][]float32{dq, dk, dv}
			}
			for i, name := range []string{"dq", "dk", "dv"} {
				a, b := got[0][i], got[1][i]
				for j := range a {
					if math.Float32bits(a[j]) != math.Float32bits(b[j]) {
						t.Fatalf("%s[%d]: one pass %v, split passes %v", name, j, a[j], b[j])
					}
				}
			}
		})
	}
}

// BenchmarkAttentionDecode is one decode step (one new token) over a cache of L positions,
// 0.5B's heads (and the toy VLM's batch of 64 sequences of 40 positions, four heads of 16):
// what a generation step pays per layer, on the unpacked decode path that
// attentionCPU takes and on the packed tiles it replaced, float32 and bfloat16 (-bf16).
func BenchmarkAttentionDecode(b *testing.B) {
	toy := attnCase{name: "vlm-rows=64-L=40", s: nnref.AttnShape{Hq: 4, Hkv: 4, D: 16, Causal: true, Scale: 0.25}, tq: 64, tk: 64 * 40}
	for i := range 64 {
		toy.seqs = append(toy.seqs, nnref.Seq{Q0: i, QN: 1, K0: i * 40, KN: 40})
	}
	cases := []attnCase{toy}
	for _, l := range []int{128, 1024} {
		s := nnref.AttnShape{Hq: 14, Hkv: 2, D: 64, Causal: true, Scale: 0.125}
		cases = append(cases, attnCase{fmt.Sprintf("L=%d", l), s, []nnref.Seq{{Q0: 0, QN: 1, K0: 0, KN: l}}, 1, 2048})
	}
	mha := nnref.AttnShape{Hq: 14, Hkv: 14, D: 64, Causal: true, Scale: 0.125}
	cases = append(cases, attnCase{"mha-L=1024", mha, []nnref.Seq{{Q0: 0, QN: 1, K0: 0, KN: 1024}}, 1, 1024})
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s := c.s
			q, k, v, _ := c.inputs(3)
			out := make([]float32, len(q))
			bf := func(x []float32) []BF16 {
				out := make([]BF16, len(x))
				for i, v := range x {
					out[i] = BF16FromFloat32(v)
				}
				return out
			}
			q16, k16, v16, out16 := bf(q), bf(k), bf(v), bf(out)
			for _, path := range []struct {
				name string
				f    func(nnref.AttnShape, []nnref.Seq, []float32, []float32, []float32, []float32, []float32)
			}{{"decode", attentionDecodeCPU[float32]}, {"decode-bf16", func(s nnref.AttnShape, seqs []nnref.Seq, _, _, _, _, lse []float32) {
				attentionDecodeCPU(s, seqs, q16, k16, v16, out16, lse)
			}}, {"packed", attentionPackedCPU[float32]}, {"packed-bf16", func(s nnref.AttnShape, seqs []nnref.Seq, _, _, _, _, lse []float32) {
				attentionPackedCPU(s, seqs, q16, k16, v16, out16, lse)
			}}} {
				b.Run(path.name, func(b *testing.B) {
					b.ReportAllocs()
					cpu0, _ := cputime.Process()
					for b.Loop() {
						path.f(s, c.seqs, q, k, v, out, nil)
					}
					if cpu1, ok := cputime.Process(); ok {
						b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
					}
				})
			}
		})
	}
}

// BenchmarkAttentionDecodeRef is BenchmarkAttentionDecode on the scalar float32 reference
// (internal/nnref), the CPU kernel before the tiled one: what a decode step used to cost.
func BenchmarkAttentionDecodeRef(b *testing.B) {
	for _, l := range []int{128, 1024} {
		b.Run(fmt.Sprintf("L=%d", l), func(b *testing.B) {
			s := nnref.AttnShape{Hq: 14, Hkv: 2, D: 64, Causal: true, Scale: 0.125}
			c := attnCase{s: s, seqs: []nnref.Seq{{Q0: 0, QN: 1, K0: 0, KN: l}}, tq: 1, tk: 2048}
			q, k, v, _ := c.inputs(3)
			out := make([]float32, len(q))
			cpu0, _ := cputime.Process()
			for b.Loop() {
				nnref.Attention(s, c.seqs, q, k, v, out, nil)
			}
			if cpu1, ok := cputime.Process(); ok {
				b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

// TestAttentionCPUDegenerate runs shapes with nothing to do: head dimension 0, no query heads,
// no tokens. Outputs must be written (zeros, lse −Inf where a query sees nothing) without a
// panic, as the reference does.
func TestAttentionCPUDegenerate(t *testing.T) {
	for _, c := range []attnCase{
		{"d0", nnref.AttnShape{Hq: 2, Hkv: 1, D: 0, Causal: true, Scale: 1}, []nnref.Seq{{Q0: 0, QN: 5, K0: 0, KN: 5}}, 5, 5},
		{"hq0", nnref.AttnShape{Hq: 0, Hkv: 1, D: 8, Causal: true, Scale: 1}, []nnref.Seq{{Q0: 0, QN: 5, K0: 0, KN: 5}}, 5, 5},
		{"t0", nnref.AttnShape{Hq: 2, Hkv: 1, D: 8, Causal: true, Scale: 1}, []nnref.Seq{{Q0: 0, QN: 0, K0: 0, KN: 0}}, 0, 0},
		{"no-keys", nnref.AttnShape{Hq: 2, Hkv: 1, D: 8, Scale: 1}, []nnref.Seq{{Q0: 0, QN: 3, K0: 0, KN: 0}}, 3, 0},
		{"no-keys-last-gqa", nnref.AttnShape{Hq: 4, Hkv: 2, D: 8, Causal: true, Scale: 1},
			[]nnref.Seq{{Q0: 0, QN: 3, K0: 0, KN: 5}, {Q0: 3, QN: 2, K0: 5, KN: 0}}, 5, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			q, k, v, dout := c.inputs(4)
			s := c.s
			out, lse := make([]float32, len(q)), make([]float32, c.tq*s.Hq)
			for i := range out {
				out[i] = 7
			}
			attentionCPU(s, c.seqs, q, k, v, out, lse)
			dq, dk, dv := make([]float32, len(q)), make([]float32, len(k)), make([]float32, len(v))
			attentionBackwardCPU(s, c.seqs, q, k, v, out, lse, dout, dq, dk, dv)
			wout, wlse := make([]float64, len(q)), make([]float64, len(lse))
			nnref.Attention(s, c.seqs, f64s(q), f64s(k), f64s(v), wout, wlse)
			for i := range wout {
				if !(math.Abs(float64(out[i])-wout[i]) <= 1e-5*(1+math.Abs(wout[i]))) {
					t.Fatalf("out[%d] = %v, want %v", i, out[i], wout[i])
				}
			}
			for i, w := range wlse {
				if g := float64(lse[i]); !(g == w || math.Abs(g-w) <= 1e-6*math.Abs(w)) {
					t.Fatalf("lse[%d] = %v, want %v", i, g, w)
				}
			}
		})
	}
}
