package tensor_test

import (
	"testing"
	"time"

	"github.com/mtrl-go/mtrl/internal/cputime"

	"github.com/mtrl-go/mtrl/tensor"
)

// BenchmarkLMHead times the fused LM head (forward, forward + backward, and forward + backward
// of a frozen head: no dweight) at Qwen2.5-0.5B's head (D = 896, V = 151936) for 256 tokens,
// float32, against the unfused path that materialises the [256, V] logits (Linear, then
// LogProbEntropy), in tokens/s.
func BenchmarkLMHead(b *testing.B) {
	const n, d, v = 256, 896, 151936
	h := make([]float32, n*d)
	for i := range h {
		h[i] = float32(i%13-6) * 0.05
	}
	wv := make([]float32, v*d)
	for i := range wv {
		wv[i] = float32(i%11-5) * 0.01
	}
	ys := make([]int32, n)
	for i := range ys {
		ys[i] = int32(i * 577 % v)
	}
	hidden, y := tensor.Must(tensor.FromFloat32(h, n, d)), tensor.Must(tensor.FromInt32(ys, n))
	w, err := tensor.PackWeight(tensor.Must(tensor.FromFloat32(wv, v, d)))
	if err != nil {
		b.Fatal(err)
	}
	zeros := func(s ...int) *tensor.Tensor { return tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, s...)) }
	lp, ent := zeros(n), zeros(n)
	in := tensor.LMHeadInputs{Hidden: hidden, Weight: w, Targets: y, Temperature: 1}
	// tokens reports tokens/s and tokens per CPU-second since cpu0 (robust to other users' load);
	// the benchmarks also report bytes allocated per call: the fused op holds no [N, V] logits.
	tokens := func(b *testing.B, cpu0 time.Duration) {
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		if cpu1, ok := cputime.Process(); ok && cpu1 > cpu0 {
			b.ReportMetric(float64(n)*float64(b.N)/(cpu1-cpu0).Seconds(), "tokens/cpu-s")
		}
	}
	b.Run("fused/forward", func(b *testing.B) {
		b.ReportAllocs()
		cpu0, _ := cputime.Process()
		for b.Loop() {
			if err := tensor.LMHeadLogProbs(lp, ent, in); err != nil {
				b.Fatal(err)
			}
		}
		tokens(b, cpu0)
	})
	b.Run("fused/forward+backward", func(b *testing.B) {
		dh, dw, gl := zeros(n, d), zeros(v, d), zeros(n)
		b.ReportAllocs()
		cpu0, _ := cputime.Process()
		for b.Loop() {
			if err := tensor.LMHeadLogProbs(lp, ent, in); err != nil {
				b.Fatal(err)
			}
			err := tensor.LMHeadBackward(dh, dw, tensor.LMHeadGrad{LMHeadInputs: in, LogProbs: lp, Entropy: ent, DLogProbs: gl})
			if err != nil {
				b.Fatal(err)
			}
		}
		tokens(b, cpu0)
	})
	b.Run("fused/forward+backward/frozen", func(b *testing.B) { // nil dweight: no head gradient
		dh, gl := zeros(n, d), zeros(n)
		b.ReportAllocs()
		cpu0, _ := cputime.Process()
		for b.Loop() {
			if err := tensor.LMHeadLogProbs(lp, ent, in); err != nil {
				b.Fatal(err)
			}
			err := tensor.LMHeadBackward(dh, nil, tensor.LMHeadGrad{LMHeadInputs: in, LogProbs: lp, Entropy: ent, DLogProbs: gl})
			if err != nil {
				b.Fatal(err)
			}
		}
		tokens(b, cpu0)
	})
	b.Run("unfused/forward", func(b *testing.B) {
		b.ReportAllocs()
		cpu0, _ := cputime.Process()
		for b.Loop() {
			logits := zeros(n, v) // the [N, V] the fused op never allocates: 156 MB here
			if err := tensor.Linear(logits, hidden, w); err != nil {
				b.Fatal(err)
			}
			if err := tensor.LogProbEntropy(lp, ent, logits, y, 1); err != nil {
				b.Fatal(err)
			}
		}
		tokens(b, cpu0)
	})
}

// BenchmarkLMHeadGradBF16 times the fused LM head's forward + backward with bfloat16 hidden
// states and head weight (N = 256, D = 896, V = 151936), the logits gradient float32 and
// rounded to bfloat16 (LMHeadGrad.GradBF16: the backward's products on VDPBF16PS too), in
// tokens per CPU-second.
func BenchmarkLMHeadGradBF16(b *testing.B) {
	const n, d, v = 256, 896, 151936
	bf := func(k, mod int, scale float32) []tensor.BF16 {
		x := make([]tensor.BF16, k)
		for i := range x {
			x[i] = tensor.BF16FromFloat32(float32(i%mod-mod/2) * scale)
		}
		return x
	}
	ys := make([]int32, n)
	for i := range ys {
		ys[i] = int32(i * 577 % v)
	}
	w, err := tensor.PackWeight(tensor.Must(tensor.FromBF16(bf(v*d, 11, 0.01), v, d)))
	if err != nil {
		b.Fatal(err)
	}
	zeros := func(s ...int) *tensor.Tensor { return tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, s...)) }
	in := tensor.LMHeadInputs{Hidden: tensor.Must(tensor.FromBF16(bf(n*d, 13, 0.05), n, d)), Weight: w,
		Targets: tensor.Must(tensor.FromInt32(ys, n)), Temperature: 1}
	lp, ent, dh, dw := zeros(n), zeros(n), zeros(n, d), zeros(v, d)
	gl := tensor.Must(tensor.FromFloat32(make([]float32, n), n))
	for _, round := range []bool{false, true} {
		b.Run(map[bool]string{false: "float32-grad", true: "bf16-grad"}[round], func(b *testing.B) {
			b.ReportAllocs()
			cpu0, _ := cputime.Process()
			for b.Loop() {
				if err := tensor.LMHeadLogProbs(lp, ent, in); err != nil {
					b.Fatal(err)
				}
				err := tensor.LMHeadBackward(dh, dw, tensor.LMHeadGrad{LMHeadInputs: in, LogProbs: lp, Entropy: ent, DLogProbs: gl, GradBF16: round})
				if err != nil {
					b.Fatal(err)
				}
			}
			if cpu1, ok := cputime.Process(); ok && cpu1 > cpu0 {
				b.ReportMetric(float64(n)*float64(b.N)/(cpu1-cpu0).Seconds(), "tokens/cpu-s")
			}
		})
	}
}
