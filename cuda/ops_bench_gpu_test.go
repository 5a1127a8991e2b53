//go:build cuda

package cuda_test

import (
	"os"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/nntest"
)

// opsShapes are the shapes of BenchmarkOps: one Qwen2.5-7B layer at 2048 tokens (hidden 3584,
// 28 query heads and 4 key/value heads of 128, MLP 18944, vocabulary 152064), attention over one
// sequence of 4096 tokens, AdamW over one MLP matrix; or, with MTRL_OPS_BENCH=small, tiny
// shapes that run on the emulator in seconds (a check that the benchmarks run, not a timing).
type opsShapes struct {
	tokens, hidden, heads, kvHeads, headDim, mlp, vocab, attnT int
}

func benchShapes() opsShapes {
	if os.Getenv("MTRL_OPS_BENCH") == "small" {
		return opsShapes{tokens: 16, hidden: 64, heads: 4, kvHeads: 2, headDim: 16, mlp: 96, vocab: 300, attnT: 40}
	}
	return opsShapes{tokens: 2048, hidden: 3584, heads: 28, kvHeads: 4, headDim: 128, mlp: 18944, vocab: 152064, attnT: 4096}
}

// BenchmarkOps times the transformer ops on the device at the 7B shapes of scripts/ops_roofline.py
// (scripts/ops-gpu-bench runs it and sets the results beside the roofline): the layer's GEMMs
// through cuBLAS in bfloat16 and float32 (qkv fused, o, gate and up fused, down) at prefill and
// the MLP up projection at decode (M = 1, 32); causal GQA attention forward and forward +
// backward; RMSNorm, RoPE, SwiGLU, AdamW; the fused LM head (which stages through the host on
// this backend: that is what it measures until it has a device kernel).
func BenchmarkOps(b *testing.B) {
	be := device(b)
	b.Logf("device %s", be.Name())
	s := benchShapes()
	q, kv := s.heads*s.headDim, s.kvHeads*s.headDim
	prefill := []nntest.LinearShape{
		{M: s.tokens, K: s.hidden, N: q + 2*kv}, {M: s.tokens, K: q, N: s.hidden},
		{M: s.tokens, K: s.hidden, N: 2 * s.mlp}, {M: s.tokens, K: s.mlp, N: s.hidden},
		{M: 1, K: s.hidden, N: s.mlp}, {M: 32, K: s.hidden, N: s.mlp},
	}
	for _, dt := range []tensor.DType{tensor.BFloat16, tensor.Float32} {
		nntest.BenchLinear(b, be, dt, prefill...)
	}
	attn := nntest.AttentionShape{T: s.attnT, Hq: s.heads, Hkv: s.kvHeads, D: s.headDim}
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		nntest.BenchAttentionDType(b, be, dt, false, attn)
		nntest.BenchAttentionDType(b, be, dt, true, attn)
	}
	nntest.BenchNorm(b, be, s.tokens, s.hidden)
	nntest.BenchRoPE(b, be, s.tokens, s.heads+s.kvHeads, s.headDim)
	nntest.BenchSwiGLU(b, be, s.tokens, s.mlp)
	nntest.BenchAdamW(b, be, s.hidden*s.mlp)
	for _, bwd := range []bool{false, true} {
		nntest.BenchLMHead(b, be, tensor.BFloat16, bwd, s.tokens, s.hidden, s.vocab)
	}
}
