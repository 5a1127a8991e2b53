//go:build !noasm

package gemm

import (
	"golang.org/x/sys/cpu"

	"github.com/mtrl-go/mtrl/internal/dispatch"
)

//go:generate go run -C ../asmgen . -family gemmbf16 -out ../gemm/gemmbf16_amd64.s -stubs ../gemm/gemmbf16_stub_amd64.go -pkg gemm

// simdBF16Impls returns the VDPBF16PS micro-kernels when the CPU has AVX512_BF16 (with
// AVX512F and DQ, as the float32 kernels).
func simdBF16Impls() []dispatch.Impl[kernelsBF16] {
	if !dispatch.HasAVX512(true) || !cpu.X86.HasAVX512BF16 {
		return nil
	}
	return []dispatch.Impl[kernelsBF16]{{Name: "avx512bf16", Kernels: &kernelsBF16{
		tile: [MR + 1]tileBF16Fn{nil, gemm1x64BF16, gemm2x64BF16, gemm3x64BF16, gemm4x64BF16, gemm5x64BF16, gemm6x64BF16}}}}
}
