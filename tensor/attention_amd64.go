//go:build !noasm

package tensor

import "github.com/mtrl-go/mtrl/internal/dispatch"

//go:generate go run -C ../internal/asmgen . -family attention -out ../../tensor/attention_amd64.s -stubs ../../tensor/attention_stub_amd64.go -pkg tensor

// attnSIMDImpls returns the vector row kernels of the CPU attention this CPU supports, best first: AVX-512F+DQ (16 lanes), then AVX2 with FMA (8 lanes); generated with avo by
// internal/asmgen (attention family) into attention_amd64.s.
func attnSIMDImpls() []dispatch.Impl[attnSIMD] {
	var out []dispatch.Impl[attnSIMD]
	if dispatch.HasAVX512(true) {
		out = append(out, dispatch.Impl[attnSIMD]{Name: "avx512", Kernels: &attnSIMD{softmax: attnSoftmaxAVX512, bwd: attnBwdAVX512}})
	}
	if dispatch.HasAVX2(true) {
		out = append(out, dispatch.Impl[attnSIMD]{Name: "avx2", Kernels: &attnSIMD{softmax: attnSoftmaxAVX2, bwd: attnBwdAVX2}})
	}
	return out
}
