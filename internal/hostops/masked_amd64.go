//go:build !noasm

package hostops

import "github.com/mtrl-go/mtrl/internal/dispatch"

//go:generate go run -C ../asmgen . -family masked -out ../hostops/masked_amd64.s -stubs ../hostops/masked_stub_amd64.go -pkg hostops

// simdMaskedImpls returns the vector implementations of the masked reductions this CPU
// supports, best first: AVX-512F (16 lanes), then AVX2 (8 lanes). The kernels are generated with
// avo by internal/asmgen into masked_amd64.s; build with -tags noasm for the pure-Go loops only.
func simdMaskedImpls() []dispatch.Impl[maskedSIMD] {
	var out []dispatch.Impl[maskedSIMD]
	if dispatch.HasAVX512(true) {
		out = append(out, dispatch.Impl[maskedSIMD]{Name: "avx512", Kernels: &maskedSIMD{
			lanes: 16, sum: maskedSumAVX512, sqDev: maskedSqDevAVX512, whiten: whitenAVX512,
		}})
	}
	if dispatch.HasAVX2(false) {
		out = append(out, dispatch.Impl[maskedSIMD]{Name: "avx2", Kernels: &maskedSIMD{
			lanes: 8, sum: maskedSumAVX2, sqDev: maskedSqDevAVX2, whiten: whitenAVX2,
		}})
	}
	return out
}
