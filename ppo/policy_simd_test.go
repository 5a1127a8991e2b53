package ppo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/tensor"
)

// simdPolicyInputs is a [B, T] batch whose log ratios straddle the clip bounds and ±20, with
// both advantage signs, NaN/±Inf tokens (some masked out), fractional masks and exact ties.
func simdPolicyInputs(r *rand.Rand, B, T int, withLTM, finite bool) (in PolicyInputs, raw [5][]float32) {
	n := B * T
	for i := range raw {
		raw[i] = make([]float32, n)
	}
	old, lp, adv, m, ltm := raw[0], raw[1], raw[2], raw[3], raw[4]
	special := []float32{0, 0.2623643, -0.22314355, 20, -20, 21, -21, 1e-7,
		float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	if finite {
		special = special[:8]
	}
	for j := range n {
		old[j] = float32(-3 * r.Float64())
		x := float32(r.NormFloat64() * 0.3)
		if r.IntN(6) == 0 {
			x = special[r.IntN(len(special))]
		}
		lp[j] = old[j] + x
		adv[j] = float32(r.NormFloat64())
		switch r.IntN(20) {
		case 0:
			adv[j] = 0
		case 1:
			if !finite {
				adv[j] = float32(math.NaN())
			}
		case 2:
			adv[j] = -1e30
		}
		if r.Float64() < 0.85 {
			m[j] = 1
		} else if r.IntN(3) == 0 {
			m[j] = 0.5
		}
		ltm[j] = float32(r.IntN(2))
	}
	mk := func(x []float32) *tensor.Tensor { return tensor.Must(tensor.FromFloat32(x, B, T)) }
	in = PolicyInputs{OldLogProbs: mk(old), LogProbs: mk(lp), Advantages: mk(adv), ResponseMask: mk(m)}
	if withLTM {
		in.TokenMask = mk(ltm)
	}
	return in, raw
}

// sameResult compares results field by field, two NaNs being equal.
func sameResult(a, b PolicyResult) bool {
	fa := []float64{float64(a.Loss), float64(a.PGLoss), a.PPOKL, a.EntropyLoss, a.ClipFracHigher, a.ClipFracLower}
	fb := []float64{float64(b.Loss), float64(b.PGLoss), b.PPOKL, b.EntropyLoss, b.ClipFracHigher, b.ClipFracLower}
	for i := range fa {
		if !closeF(fa[i], fb[i], 0) {
			return false
		}
	}
	return a.LossType == b.LossType
}

func closeF(a, b, rtol float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return a == b || math.Abs(a-b) <= rtol*math.Max(math.Abs(a), math.Abs(b))
}

// TestPolicySIMDVsGo compares the vector kernels with the Go kernel for the Vanilla loss on
// edge row lengths, with and without TokenMask, gradient stored or accumulated: the gradient
// agrees per token to a few ulp (NaN where the Go one is NaN), the loss and metrics to 1e-5
// relative, and repeated runs are bit-identical.
func TestPolicySIMDVsGo(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for _, im := range policyImpls.SIMD() {
		for _, T := range []int{1, 15, 16, 17, 31, 32, 33, 1023, 1025} {
			for _, withLTM := range []bool{false, true} {
				for _, acc := range []bool{false, true} {
					for _, finite := range []bool{false, true} {
						tag := fmt.Sprintf("%s T=%d ltm=%v acc=%v finite=%v", im.Name, T, withLTM, acc, finite)
						in, _ := simdPolicyInputs(r, 3, T, withLTM, finite)
						cfg := fill(PolicyConfig{ClipHigh: 0.3})
						init := make([]float32, 3*T)
						for j := range init {
							init[j] = float32(j%7) - 3
						}
						run := func(name string) (PolicyResult, []float32) {
							defer policyImpls.Use(name)()
							g := append([]float32(nil), init...)
							res, err := PolicyLoss(Grad{Dst: tensor.Must(tensor.FromFloat32(g, 3, T)), Accumulate: acc}, in, cfg)
							if err != nil {
								t.Fatal(err)
							}
							return res, g
						}
						wr, wg := run(dispatch.GoName)
						gr, gg := run(im.Name)
						gr2, gg2 := run(im.Name)
						if !sameResult(gr, gr2) {
							t.Fatalf("%s: not deterministic: %+v vs %+v", tag, gr, gr2)
						}
						for _, f := range [][2]float64{
							{float64(gr.PGLoss), float64(wr.PGLoss)}, {gr.PPOKL, wr.PPOKL}, {gr.EntropyLoss, wr.EntropyLoss},
							{gr.ClipFracHigher, wr.ClipFracHigher}, {gr.ClipFracLower, wr.ClipFracLower},
						} {
							if !closeF(f[0], f[1], 1e-5) {
								t.Fatalf("%s: result %+v, want %+v", tag, gr, wr)
							}
						}
						for j := range wg {
							if math.Float32bits(gg[j]) != math.Float32bits(gg2[j]) {
								t.Fatalf("%s: gradient[%d] not deterministic", tag, j)
							}
							if !closeF(float64(gg[j]), float64(wg[j]), 1e-6) && math.Abs(float64(gg[j]-wg[j])) > 1e-30 {
								t.Fatalf("%s: gradient[%d] = %v, want %v", tag, j, gg[j], wg[j])
							}
						}
					}
				}
			}
		}
	}
}

// TestPolicySIMDGOMAXPROCS checks a large batch gives the same bits on one core and on all.
func TestPolicySIMDGOMAXPROCS(t *testing.T) {
	in, _ := simdPolicyInputs(rand.New(rand.NewPCG(1, 9)), 200, 1000, true, true)
	run := func() (PolicyResult, []float32) {
		g := make([]float32, 200*1000)
		res, err := PolicyLoss(Grad{Dst: tensor.Must(tensor.FromFloat32(g, 200, 1000))}, in, fill(PolicyConfig{}))
		if err != nil {
			t.Fatal(err)
		}
		return res, g
	}
	old := runtime.GOMAXPROCS(1)
	r1, g1 := run()
	runtime.GOMAXPROCS(old)
	r2, g2 := run()
	if !sameResult(r1, r2) {
		t.Fatalf("GOMAXPROCS=1 %+v != %+v", r1, r2)
	}
	for j := range g1 {
		if math.Float32bits(g1[j]) != math.Float32bits(g2[j]) {
			t.Fatalf("gradient[%d]: %v vs %v", j, g1[j], g2[j])
		}
	}
}
