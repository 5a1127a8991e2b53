//go:build cuda

package vlm

import (
	"math/rand/v2"
	"os"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// benchShape is one of the roofline's shapes (scripts/vlm_roofline.py): MTRL_VLM_BENCH=default
// (the trainer's model, micro-batch 16) or 7b (one block of the 7B model, micro-batch 4, 1024
// image + 2048 text tokens); unset, a tiny shape that the emulator runs in a moment.
func benchShape(b *testing.B) (c Config, rows, l int) {
	switch os.Getenv("MTRL_VLM_BENCH") {
	case "default":
		return Config{ImageSize: 32, PatchSize: 8, Channels: 3, Vocab: 128, Dim: 64, Layers: 2, Heads: 4, MLPDim: 128, MaxLen: 88}, 16, 88
	case "7b":
		return Config{ImageSize: 448, PatchSize: 14, Channels: 3, Vocab: 152064, Dim: 4096, Layers: 1, Heads: 32, MLPDim: 16384, MaxLen: 2048}, 4, 2048
	case "":
		return Config{ImageSize: 8, PatchSize: 4, Channels: 3, Vocab: 23, Dim: 16, Layers: 1, Heads: 2, MLPDim: 32, MaxLen: 8}, 2, 8
	}
	b.Fatalf("MTRL_VLM_BENCH=%q: want default, 7b or unset", os.Getenv("MTRL_VLM_BENCH"))
	return
}

// BenchmarkCUDAKernels times each kernel of the model's op set at one shape on the device and
// reports TFLOP/s and GB/s against the roofline's FLOP and compulsory-byte counts
// (scripts/vlm-gpu-bench runs it on a GPU machine).
func BenchmarkCUDAKernels(b *testing.B) {
	c, rows, l := benchShape(b)
	dev := device(b)
	o, err := NewCUDAOps(c, dev)
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	s := c.Patches() + l
	n, d, m := rows*s, c.Dim, c.MLPDim
	rng := rand.New(rand.NewPCG(1, 1))
	buf := func(k int) *tensor.Tensor {
		v := make([]float32, k)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.5)
		}
		t, err := tensor.To(dev, tensor.Must(tensor.FromFloat32(v, k)))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = t.Release() })
		return t
	}
	x, h, xhat, rstd, g, bias := buf(n*d), buf(n*d), buf(n*d), buf(n), buf(d), buf(d)
	qkv, dqkv, w := buf(n*3*d), buf(n*3*d), buf(d*3*d)
	u, a := buf(n*m), buf(n*m)
	p, ao := buf(rows*c.Heads*s*s), buf(n*d)
	if err := o.Attention(ao, p, rows, s, qkv); err != nil { // valid probabilities for the backward
		b.Fatal(err)
	}
	keys := float64(c.Patches()*c.Patches() + l*c.Patches() + l*(l+1)/2)
	f4 := 4.0
	for _, k := range []struct {
		name         string
		flops, bytes float64
		run          func() error
	}{
		{"gemm_qkv", 2 * float64(n) * float64(3*d) * float64(d), f4 * float64(n*d+d*3*d+n*3*d), func() error { return o.Gemm(qkv, false, false, n, 3*d, d, h, w, 0) }},
		{"gemm_qkv_dW", 2 * float64(n) * float64(3*d) * float64(d), f4 * float64(n*d+2*d*3*d+n*3*d), func() error { return o.Gemm(w, true, false, d, 3*d, n, h, dqkv, 1) }},
		{"attention_fwd", 4 * float64(d/c.Heads) * keys * float64(rows*c.Heads), f4 * float64(n*3*d+n*d+rows*c.Heads*s*s), func() error { return o.Attention(ao, p, rows, s, qkv) }},
		{"attention_bwd", 12 * float64(d/c.Heads) * keys * float64(rows*c.Heads), f4 * float64(2*n*3*d+n*d+rows*c.Heads*s*s), func() error { return o.AttentionBack(dqkv, rows, s, qkv, p, ao) }},
		{"layernorm_fwd", 8 * float64(n*d), f4 * float64(3*n*d+n), func() error { return o.LayerNorm(h, xhat, rstd, n, d, x, g, bias) }},
		{"layernorm_bwd", 10 * float64(n*d), f4 * float64(4*n*d+n), func() error { return o.LayerNormBack(x, g, bias, n, d, h, xhat, rstd, g) }},
		{"gelu_fwd", 8 * float64(n*m), f4 * float64(2*n*m), func() error { return o.GELU(a, n*m, u) }},
		{"gelu_bwd", 8 * float64(n*m), f4 * float64(3*n*m), func() error { return o.GELUBack(a, n*m, u) }},
		{"bias_add", float64(n * d), f4 * float64(2*n*d), func() error { return o.AddBias(x, n, d, bias) }},
		{"col_sum", float64(n * d), f4 * float64(n*d), func() error { return o.ColSum(bias, n, d, x) }},
	} {
		b.Run(k.name, func(b *testing.B) {
			if err := k.run(); err != nil { // warm-up (module JIT, caches)
				b.Fatal(err)
			}
			if err := dev.Sync(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if err := k.run(); err != nil {
					b.Fatal(err)
				}
			}
			if err := dev.Sync(); err != nil {
				b.Fatal(err)
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(k.flops/sec/1e12, "TFLOP/s")
			b.ReportMetric(k.bytes/sec/1e9, "GB/s")
		})
	}
}

// BenchmarkCUDAStep times one forward+backward of one micro-batch of the whole model on the
// device (the unit of the roofline's step), reporting tokens/s. At the 7b shape the model has
// one block (32 blocks' activations, with [B, H, S, S] attention probabilities, do not fit on
// one GPU); the embeddings and the 152064-word head are whole.
func BenchmarkCUDAStep(b *testing.B) {
	c, rows, l := benchShape(b)
	dev := device(b)
	o, err := NewCUDAOps(c, dev)
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	m, err := New(c, 1)
	if err != nil {
		b.Fatal(err)
	}
	om, err := NewOpsModel(m, o)
	if err != nil {
		b.Fatal(err)
	}
	defer om.Release()
	rng := rand.New(rand.NewPCG(2, 2))
	img, tok := randImages(rng, c, rows), randTokens(rng, c, rows, l)
	dl, err := tensor.New(dev, tensor.Float32, rows, l, c.Vocab)
	if err != nil {
		b.Fatal(err)
	}
	defer dl.Release()
	step := func() {
		logits, act, err := om.Forward(img, tok)
		if err != nil {
			b.Fatal(err)
		}
		if err := om.Backward(act, dl); err != nil {
			b.Fatal(err)
		}
		act.Release()
		_ = logits.Release()
	}
	step()
	b.ResetTimer()
	for range b.N {
		step()
	}
	if err := dev.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(rows*(c.Patches()+l))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}
