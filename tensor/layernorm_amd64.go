//go:build !noasm

package tensor

import "github.com/mtrl-go/mtrl/internal/dispatch"

//go:generate go run -C ../internal/asmgen . -family layernorm -out ../../tensor/layernorm_amd64.s -stubs ../../tensor/layernorm_stub_amd64.go -pkg tensor

// lnSIMD returns the vector row kernels of LayerNorm this CPU supports, best first (generated
// by internal/asmgen into layernorm_amd64.s; -tags noasm uses the Go loops only). The 8-row
// sums are AVX2 kernels on both.
func lnSIMD() []dispatch.Impl[lnKernels] {
	var out []dispatch.Impl[lnKernels]
	if dispatch.HasAVX512(false) {
		out = append(out, dispatch.Impl[lnKernels]{Name: "avx512", Kernels: &lnKernels{lanes: 16,
			sum8F32: sum8F32AVX2, sum8BF16: sum8BF16AVX2, devSq8F32: devSq8F32AVX2, devSq8BF16: devSq8BF16AVX2,
			scaleF32: lnScaleF32AVX512, scaleBF16: lnScaleBF16AVX512, dot8F32: lnDot8F32AVX2,
			dot8BF16: lnDot8BF16AVX2, dxAccF32: lnDXAccF32AVX512, dxAccBF16: lnDXAccBF16AVX512}})
	}
	if dispatch.HasAVX2(false) {
		out = append(out, dispatch.Impl[lnKernels]{Name: "avx2", Kernels: &lnKernels{lanes: 8,
			sum8F32: sum8F32AVX2, sum8BF16: sum8BF16AVX2, devSq8F32: devSq8F32AVX2, devSq8BF16: devSq8BF16AVX2,
			scaleF32: lnScaleF32AVX2, scaleBF16: lnScaleBF16AVX2, dot8F32: lnDot8F32AVX2,
			dot8BF16: lnDot8BF16AVX2, dxAccF32: lnDXAccF32AVX2, dxAccBF16: lnDXAccBF16AVX2}})
	}
	return out
}
