package cu

import (
	"testing"
)

// BenchmarkBlockReduction times the emulator's scheduler: 512 blocks of 256 fibers, each
// through 20 warp shuffles and a barrier (about 5.5M fiber switches a launch).
func BenchmarkBlockReduction(b *testing.B) {
	m := device(b)
	f := getFunction(b, m, "cuemu_selftest_reduce")
	const blocks, threads = 512, 256
	in := make([]float32, blocks*threads)
	out := alloc(b, blocks*4*8)
	a := args(uint64(out), uint64(upload(b, in)))
	b.ResetTimer()
	for range b.N {
		launch(b, f, blocks, threads, a)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(blocks*threads*21*2), "ns/switch")
}
