//go:build cuda

package cuda_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// BenchmarkNormKernels times the memory-bound kernels of nn.cu and the fused LM head's backward
// at BenchmarkOps' 7B shapes (MTRL_OPS_BENCH=small: its tiny ones): RMSNorm and LayerNorm
// forward and backward (dx, then the weight gradients) on [2048, 3584] and RoPE forward and
// backward on [2048, 32, 128], float32 and bfloat16; the LM head (bfloat16 hidden states and
// weight, V = 152064) backward alone and with its forward, the logits gradient float32 and
// bfloat16 (GradBF16: the bf16 models' setting). GB/s counts each input read once and each
// output written once; TFLOP/s the LM head's GEMM work. The file uses the public API only, so
// scripts/gpu-check's BEFORE= builds it against an older commit too: both binaries then run the
// same benchmarks (run.sh's step compare).
func BenchmarkNormKernels(b *testing.B) {
	be := device(b)
	b.Logf("device %s", be.Name())
	s := benchShapes()
	r := rand.New(rand.NewPCG(3, 4))
	put := func(dt tensor.DType, scale float64, shape ...int) *tensor.Tensor {
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * scale)
		}
		if dt == tensor.Float32 {
			return tensor.Must(tensor.To(be, tensor.Must(tensor.FromFloat32(v, shape...))))
		}
		h := make([]tensor.BF16, n)
		for i, f := range v {
			h[i] = tensor.BF16FromFloat32(f)
		}
		return tensor.Must(tensor.To(be, tensor.Must(tensor.FromBF16(h, shape...))))
	}
	run := func(name string, bytes, flops float64, fn func() error) {
		b.Run(name, func(b *testing.B) {
			if err := fn(); err != nil { // warm-up: scratch, the cuBLAS handle
				b.Fatal(err)
			}
			if err := be.Sync(); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := fn(); err != nil {
					b.Fatal(err)
				}
				if err := be.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			if bytes > 0 {
				b.ReportMetric(bytes/sec/1e9, "GB/s")
			}
			if flops > 0 {
				b.ReportMetric(flops/sec/1e12, "TFLOP/s")
			}
		})
	}
	rows, d := s.tokens, s.hidden
	heads, hd := s.heads+s.kvHeads, s.headDim
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		n := float64(rows * d * dt.Size())
		x, dy, y := put(dt, 1, rows, d), put(dt, 1, rows, d), put(dt, 0, rows, d)
		w, bias, dw, db := put(tensor.Float32, 1, d), put(tensor.Float32, 1, d), put(tensor.Float32, 0, d), put(tensor.Float32, 0, d)
		in := tensor.NormGrad{X: x, Weight: w, DY: dy, Eps: 1e-6}
		shape := fmt.Sprintf("%v/rows=%d/d=%d", dt, rows, d)
		run("rmsnorm/fwd/"+shape, 2*n, 0, func() error { return tensor.RMSNorm(y, x, w, 1e-6) })
		run("rmsnorm/bwd/"+shape, 3*n, 0, func() error { return tensor.RMSNormBackward(y, dw, in) })
		run("layernorm/fwd/"+shape, 2*n, 0, func() error { return tensor.LayerNorm(y, x, w, bias, 1e-6) })
		run("layernorm/bwd/"+shape, 3*n, 0, func() error { return tensor.LayerNormBackward(y, dw, db, in) })

		nr := float64(rows * heads * hd * dt.Size())
		rx, ry := put(dt, 1, rows, heads, hd), put(dt, 0, rows, heads, hd)
		pos := make([]int32, rows)
		for i := range pos {
			pos[i] = int32(i)
		}
		p := tensor.Must(tensor.To(be, tensor.Must(tensor.FromInt32(pos, rows))))
		cfg := tensor.RoPEConfig{Theta: 1e6}
		rshape := fmt.Sprintf("%v/rows=%d/heads=%d/D=%d", dt, rows, heads, hd)
		run("rope/fwd/"+rshape, 2*nr, 0, func() error { return tensor.RoPE(ry, rx, p, cfg) })
		run("rope/bwd/"+rshape, 2*nr, 0, func() error {
			return tensor.RoPEBackward(ry, tensor.RoPEGrad{DY: rx, Positions: p, Config: cfg})
		})
	}

	v := s.vocab
	wt, err := tensor.PackWeight(put(tensor.BFloat16, 0.02, v, d))
	if err != nil {
		b.Fatal(err)
	}
	ys := make([]int32, rows)
	for i := range ys {
		ys[i] = int32(r.IntN(v))
	}
	lin := tensor.LMHeadInputs{Hidden: put(tensor.BFloat16, 1, rows, d), Weight: wt,
		Targets: tensor.Must(tensor.To(be, tensor.Must(tensor.FromInt32(ys, rows)))), Temperature: 1}
	lp, ent := put(tensor.Float32, 0, rows), put(tensor.Float32, 0, rows)
	if err := tensor.LMHeadLogProbs(lp, ent, lin); err != nil {
		b.Fatal(err)
	}
	dh, dwt := put(tensor.Float32, 0, rows, d), put(tensor.Float32, 0, v, d)
	gemm := 2 * float64(rows) * float64(d) * float64(v) // one of the head's products
	for _, g16 := range []bool{false, true} {
		g := tensor.LMHeadGrad{LMHeadInputs: lin, LogProbs: lp, Entropy: ent,
			DLogProbs: put(tensor.Float32, 1, rows), DEntropy: put(tensor.Float32, 1, rows), GradBF16: g16}
		name := fmt.Sprintf("bfloat16/gradbf16=%v/N=%d/D=%d/V=%d", g16, rows, d, v)
		run("lmhead/bwd/"+name, 0, 3*gemm, func() error { return tensor.LMHeadBackward(dh, dwt, g) })
		run("lmhead/fwd+bwd/"+name, 0, 4*gemm, func() error {
			if err := tensor.LMHeadLogProbs(lp, ent, lin); err != nil {
				return err
			}
			return tensor.LMHeadBackward(dh, dwt, g)
		})
	}
}
