package tensor_test

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mtrl-go/mtrl/internal/cputime"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/nntest"
)

// The CPU side of scripts/ops-vs-torch (docs/2026-11-ops-vs-torch.md): the ops at Qwen2.5
// shapes, run with -bench 'BenchmarkOps'. Sizes are those of the issue: 0.5B (hidden 896, MLP
// 4864, 14 query heads and 2 key/value heads of 64) and 7B (hidden 3584, MLP 18944).

// BenchmarkOpsGEMM is Linear at prefill (2048 tokens): 0.5B's MLP up and down, 7B's MLP up,
// float32 and bfloat16 (input and weight: VDPBF16PS where the CPU has AVX512_BF16).
func BenchmarkOpsGEMM(b *testing.B) {
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		nntest.BenchLinear(b, tensor.CPU(), dt,
			nntest.LinearShape{M: 2048, K: 896, N: 4864}, nntest.LinearShape{M: 2048, K: 4864, N: 896},
			nntest.LinearShape{M: 2048, K: 3584, N: 18944})
	}
}

// BenchmarkOpsDecode is Linear at decode (M = 1…32 rows) through 7B's MLP up projection, whose
// 271 MB float32 (136 MB bfloat16) weight is far larger than the caches: the weight streams
// from memory once per call.
func BenchmarkOpsDecode(b *testing.B) {
	var shapes []nntest.LinearShape
	for m := 1; m <= 32; m *= 2 {
		shapes = append(shapes, nntest.LinearShape{M: m, K: 3584, N: 18944})
	}
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		nntest.BenchLinear(b, tensor.CPU(), dt, shapes...)
	}
}

// BenchmarkOpsAttention is causal attention over one sequence of T = 512…4096 tokens, 0.5B's
// heads (14 query heads sharing 2 key/value heads, dimension 64): forward, then forward +
// backward, float32 then bfloat16.
func BenchmarkOpsAttention(b *testing.B) {
	var shapes []nntest.AttentionShape
	for t := 512; t <= 4096; t *= 2 {
		shapes = append(shapes, nntest.AttentionShape{T: t, Hq: 14, Hkv: 2, D: 64})
	}
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		for _, bwd := range []bool{false, true} {
			nntest.BenchAttentionDType(b, tensor.CPU(), dt, bwd, shapes...)
		}
	}
}

// BenchmarkOpsLMHead is the fused LM head at 0.5B's head (D = 896, V = 151936), 256 tokens,
// forward and forward + backward, float32 and bfloat16 (hidden states and head weight); B/op
// shows it holds no [256, V] logits (156 MB).
func BenchmarkOpsLMHead(b *testing.B) {
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		for _, bwd := range []bool{false, true} {
			nntest.BenchLMHead(b, tensor.CPU(), dt, bwd, 256, 896, 151936)
		}
	}
}

