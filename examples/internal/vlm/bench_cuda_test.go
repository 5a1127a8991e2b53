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

// BenchmarkCUDAStep times one forward+backward of one micro-batch of the whole model on the
// device (the unit of the roofline's step), reporting tokens/s. At the 7b shape the model has
// one block (32 blocks' activations do not fit on one GPU); the embeddings and the 152064-word
// head are whole. The SDK's ops are timed one by one by scripts/ops-gpu-bench.
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
