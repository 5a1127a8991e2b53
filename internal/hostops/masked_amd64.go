//go:build !noasm

package hostops

import "golang.org/x/sys/cpu"

//go:generate go run -C ../asmgen . -family masked -out ../hostops/masked_amd64.s -stubs ../hostops/masked_stub_amd64.go -pkg hostops

// simdMaskedImpls returns the vector implementations of the masked reductions this CPU
// supports, best first: AVX-512F (16 lanes), then AVX2 (8 lanes). The kernels are generated with
// avo by internal/asmgen into masked_amd64.s; build with -tags noasm for the pure-Go loops only.
func simdMaskedImpls() []maskedImpl {
	var out []maskedImpl
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ {
		out = append(out, maskedImpl{name: "avx512", simd: &maskedSIMD{
			lanes: 16, sum: maskedSumAVX512, sqDev: maskedSqDevAVX512, whiten: whitenAVX512,
		}})
	}
	if cpu.X86.HasAVX2 {
		out = append(out, maskedImpl{name: "avx2", simd: &maskedSIMD{
			lanes: 8, sum: maskedSumAVX2, sqDev: maskedSqDevAVX2, whiten: whitenAVX2,
		}})
	}
	return out
}
