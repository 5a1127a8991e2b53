//go:build !noasm

package ppo

import "github.com/mtrl-go/mtrl/internal/dispatch"

//go:generate go run -C ../internal/asmgen . -family policy -out ../../ppo/policy_amd64.s -stubs ../../ppo/policy_stub_amd64.go -pkg ppo

// simdPolicyImpls returns the vector implementations of the Vanilla policy loss this CPU
// supports, best first: AVX-512F (16 lanes), then AVX2 with FMA (8 lanes). The kernels are
// generated with avo by internal/asmgen into policy_amd64.s; build with -tags noasm to use only
// the pure-Go code.
func simdPolicyImpls() []dispatch.Impl[policySIMD] {
	var out []dispatch.Impl[policySIMD]
	if dispatch.HasAVX512(true) {
		out = append(out, dispatch.Impl[policySIMD]{Name: "avx512", Kernels: &policySIMD{lanes: 16, fn: [3][2]policyFn{
			{policyLossAVX512, policyLossLTMAVX512},
			{policyGradAVX512, policyGradLTMAVX512},
			{policyGradAccAVX512, policyGradAccLTMAVX512},
		}}})
	}
	if dispatch.HasAVX2(true) {
		out = append(out, dispatch.Impl[policySIMD]{Name: "avx2", Kernels: &policySIMD{lanes: 8, fn: [3][2]policyFn{
			{policyLossAVX2, policyLossLTMAVX2},
			{policyGradAVX2, policyGradLTMAVX2},
			{policyGradAccAVX2, policyGradAccLTMAVX2},
		}}})
	}
	return out
}
