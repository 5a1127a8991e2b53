//go:build !noasm

package tensor

import "github.com/mtrl-go/mtrl/internal/dispatch"

//go:generate go run -C ../internal/asmgen . -family bf16conv -out ../../tensor/bf16conv_amd64.s -stubs ../../tensor/bf16conv_stub_amd64.go -pkg tensor

// convSIMD returns the vector bfloat16 conversions this CPU supports, best first (generated
// by internal/asmgen into bf16conv_amd64.s; -tags noasm uses the Go loops only).
func convSIMD() []dispatch.Impl[bf16Conv] {
	var out []dispatch.Impl[bf16Conv]
	if dispatch.HasAVX512(false) {
		out = append(out, dispatch.Impl[bf16Conv]{Name: "avx512", Kernels: &bf16Conv{16, widenBF16AVX512, roundBF16AVX512}})
	}
	if dispatch.HasAVX2(false) {
		out = append(out, dispatch.Impl[bf16Conv]{Name: "avx2", Kernels: &bf16Conv{8, widenBF16AVX2, roundBF16AVX2}})
	}
	return out
}
