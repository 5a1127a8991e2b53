package nntest

import (
	"fmt"
	"testing"

	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/tensor"
)

// LMHead checks the fused LM head's log-probs, entropies and gradients (hidden states and head
// weight, accumulated; hidden states alone for a frozen head, nil dweight) against the float64
// reference, with float32 and bfloat16 inputs.
func LMHead(t *testing.T, b tensor.Backend) {
	for _, bf16 := range []bool{false, true} {
		t.Run(fmt.Sprint("bf16=", bf16), func(t *testing.T) {
			e := newEnv(t, b, 29)
			const n, d, v, temp = 157, 48, 3001, 0.7 // partial row blocks, panels and vocabulary chunks
			hv, wv := e.randn(n*d, 1, bf16), e.randn(v*d, 0.2, bf16)
			ys := make([]int32, n)
			for i := range ys {
				ys[i] = int32(e.r.IntN(v))
			}
			glv, gev, dw0 := e.randn(n, 1, false), e.randn(n, 1, false), e.randn(v*d, 1, false)
			got := twice(t, func() [][]float32 {
				w, err := tensor.PackWeight(e.put(wv, bf16, v, d))
				e.ok(err)
				in := tensor.LMHeadInputs{Hidden: e.put(hv, bf16, n, d), Weight: w, Targets: e.i32(ys, n), Temperature: temp}
				lp, ent := e.zeros(n), e.zeros(n)
				e.ok(tensor.LMHeadLogProbs(lp, ent, in))
				dh, dw := e.zeros(n, d), e.f32(append([]float32(nil), dw0...), v, d)
				e.ok(tensor.LMHeadBackward(dh, dw, tensor.LMHeadGrad{LMHeadInputs: in, LogProbs: lp, Entropy: ent,
					DLogProbs: e.f32(glv, n), DEntropy: e.f32(gev, n), Accumulate: true}))
				frozen := e.zeros(n, d) // a nil dweight: the head's gradient is not computed
				e.ok(tensor.LMHeadBackward(frozen, nil, tensor.LMHeadGrad{LMHeadInputs: in, LogProbs: lp, Entropy: ent,
					DLogProbs: e.f32(glv, n), DEntropy: e.f32(gev, n)}))
				return [][]float32{e.host(lp), e.host(ent), e.host(dh), e.host(dw), e.host(frozen)}
			})
			h, w := f64(hv), f64(wv)
			lp, ent := make([]float64, n), make([]float64, n)
			ref := nnref.RefKernels[float64]{D: d, H: h, W: w}
			nnref.LMHead(n, v, ref, ys, temp, lp, ent)
			dh, dw := make([]float64, n*d), f64(dw0)
			nnref.LMHeadBackward(n, d, v, ref, nnref.LMHeadGrad[float64]{Targets: ys, LogP: lp, Ent: ent, DLogP: f64(glv), DEnt: f64(gev), Temp: temp}, dh, dw, true)
			near(t, "logp", got[0], lp, 1e-5, 1e-4)
			near(t, "entropy", got[1], ent, 1e-5, 1e-4)
			near(t, "dhidden", got[2], dh, 1e-4, 1e-4)
			near(t, "dweight", got[3], dw, 1e-4, 1e-5)
			near(t, "dhidden (frozen head)", got[4], dh, 1e-4, 1e-4)
		})
	}
}
