package backendtest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/tensor"
)

// LogProb cross-checks the fused log-prob + entropy forward and its backward at vocabulary
// scale (few rows, so a backend may split rows across blocks, and many rows) for every pair of
// logits and gradient dtypes, and checks that two runs are bitwise equal. The reference's exp
// is the host's, so these tolerances hold with Config.Bitwise too.
func LogProb(t *testing.T, b tensor.Backend, cfg Config) {
	defer dispatch.ForceGo()()
	type dtypes struct{ logits, grad tensor.DType }
	for _, dt := range []dtypes{{tensor.Float32, tensor.Float32}, {tensor.BFloat16, tensor.BFloat16},
		{tensor.BFloat16, tensor.Float32}, {tensor.Float32, tensor.BFloat16}} {
		for _, s := range cfg.logitShapes() {
			t.Run(fmt.Sprintf("dtype=%v/grad=%v/shape=%dx%d", dt.logits, dt.grad, s[0], s[1]), func(t *testing.T) {
				n, v := s[0], s[1]
				r := rand.New(rand.NewPCG(7, uint64(n)))
				x := Randn(r, n*v, 3)
				h := tensor.Must(tensor.FromFloat32(x, n, v))
				if dt.logits == tensor.BFloat16 {
					bf := make([]tensor.BF16, len(x))
					for i := range x {
						bf[i] = tensor.BF16FromFloat32(x[i])
					}
					h = tensor.Must(tensor.FromBF16(bf, n, v))
				}
				ys := make([]int32, n)
				for i := range ys {
					ys[i] = int32(r.IntN(v))
				}
				gl, ge := Randn(r, n, 1), Randn(r, n, 1)
				run := func(be tensor.Backend) (lp, ent, dl []float32) {
					logits, err := tensor.To(be, h)
					if err != nil {
						t.Fatal(err)
					}
					y := UploadInt32(t, be, ys, n)
					l, e := NewF32(be, n), NewF32(be, n)
					if err := tensor.LogProbEntropy(l, e, logits, y, 0.9); err != nil {
						t.Fatal(err)
					}
					d := tensor.Must(tensor.New(be, dt.grad, n, v))
					if err := tensor.LogProbEntropyBackward(d, tensor.LogProbGrad{
						Logits: logits, Targets: y, LogProbs: l, Entropy: e,
						DLogProbs: Upload(t, be, gl, n), DEntropy: Upload(t, be, ge, n),
						Temperature: 0.9,
					}); err != nil {
						t.Fatal(err)
					}
					return Host(t, l), Host(t, e), Host(t, d)
				}
				lp, ent, dl := run(tensor.CPU())
				glp, gent, gdl := run(b)
				near(t, "logp", glp, lp, 1e-5, 1e-4)
				near(t, "entropy", gent, ent, 1e-5, 1e-4)
				rtol, atol := 1e-4, 1e-7
				if dt.grad == tensor.BFloat16 {
					rtol, atol = 8e-3, 1e-7 // one bfloat16 rounding of the gradient
				}
				near(t, "dlogits", gdl, dl, rtol, atol)
				alp, aent, adl := run(b)
				if !same(glp, alp) || !same(gent, aent) || !same(gdl, adl) {
					t.Error("two runs differ")
				}
			})
		}
	}
}
