//go:build !noasm

package gemm

import (
	"runtime"
	"sync"
	"testing"

	"github.com/mtrl-go/mtrl/internal/cputime"
	"github.com/mtrl-go/mtrl/internal/dispatch"
)

// BenchmarkFMAPeak measures the FMA peak of all cores (GOMAXPROCS goroutines of register-only
// FMAs), the ceiling BenchmarkMul's GFLOP/s are a fraction of; its GFLOP/cpu-s is the peak of
// one core. avx512bf16 is the same for VDPBF16PS (64 flops per instruction), BenchmarkMulBF16's
// ceiling.
func BenchmarkFMAPeak(b *testing.B) {
	for _, c := range []struct {
		name  string
		ok    bool
		fn    func(int)
		flops float64
	}{{"avx512", dispatch.HasAVX512(true), fmaPeakAVX512, 768}, {"avx2", dispatch.HasAVX2(true), fmaPeakAVX2, 192},
		{"avx512bf16", len(ImplsBF16()) > 1, dpbf16Peak, 1536}} {
		if !c.ok {
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			const rounds = 1 << 22
			p := runtime.GOMAXPROCS(0)
			cpu0, _ := cputime.Process()
			for b.Loop() {
				var wg sync.WaitGroup
				for range p {
					wg.Go(func() { c.fn(rounds) })
				}
				wg.Wait()
			}
			reportCPU(b, cpu0, c.flops*rounds*float64(p)*float64(b.N))
			b.ReportMetric(c.flops*rounds*float64(p)/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GFLOP/s")
		})
	}
}
