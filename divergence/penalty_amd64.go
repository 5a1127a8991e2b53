//go:build !noasm

package divergence

import "github.com/mtrl-go/mtrl/internal/dispatch"

//go:generate go run -C ../internal/asmgen . -family penalty -out ../../divergence/penalty_amd64.s -stubs ../../divergence/penalty_stub_amd64.go -pkg divergence

// simdPenaltyImpls returns the vector implementations of low_var_kl, its gradient and the
// perception score that this CPU supports, best first: AVX-512F (16 lanes), then AVX2 with FMA
// (8 lanes). The kernels are generated with avo by internal/asmgen into penalty_amd64.s; build
// with -tags noasm to use only the pure-Go code.
func simdPenaltyImpls() []dispatch.Impl[penaltySIMD] {
	var out []dispatch.Impl[penaltySIMD]
	if dispatch.HasAVX512(true) {
		out = append(out, dispatch.Impl[penaltySIMD]{Name: "avx512", Kernels: &penaltySIMD{
			lanes: 16, lowVarKL: lowVarKLAVX512, grad: lowVarKLGradAVX512, perception: perceptionAVX512,
		}})
	}
	if dispatch.HasAVX2(true) {
		out = append(out, dispatch.Impl[penaltySIMD]{Name: "avx2", Kernels: &penaltySIMD{
			lanes: 8, lowVarKL: lowVarKLAVX2, grad: lowVarKLGradAVX2, perception: perceptionAVX2,
		}})
	}
	return out
}
