//go:build !noasm

package tensor

import "github.com/mtrl-go/mtrl/internal/dispatch"

//go:generate go run -C ../internal/asmgen . -out ../../tensor/logprob_amd64.s -stubs ../../tensor/logprob_stub_amd64.go -pkg tensor

// simdImpls returns the vector implementations of the log-prob loops this CPU supports, best
// first: AVX-512F (16 lanes), then AVX2 with FMA (8 lanes). The kernels are generated with avo
// by internal/asmgen into logprob_amd64.s; build with -tags noasm to use only the pure-Go code.
func simdImpls() []dispatch.Impl[lpSIMD] {
	var out []dispatch.Impl[lpSIMD]
	if dispatch.HasAVX512(false) {
		out = append(out, dispatch.Impl[lpSIMD]{Name: "avx512", Kernels: &lpSIMD{
			lanes: 16,
			max32: maxF32AVX512, max16: maxBF16AVX512,
			fold32: foldF32AVX512, fold32s: foldF32ScaledAVX512,
			fold16: foldBF16AVX512, fold16s: foldBF16ScaledAVX512,
			bwd32to32:   [2]func(out, x []float32, temp, logZ, gl, ge, h, negInvT float32){bwdF32AVX512, bwdF32ScaledAVX512},
			bwd32to16:   [2]func(out []uint16, x []float32, temp, logZ, gl, ge, h, negInvT float32){bwdF32To16AVX512, bwdF32To16ScaledAVX512},
			bwd16to32:   [2]func(out []float32, x []uint16, temp, logZ, gl, ge, h, negInvT float32){bwdBF16AVX512, bwdBF16ScaledAVX512},
			bwd16to16:   [2]func(out, x []uint16, temp, logZ, gl, ge, h, negInvT float32){bwdBF16To16AVX512, bwdBF16To16ScaledAVX512},
			bwd32to32nt: [2]func(out, x []float32, temp, logZ, gl, ge, h, negInvT float32){bwdF32NTAVX512, bwdF32NTScaledAVX512},
			bwd16to32nt: [2]func(out []float32, x []uint16, temp, logZ, gl, ge, h, negInvT float32){bwdBF16NTAVX512, bwdBF16NTScaledAVX512},
		}})
	}
	if dispatch.HasAVX2(true) {
		out = append(out, dispatch.Impl[lpSIMD]{Name: "avx2", Kernels: &lpSIMD{
			lanes: 8,
			max32: maxF32AVX2, max16: maxBF16AVX2,
			fold32: foldF32AVX2, fold32s: foldF32ScaledAVX2,
			fold16: foldBF16AVX2, fold16s: foldBF16ScaledAVX2,
			bwd32to32:   [2]func(out, x []float32, temp, logZ, gl, ge, h, negInvT float32){bwdF32AVX2, bwdF32ScaledAVX2},
			bwd32to16:   [2]func(out []uint16, x []float32, temp, logZ, gl, ge, h, negInvT float32){bwdF32To16AVX2, bwdF32To16ScaledAVX2},
			bwd16to32:   [2]func(out []float32, x []uint16, temp, logZ, gl, ge, h, negInvT float32){bwdBF16AVX2, bwdBF16ScaledAVX2},
			bwd16to16:   [2]func(out, x []uint16, temp, logZ, gl, ge, h, negInvT float32){bwdBF16To16AVX2, bwdBF16To16ScaledAVX2},
			bwd32to32nt: [2]func(out, x []float32, temp, logZ, gl, ge, h, negInvT float32){bwdF32NTAVX2, bwdF32NTScaledAVX2},
			bwd16to32nt: [2]func(out []float32, x []uint16, temp, logZ, gl, ge, h, negInvT float32){bwdBF16NTAVX2, bwdBF16NTScaledAVX2},
		}})
	}
	return out
}
