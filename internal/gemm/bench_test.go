package gemm

import (
	"fmt"
	"testing"
	"time"

	"github.com/mtrl-go/mtrl/internal/cputime"
)

// reportCPU reports flops per CPU-second since cpu0 as GFLOP/cpu-s.
func reportCPU(b *testing.B, cpu0 time.Duration, flops float64) {
	if cpu1, ok := cputime.Process(); ok && cpu1 > cpu0 {
		b.ReportMetric(flops/(cpu1-cpu0).Seconds()/1e9, "GFLOP/cpu-s")
	}
}

// BenchmarkMul times c = a·Wᵀ at Qwen2.5 layer shapes (M tokens × K in → N out): prefill
// (M = 2048) of 0.5B's MLP up and down projections and 7B's up projection, and decode rows
// (M = 1, 8, 32) of the 0.5B up projection and the 7B up projection. It reports GFLOP/s (2MNK
// per call), GFLOP per CPU-second (the rate of each core while it runs: robust to other users'
// load, comparable with BenchmarkFMAPeak's) and, for decode, GB/s of packed weight read.
func BenchmarkMul(b *testing.B) {
	shapes := [][3]int{ // M, K, N
		{2048, 896, 4864}, {2048, 4864, 896}, {2048, 3584, 18944},
		{1, 896, 4864}, {8, 896, 4864}, {32, 896, 4864},
		{1, 3584, 18944}, {32, 3584, 18944},
	}
	for _, name := range Impls() {
		for _, s := range shapes {
			m, k, n := s[0], s[1], s[2]
			if name == "go" && m*k*n > 1<<32 {
				continue // minutes per call
			}
			b.Run(fmt.Sprintf("%s/M=%d/K=%d/N=%d", name, m, k, n), func(b *testing.B) {
				defer Use(name)()
				a, c := make([]float32, m*k), make([]float32, m*n)
				for i := range a {
					a[i] = float32(i%7) * 0.25
				}
				p := Pack(n, k, func(i int) float32 { return float32(i%5) * 0.5 })
				cpu0, _ := cputime.Process()
				for b.Loop() {
					Mul(m, a, k, p, c, n, false)
				}
				flops := 2 * float64(m) * float64(n) * float64(k) * float64(b.N)
				reportCPU(b, cpu0, flops)
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(flops/float64(b.N)/sec/1e9, "GFLOP/s")
				if m <= 32 {
					b.ReportMetric(4*float64(n)*float64(k)/sec/1e9, "GB/s")
				}
			})
		}
	}
}

// BenchmarkMulBF16 is BenchmarkMul for bfloat16 operands (MulBF16): GFLOP/s, GFLOP per
// CPU-second (against BenchmarkDPBF16Peak's) and, for decode, GB/s of packed weight read (two
// bytes per element).
func BenchmarkMulBF16(b *testing.B) {
	shapes := [][3]int{ // M, K, N
		{2048, 896, 4864}, {2048, 4864, 896}, {2048, 3584, 18944},
		{1, 3584, 18944}, {2, 3584, 18944}, {4, 3584, 18944}, {8, 3584, 18944}, {16, 3584, 18944}, {32, 3584, 18944},
	}
	for _, name := range ImplsBF16() {
		for _, s := range shapes {
			m, k, n := s[0], s[1], s[2]
			if name == "go" && m*k*n > 1<<32 {
				continue
			}
			b.Run(fmt.Sprintf("%s/M=%d/K=%d/N=%d", name, m, k, n), func(b *testing.B) {
				defer UseBF16(name)()
				a, w, c := make([]uint16, m*k), make([]uint16, n*k), make([]float32, m*n)
				for i := range a {
					a[i] = toBF16(float32(i%7) * 0.25)
				}
				for i := range w {
					w[i] = toBF16(float32(i%5) * 0.5)
				}
				p := PackBF16(n, k, w)
				cpu0, _ := cputime.Process()
				for b.Loop() {
					MulBF16(m, a, k, p, c, n, false)
				}
				flops := 2 * float64(m) * float64(n) * float64(k) * float64(b.N)
				reportCPU(b, cpu0, flops)
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(flops/float64(b.N)/sec/1e9, "GFLOP/s")
				if m <= 32 {
					b.ReportMetric(2*float64(n)*float64(k)/sec/1e9, "GB/s")
				}
			})
		}
	}
}