// BenchmarkOpsElementwise is LayerNorm and the GELUs at Qwen2-VL's vision-tower shapes (1024
// patches; width 1280, MLP 5120), and LayerNorm and RMSNorm at Qwen2.5-0.5B's and 7B's
// (2048 tokens; 896, 3584), forward and backward, float32 and bfloat16; b.SetBytes counts the
// activations read and written (forward x, y; backward x, dy, dx), so MB/s is wall-clock
// bandwidth, and cpu-ns/op is the process's CPU time per call. The norms' backward also writes
// dw (and db), from the statistics their forward saved (LayerNormStats, RMSNormStats), as torch's
// autograd keeps them.
func BenchmarkOpsElementwise(b *testing.B) {
	const t, d, ff = 1024, 1280, 5120
	type benchCase struct {
		name string
		t, n int
		op   func(bwd bool) func() error
	}
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		mk := func(off float32, s ...int) *tensor.Tensor {
			x := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, s...))
			xv, _ := x.Float32s()
			for i := range xv {
				xv[i] = float32(i%97)/25 - 1.9 + off
			}
			if dt == tensor.Float32 {
				return x
			}
			y := make([]tensor.BF16, len(xv))
			for i, f := range xv {
				y[i] = tensor.BF16FromFloat32(f)
			}
			return tensor.Must(tensor.FromBF16(y, s...))
		}
		f32 := func(s ...int) *tensor.Tensor { return tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, s...)) }
		norm := func(name string, t, d int) benchCase {
			return benchCase{name, t, d, func(bwd bool) func() error {
				x, y, w, bb := mk(0.3, t, d), mk(0, t, d), mk(1, d), mk(0, d)
				mean, rstd := f32(t), f32(t)
				fwd := func() error { return tensor.LayerNormStats(y, mean, rstd, x, w, bb, 1e-6) }
				if name == "rmsnorm" {
					mean, fwd = nil, func() error { return tensor.RMSNormStats(y, rstd, x, w, 1e-6) }
				}
				if !bwd {
					return fwd
				}
				if err := fwd(); err != nil {
					b.Fatal(err)
				}
				dw, db := f32(d), f32(d)
				in := tensor.NormGrad{X: x, Weight: w, DY: mk(0, t, d), Eps: 1e-6, Mean: mean, Rstd: rstd}
				if name == "rmsnorm" {
					return func() error { return tensor.RMSNormBackward(y, dw, in) }
				}
				return func() error { return tensor.LayerNormBackward(y, dw, db, in) }
			}}
		}
		cases := []benchCase{norm("layernorm", t, d), norm("layernorm", 2048, 896), norm("layernorm", 2048, 3584),
			norm("rmsnorm", 2048, 896), norm("rmsnorm", 2048, 3584)}
		for _, a := range []tensor.Activation{tensor.GELU, tensor.GELUTanh, tensor.QuickGELU} {
			cases = append(cases, benchCase{a.String(), t, ff, func(bwd bool) func() error {
				x, y := mk(0, t, ff), mk(0, t, ff)
				if !bwd {
					return func() error { return tensor.Activate(y, x, a) }
				}
				in := tensor.ActivationGrad{X: x, DY: mk(0.1, t, ff), Activation: a}
				return func() error { return tensor.ActivateBackward(y, in) }
			}})
		}
		for _, c := range cases {
			for _, bwd := range []bool{false, true} {
				pass, tensors := "fwd", 2
				if bwd {
					pass, tensors = "bwd", 3
				}
				b.Run(fmt.Sprintf("%s/%s/%s/T=%d/D=%d", c.name, pass, dt, c.t, c.n), func(b *testing.B) {
					op := c.op(bwd)
					b.SetBytes(int64(tensors * c.t * c.n * dt.Size()))
					cpu0, _ := cputime.Process()
					for b.Loop() {
						if err := op(); err != nil {
							b.Fatal(err)
						}
					}
					if cpu1, ok := cputime.Process(); ok {
						b.ReportMetric(float64(((cpu1 - cpu0) / time.Duration(b.N)).Nanoseconds()), "cpu-ns/op")
					}
				})
			}
		}
	}
}

// BenchmarkStreamRead is the streaming-read bandwidth that decode is held against: GOMAXPROCS
// goroutines each scan their share of a 1 GiB buffer with bytes.IndexByte (the runtime's vector
// loop, reading 32 or 64 bytes per instruction; the byte never occurs), in GB/s.
func BenchmarkStreamRead(b *testing.B) {
	buf := make([]byte, 1<<30)
	for i := range buf {
		buf[i] = byte(i%251) | 1 // page in; never 0
	}
	p := runtime.GOMAXPROCS(0)
	part := len(buf) / p
	cpu0, _ := cputime.Process()
	for b.Loop() {
		var wg sync.WaitGroup
		for g := range p {
			wg.Go(func() {
				if bytes.IndexByte(buf[g*part:(g+1)*part], 0) >= 0 {
					panic("zero byte in the stream buffer")
				}
			})
		}
		wg.Wait()
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(len(buf))/sec/1e9, "GB/s")
	if cpu1, ok := cputime.Process(); ok {
		b.ReportMetric(float64(((cpu1 - cpu0) / time.Duration(b.N)).Nanoseconds()), "cpu-ns/op")
	}
}

