package tensor_test

import (
	"bytes"
	"runtime"
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
