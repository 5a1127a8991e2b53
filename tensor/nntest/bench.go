package nntest

import (
	"fmt"
	"testing"
	"time"

	"github.com/mtrl-go/mtrl/internal/cputime"
	"github.com/mtrl-go/mtrl/tensor"
)

// Benchmarks of the op families at model shapes, for any backend: the CPU's in package tensor
// (compared with PyTorch by scripts/ops-vs-torch), the CUDA backend's in package cuda
// (scripts/ops-gpu-bench, next to the roofline of scripts/ops_roofline.py). Each sub-benchmark
// is named after its op and shape and reports, besides ns/op and B/op (bytes allocated on the
// host per call):
//
//	GFLOP/s       the op's floating-point work per wall-second (matmuls as 2·M·N·K);
//	GB/s          its compulsory memory traffic per wall-second (each input read once, each
//	              output written once; for Linear, also weight-GB/s: the weight alone);
//	cpu-ns/op     the host process's CPU time per call: on the CPU backend work per
//	              CPU-second is the per-core rate, steady on a shared, loaded machine.
//
// The backend is synchronised after every call, so a device's queued work is timed.

// LinearShape is y [M, N] = x [M, K] · Wᵀ with W [N, K] (a Hugging Face weight).
type LinearShape struct{ M, K, N int }

// AttentionShape is one causal sequence of T tokens, Hq query heads sharing Hkv key/value heads
// of dimension D.
type AttentionShape struct{ T, Hq, Hkv, D int }