// BenchmarkOpsRow is the bandwidth-bound families at 0.5B's prefill shapes (2048 tokens):
// RMSNorm over hidden 896, RoPE over 14 heads of 64, SwiGLU over the MLP's 4864, and AdamW over
// one MLP matrix (896 × 4864). Not in scripts/ops-vs-torch.
func BenchmarkOpsRow(b *testing.B) {
	be := tensor.CPU()
	nntest.BenchNorm(b, be, 2048, 896)
	nntest.BenchRoPE(b, be, 2048, 14, 64)
	nntest.BenchSwiGLU(b, be, 2048, 4864)
	nntest.BenchAdamW(b, be, 896*4864)
}

// BenchmarkOpsBF16 holds each non-GEMM op with bfloat16 activations against the same op in
// float32 at 0.5B's prefill shapes (2048 tokens; hidden 896, MLP 4864, 14 heads of 64; an
// embedding table of 16384 rows): per round (-benchtime=Nx: N rounds), 5 calls in float32 then
// 5 in bfloat16, each timed in process CPU time; it reports the medians over the rounds of the
// CPU nanoseconds per element and of their ratio bf16/f32 (≤ 1: no slower per element). The
// norms' weights and the table are in the activations' dtype.
func BenchmarkOpsBF16(b *testing.B) {
	const t, d, ff, h, hd, v = 2048, 896, 4864, 14, 64, 16384
	mk := func(dt tensor.DType, s ...int) *tensor.Tensor {
		x := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, s...))
		xv, _ := x.Float32s()
		for i := range xv {
			xv[i] = float32(i%97)/50 - 0.9
		}
		if dt == tensor.Float32 {
			return x
		}
		y := make([]tensor.BF16, len(xv))
		for i, f := range xv {
			y[i] = tensor.BF16FromFloat32(f)
		}
		return tensor.Must(tensor.FromBF16(y, s...))
	}
	ids := make([]int32, t)
	for i := range ids {
		ids[i] = int32(i * 7919 % v)
	}
	idt, pos := tensor.Must(tensor.FromInt32(ids, t)), tensor.Must(tensor.FromInt32(ids, t))
	for _, c := range []struct {
		name string
		n    int // elements per call
		op   func(dt tensor.DType) func() error
	}{
		{"RMSNorm", t * d, func(dt tensor.DType) func() error {
			x, w, y := mk(dt, t, d), mk(dt, d), mk(dt, t, d)
			return func() error { return tensor.RMSNorm(y, x, w, 1e-6) }
		}},
		{"RMSNormBackward", t * d, func(dt tensor.DType) func() error {
			in := tensor.NormGrad{X: mk(dt, t, d), Weight: mk(dt, d), DY: mk(dt, t, d), Eps: 1e-6}
			dx, dw := mk(dt, t, d), mk(tensor.Float32, d)
			return func() error { return tensor.RMSNormBackward(dx, dw, in) }
		}},
		{"LayerNorm", t * d, func(dt tensor.DType) func() error {
			x, w, bb, y := mk(dt, t, d), mk(dt, d), mk(dt, d), mk(dt, t, d)
			return func() error { return tensor.LayerNorm(y, x, w, bb, 1e-6) }
		}},
		{"LayerNormBackward", t * d, func(dt tensor.DType) func() error {
			in := tensor.NormGrad{X: mk(dt, t, d), Weight: mk(dt, d), DY: mk(dt, t, d), Eps: 1e-6}
			dx, dw, db := mk(dt, t, d), mk(tensor.Float32, d), mk(tensor.Float32, d)
			return func() error { return tensor.LayerNormBackward(dx, dw, db, in) }
		}},
		{"RoPE", t * h * hd, func(dt tensor.DType) func() error {
			x := mk(dt, t, h, hd)
			return func() error { return tensor.RoPE(x, x, pos, tensor.RoPEConfig{Theta: 1e6}) }
		}},
		{"RoPEBackward", t * h * hd, func(dt tensor.DType) func() error {
			dy := mk(dt, t, h, hd)
			return func() error {
				return tensor.RoPEBackward(dy, tensor.RoPEGrad{DY: dy, Positions: pos, Config: tensor.RoPEConfig{Theta: 1e6}})
			}
		}},
		{"SiLU", t * ff, func(dt tensor.DType) func() error {
			x, y := mk(dt, t, ff), mk(dt, t, ff)
			return func() error { return tensor.Activate(y, x, tensor.SiLU) }
		}},
		{"GELUTanh", t * ff, func(dt tensor.DType) func() error {
			x, y := mk(dt, t, ff), mk(dt, t, ff)
			return func() error { return tensor.Activate(y, x, tensor.GELUTanh) }
		}},
		{"GELUTanhBackward", t * ff, func(dt tensor.DType) func() error {
			dx, in := mk(dt, t, ff), tensor.ActivationGrad{X: mk(dt, t, ff), DY: mk(dt, t, ff), Activation: tensor.GELUTanh}
			return func() error { return tensor.ActivateBackward(dx, in) }
		}},
		{"GELU", t * ff, func(dt tensor.DType) func() error {
			x, y := mk(dt, t, ff), mk(dt, t, ff)
			return func() error { return tensor.Activate(y, x, tensor.GELU) }
		}},
		{"GELUBackward", t * ff, func(dt tensor.DType) func() error {
			dx, in := mk(dt, t, ff), tensor.ActivationGrad{X: mk(dt, t, ff), DY: mk(dt, t, ff), Activation: tensor.GELU}
			return func() error { return tensor.ActivateBackward(dx, in) }
		}},
		{"SwiGLU", t * ff, func(dt tensor.DType) func() error {
			g, u, y := mk(dt, t, ff), mk(dt, t, ff), mk(dt, t, ff)
			return func() error { return tensor.SwiGLU(y, g, u) }
		}},
		{"SwiGLUBackward", t * ff, func(dt tensor.DType) func() error {
			in := tensor.SwiGLUGrad{Gate: mk(dt, t, ff), Up: mk(dt, t, ff), DY: mk(dt, t, ff)}
			dg, du := mk(dt, t, ff), mk(dt, t, ff)
			return func() error { return tensor.SwiGLUBackward(dg, du, in) }
		}},
		{"Embedding", t * d, func(dt tensor.DType) func() error {
			tab, y := mk(dt, v, d), mk(dt, t, d)
			return func() error { return tensor.Embedding(y, tab, idt) }
		}},
		{"EmbeddingBackward", t * d, func(dt tensor.DType) func() error {
			dtab, in := mk(tensor.Float32, v, d), tensor.EmbeddingGrad{IDs: idt, DY: mk(dt, t, d), Accumulate: true}
			return func() error { return tensor.EmbeddingBackward(dtab, in) }
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			ops := [2]func() error{c.op(tensor.Float32), c.op(tensor.BFloat16)}
			var per [2][]float64
			var ratio []float64
			for b.Loop() {
				var ns [2]float64
				for k, op := range ops {
					c0, _ := cputime.Process()
					for range 5 {
						if err := op(); err != nil {
							b.Fatal(err)
						}
					}
					c1, _ := cputime.Process()
					ns[k] = float64((c1 - c0).Nanoseconds()) / float64(5*c.n)
					per[k] = append(per[k], ns[k])
				}
				ratio = append(ratio, ns[1]/ns[0])
			}
			b.ReportMetric(median(per[0]), "f32-cpu-ns/elem")
			b.ReportMetric(median(per[1]), "bf16-cpu-ns/elem")
			b.ReportMetric(median(ratio), "bf16/f32")
		})
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
