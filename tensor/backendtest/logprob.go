package backendtest

import (
	"fmt"
	"math"
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
				// A logit's gradient is a difference of terms that can cancel; two float32
				// kernels (a device's expf within 2 ulp of the host's) differ by a fraction of
				// those terms, not of the result: 1e-4 of their size on top.
				terms := dlogitTerms(x, dt.logits, ys, gl, ge, ent, n, v, 0.9)
				nearTerms(t, "dlogits", gdl, dl, terms, rtol, 1e-4, atol)
				alp, aent, adl := run(b)
				if !same(glp, alp) || !same(gent, aent) || !same(gdl, adl) {
					t.Error("two runs differ")
				}
			})
		}
	}
}

// dlogitTerms returns, per logit, the size of the terms its gradient is the difference of:
// (|gl|·(p + [i=y]) + |ge|·p·(|log p| + H))/T, in float64 from the logits the backends saw
// (x rounded to bfloat16 when that is their dtype) and the reference's entropy H.
func dlogitTerms(x []float32, dt tensor.DType, ys []int32, gl, ge, ent []float32, n, v int, temp float64) []float64 {
	terms := make([]float64, n*v)
	z := make([]float64, v)
	for i := range n {
		m := math.Inf(-1)
		for j := range v {
			xv := x[i*v+j]
			if dt == tensor.BFloat16 {
				xv = tensor.BF16FromFloat32(xv).Float32()
			}
			z[j] = float64(xv) / temp
			m = math.Max(m, z[j])
		}
		var s float64
		for _, zj := range z {
			s += math.Exp(zj - m)
		}
		lse := m + math.Log(s)
		a, b, h := math.Abs(float64(gl[i])), math.Abs(float64(ge[i])), float64(ent[i])
		for j, zj := range z {
			lp := zj - lse
			p := math.Exp(lp)
			t := a*p + b*p*(math.Abs(lp)+h)
			if j == int(ys[i]) {
				t += a
			}
			terms[i*v+j] = t / temp
		}
	}
	return terms
}