// measure times fn (then Sync) per benchmark iteration and reports the metrics above.
func measure(b *testing.B, be tensor.Backend, flops, bytes float64, fn func() error) {
	b.Helper()
	if err := fn(); err != nil { // warm-up: packing on first use, device scratch, page faults
		b.Fatal(err)
	}
	if err := be.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0, cpuOK := cputime.Process()
	for b.Loop() {
		if err := fn(); err != nil {
			b.Fatal(err)
		}
		if err := be.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	if flops > 0 {
		b.ReportMetric(flops/sec/1e9, "GFLOP/s")
	}
	b.ReportMetric(bytes/sec/1e9, "GB/s")
	if cpu1, ok := cputime.Process(); cpuOK && ok {
		cpu := (cpu1 - cpu0) / time.Duration(b.N)
		b.ReportMetric(float64(cpu.Nanoseconds()), "cpu-ns/op")
		if flops > 0 && cpu > 0 {
			b.ReportMetric(flops/cpu.Seconds()/1e9, "GFLOP/cpu-s")
		}
	}
}

// BenchLinear times tensor.Linear with the weight packed once (PackWeight) in dtype (float32 or
// bfloat16 for x and W; y float32), and reports weight-GB/s, the weight bytes per second: the
// figure to hold against streaming read for decode (small M).
func BenchLinear(b *testing.B, be tensor.Backend, dt tensor.DType, shapes ...LinearShape) {
	for _, s := range shapes {
		b.Run(fmt.Sprintf("linear/%v/M=%d/K=%d/N=%d", dt, s.M, s.K, s.N), func(b *testing.B) {
			e := newEnv(b, be, 1)
			bf16 := dt == tensor.BFloat16
			w, err := tensor.PackWeight(e.put(e.randn(s.N*s.K, 0.02, bf16), bf16, s.N, s.K))
			e.ok(err)
			x, y := e.put(e.randn(s.M*s.K, 1, bf16), bf16, s.M, s.K), e.zeros(s.M, s.N)
			sz := float64(dt.Size())
			wBytes := sz * float64(s.N*s.K)
			measure(b, be, 2*float64(s.M*s.N*s.K), wBytes+sz*float64(s.M*s.K)+4*float64(s.M*s.N),
				func() error { return tensor.Linear(y, x, w) })
			b.ReportMetric(wBytes/(b.Elapsed().Seconds()/float64(b.N))/1e9, "weight-GB/s")
		})
	}
}

// AttentionFlops is the work of causal attention over one sequence: Q·Kᵀ and P·V, 2·D flops per
// visible (query, key) pair each, T·(T+1)/2 pairs per query head (the softmax not counted).
func AttentionFlops(s AttentionShape) float64 {
	return 4 * float64(s.D) * float64(s.Hq) * float64(s.T) * float64(s.T+1) / 2
}

// BenchAttention times causal tensor.Attention (forward) and, with backward, AttentionLSE plus
// AttentionBackward (counted as 3.5× the forward's flops: the backward recomputes Q·Kᵀ and runs
// four more products, FlashAttention's accounting), in float32.
func BenchAttention(b *testing.B, be tensor.Backend, backward bool, shapes ...AttentionShape) {
	BenchAttentionDType(b, be, tensor.Float32, backward, shapes...)
}

// BenchAttentionDType is BenchAttention with Q, K, V, the output and the gradients of dtype dt
// (float32 or bfloat16; lse is float32). bfloat16 runs are named attention/<pass>/bfloat16/...,
// float32 ones as BenchAttention's.
func BenchAttentionDType(b *testing.B, be tensor.Backend, dt tensor.DType, backward bool, shapes ...AttentionShape) {
	pass := "fwd"
	if backward {
		pass = "fwd+bwd"
	}
	bf := dt == tensor.BFloat16
	if bf {
		pass += "/bfloat16"
	}
	zeros := func(e env, shape ...int) *tensor.Tensor {
		d, err := tensor.New(be, dt, shape...)
		e.ok(err)
		return d
	}
	for _, s := range shapes {
		b.Run(fmt.Sprintf("attention/%s/T=%d/Hq=%d/Hkv=%d/D=%d", pass, s.T, s.Hq, s.Hkv, s.D), func(b *testing.B) {
			e := newEnv(b, be, 2)
			q := e.put(e.randn(s.T*s.Hq*s.D, 1, bf), bf, s.T, s.Hq, s.D)
			k := e.put(e.randn(s.T*s.Hkv*s.D, 1, bf), bf, s.T, s.Hkv, s.D)
			v := e.put(e.randn(s.T*s.Hkv*s.D, 1, bf), bf, s.T, s.Hkv, s.D)
			out, lse := zeros(e, s.T, s.Hq, s.D), e.zeros(s.T, s.Hq)
			in, cfg := tensor.AttentionInputs{Q: q, K: k, V: v}, tensor.DefaultAttentionConfig(s.D, true)
			sz := float64(dt.Size())
			qo, kv := float64(s.T*s.Hq*s.D), float64(s.T*s.Hkv*s.D)
			if !backward {
				measure(b, be, AttentionFlops(s), sz*(2*qo+2*kv), func() error { return tensor.Attention(out, in, cfg) })
				return
			}
			dout := e.put(e.randn(s.T*s.Hq*s.D, 1, bf), bf, s.T, s.Hq, s.D)
			dq, dk, dv := zeros(e, s.T, s.Hq, s.D), zeros(e, s.T, s.Hkv, s.D), zeros(e, s.T, s.Hkv, s.D)
			// forward: q, k, v in, out and lse out; backward: q, k, v, out, dout in, dq, dk, dv out
			// (lse, float32 in either dtype, counted at the element size: a rounding error)
			measure(b, be, 3.5*AttentionFlops(s), sz*(2*qo+2*kv+3*qo+2*kv+qo+2*kv), func() error {
				if err := tensor.AttentionLSE(out, lse, in, cfg); err != nil {
					return err
				}
				return tensor.AttentionBackward(dq, dk, dv, tensor.AttentionGrad{AttentionInputs: in, Out: out, LSE: lse, DOut: dout}, cfg)
			})
		})
	}
}

// LMHeadFlops is the fused LM head's GEMM work for n tokens, hidden size d and vocabulary v: the
// logits (2·n·v·d) for the forward; with backward 4·2·n·v·d: the logits, recomputed once, then
// dhidden and dweight, the least a head that never stores the logits computes (the CPU kernel
// recomputes them twice, so its GFLOP/s understate its rate by 5/4).
func LMHeadFlops(n, d, v int, backward bool) float64 {
	f := 2 * float64(n) * float64(v) * float64(d)
	if backward {
		return 4 * f
	}
	return f
}

// BenchLMHead times the fused LM head (LMHeadLogProbs, and with backward LMHeadBackward with
// gradients into both the log-probs and the entropies) in dtype, for n tokens of hidden size d
// and a vocabulary of v; it also reports tokens/s.
func BenchLMHead(b *testing.B, be tensor.Backend, dt tensor.DType, backward bool, n, d, v int) {
	pass := "fwd"
	if backward {
		pass = "fwd+bwd"
	}
	b.Run(fmt.Sprintf("lmhead/%s/%v/N=%d/D=%d/V=%d", pass, dt, n, d, v), func(b *testing.B) {
		e := newEnv(b, be, 3)
		bf16 := dt == tensor.BFloat16
		w, err := tensor.PackWeight(e.put(e.randn(v*d, 0.02, bf16), bf16, v, d))
		e.ok(err)
		ys := make([]int32, n)
		for i := range ys {
			ys[i] = int32(e.r.IntN(v))
		}
		in := tensor.LMHeadInputs{Hidden: e.put(e.randn(n*d, 1, bf16), bf16, n, d), Weight: w, Targets: e.i32(ys, n), Temperature: 1}
		lp, ent := e.zeros(n), e.zeros(n)
		wBytes, hBytes := float64(dt.Size()*v*d), float64(dt.Size()*n*d)
		if !backward {
			measure(b, be, LMHeadFlops(n, d, v, false), wBytes+hBytes, func() error { return tensor.LMHeadLogProbs(lp, ent, in) })
		} else {
			dh, dw := e.zeros(n, d), e.zeros(v, d)
			g := tensor.LMHeadGrad{LMHeadInputs: in, LogProbs: lp, Entropy: ent,
				DLogProbs: e.f32(e.randn(n, 1, false), n), DEntropy: e.f32(e.randn(n, 1, false), n)}
			measure(b, be, LMHeadFlops(n, d, v, true), 3*wBytes+4*hBytes+4*float64(v*d), func() error {
				if err := tensor.LMHeadLogProbs(lp, ent, in); err != nil {
					return err
				}
				return tensor.LMHeadBackward(dh, dw, g)
			})
		}
		b.ReportMetric(float64(n)/(b.Elapsed().Seconds()/float64(b.N)), "tokens/s")
	})
}

// rowEnv holds a benchmark's inputs and names its sub-benchmarks.
type rowEnv struct {
	env
	b  *testing.B
	be tensor.Backend
}

func (r rowEnv) run(name string, flops, bytes float64, fn func() error) {
	r.b.Run(name, func(b *testing.B) { measure(b, r.be, flops, bytes, fn) })
}

// BenchNorm times RMSNorm and its backward (weight [d], gradient into x and the weight) on rows × d
// float32 values.
func BenchNorm(b *testing.B, be tensor.Backend, rows, d int) {
	r := rowEnv{newEnv(b, be, 4), b, be}
	n := rows * d
	f := float64(4 * n) // bytes of one [rows, d] float32 tensor
	x, dy, y := r.f32(r.randn(n, 1, false), rows, d), r.f32(r.randn(n, 1, false), rows, d), r.zeros(rows, d)
	w, dw := r.f32(r.randn(d, 1, false), d), r.zeros(d)
	shape := fmt.Sprintf("rows=%d/d=%d", rows, d)
	r.run("rmsnorm/fwd/"+shape, 4*float64(n), 2*f, func() error { return tensor.RMSNorm(y, x, w, 1e-6) })
	r.run("rmsnorm/bwd/"+shape, 8*float64(n), 3*f, func() error {
		return tensor.RMSNormBackward(y, dw, tensor.NormGrad{X: x, Weight: w, DY: dy, Eps: 1e-6})
	})
}

// BenchRoPE times RoPE and its backward on [rows, heads, headDim] float32 (positions 0…rows−1,
// Qwen2's θ = 10⁶).
func BenchRoPE(b *testing.B, be tensor.Backend, rows, heads, headDim int) {
	r := rowEnv{newEnv(b, be, 5), b, be}
	n := rows * heads * headDim
	x, y := r.f32(r.randn(n, 1, false), rows, heads, headDim), r.zeros(rows, heads, headDim)
	pos := make([]int32, rows)
	for i := range pos {
		pos[i] = int32(i)
	}
	positions, cfg := r.i32(pos, rows), tensor.RoPEConfig{Theta: 1e6}
	shape := fmt.Sprintf("rows=%d/heads=%d/D=%d", rows, heads, headDim)
	// 3 flops per element (two products and a sum; cos and sin amortised over heads); x read, y written
	r.run("rope/fwd/"+shape, 3*float64(n), 8*float64(n), func() error { return tensor.RoPE(y, x, positions, cfg) })
	r.run("rope/bwd/"+shape, 3*float64(n), 8*float64(n), func() error {
		return tensor.RoPEBackward(y, tensor.RoPEGrad{DY: x, Positions: positions, Config: cfg})
	})
}

// BenchSwiGLU times SwiGLU (silu(gate)·up) and its backward on gate and up [rows, m] float32.
func BenchSwiGLU(b *testing.B, be tensor.Backend, rows, m int) {
	r := rowEnv{newEnv(b, be, 6), b, be}
	n := rows * m
	f := float64(4 * n)
	gate, up, y, dup := r.f32(r.randn(n, 1, false), rows, m), r.f32(r.randn(n, 1, false), rows, m), r.zeros(rows, m), r.zeros(rows, m)
	shape := fmt.Sprintf("rows=%d/m=%d", rows, m)
	r.run("swiglu/fwd/"+shape, 5*float64(n), 3*f, func() error { return tensor.SwiGLU(y, gate, up) })
	r.run("swiglu/bwd/"+shape, 10*float64(n), 5*f, func() error {
		return tensor.SwiGLUBackward(y, dup, tensor.SwiGLUGrad{Gate: gate, Up: up, DY: up})
	})
}

// BenchAdamW times one AdamW step (torch's defaults, float32 master weights, no bfloat16 copy)
// over n parameters: parameter, gradient and both moments read, parameter and moments written.
func BenchAdamW(b *testing.B, be tensor.Backend, n int) {
	r := rowEnv{newEnv(b, be, 7), b, be}
	p := tensor.AdamWParams{Param: r.f32(r.randn(n, 0.02, false), n), Grad: r.f32(r.randn(n, 1e-3, false), n),
		ExpAvg: r.zeros(n), ExpAvgSq: r.zeros(n)}
	step, cfg := 0, tensor.DefaultAdamWConfig(1e-5)
	r.run(fmt.Sprintf("adamw/n=%d", n), 14*float64(n), 28*float64(n), func() error {
		step++
		return tensor.AdamWStep(p, step, cfg)
	})
}
