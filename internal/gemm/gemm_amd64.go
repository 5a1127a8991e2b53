//go:build !noasm

package gemm

import "github.com/mtrl-go/mtrl/internal/dispatch"

//go:generate go run -C ../asmgen . -family gemm -out ../gemm/gemm_amd64.s -stubs ../gemm/gemm_stub_amd64.go -pkg gemm

// simdImpls returns the vector micro-kernels this CPU supports, best first: AVX-512F+DQ (64
// columns per call), then AVX2 with FMA (16 columns).
func simdImpls() []dispatch.Impl[kernels] {
	var out []dispatch.Impl[kernels]
	if dispatch.HasAVX512(true) { // VXORPS on zmm needs AVX512DQ
		out = append(out, dispatch.Impl[kernels]{Name: "avx512", Kernels: &kernels{width: 64,
			tile:  [MR + 1]tileFn{nil, gemm1x64AVX512, gemm2x64AVX512, gemm3x64AVX512, gemm4x64AVX512, gemm5x64AVX512, gemm6x64AVX512},
			tile7: gemm7x64AVX512,
			pf:    [MR + 2]pfFn{nil, gemm1x64PfAVX512, gemm2x64PfAVX512, gemm3x64PfAVX512, gemm4x64PfAVX512, nil, nil, gemm7x64PfAVX512}}})
	}
	if dispatch.HasAVX2(true) {
		out = append(out, dispatch.Impl[kernels]{Name: "avx2", Kernels: &kernels{width: 16,
			tile: [MR + 1]tileFn{nil, gemm1x16AVX2, gemm2x16AVX2, gemm3x16AVX2, gemm4x16AVX2, gemm5x16AVX2, gemm6x16AVX2}}})
	}
	return out
}
