package tensor_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/tensor"
)

// TestLinearBackwardGradBF16 checks LinearGrad.GradBF16 against float64 sums of the exact
// products of the rounded dy: dx = bf16(dy)·W and dw = dw₀ + bf16(dy)ᵀ·x. The products are
// exact in float32 (bfloat16 operands, or the float32 path's widened ones), so the only error
// is the float32 additions — N (or M) terms plus one per 256-long block, plus one for the
// accumulated dw — each within 2⁻²⁴ of the running sum: |err| ≤ adds·2⁻²⁴·Σ|terms| (×1.01).
// It also checks the documented distance to the float32 backward's dy·W, (2⁻⁸ + adds·2⁻²⁴)·
// Σ|dy|·|w|, that dbias is the float32 backward's bit for bit, and that a weight without kept
// transposed panels gives the same bits. Shapes: N = 300 (two blocks of the transposed
// weight's K), M = 37 (an odd K for x's transposed pairs). With the vector kernels forced off
// the pure-Go reference runs; with a float32 weight (or x) the float32 GEMM runs on the
// rounded dy.
func TestLinearBackwardGradBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	const m, n, k = 37, 300, 70
	randv := func(l int) []float32 {
		v := make([]float32, l)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	bf := func(v []float32, s ...int) *tensor.Tensor {
		b := make([]tensor.BF16, len(v))
		tensor.RoundToBF16(b, v)
		return tensor.Must(tensor.FromBF16(b, s...))
	}
	xv, wv, dyv, dw0, db0 := randv(m*k), randv(n*k), randv(m*n), randv(n*k), randv(n)
	tensor.RoundFloat32s(xv)
	tensor.RoundFloat32s(wv)
	dyr := append([]float32(nil), dyv...)
	tensor.RoundFloat32s(dyr)
	for _, c := range []struct {
		name    string
		bf16    bool // x and w bfloat16 tensors (else float32 holding the same values)
		forceGo bool
		keepT   bool
	}{{"bf16", true, false, true}, {"bf16/no-keep", true, false, false}, {"float32", false, false, true}, {"bf16/go", true, true, true}} {
		t.Run(c.name, func(t *testing.T) {
			if c.forceGo {
				defer dispatch.ForceGo()()
			}
			x, w := tensor.Must(tensor.FromFloat32(xv, m, k)), tensor.Must(tensor.FromFloat32(wv, n, k))
			if c.bf16 {
				x, w = bf(xv, m, k), bf(wv, n, k)
			}
			p, err := tensor.PackWeight(w)
			if err != nil {
				t.Fatal(err)
			}
			p.KeepTransposed(c.keepT)
			run := func(round bool) (dx, dw, db []float32) {
				dxt := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, m, k))
				dwt := tensor.Must(tensor.FromFloat32(append([]float32(nil), dw0...), n, k))
				dbt := tensor.Must(tensor.FromFloat32(append([]float32(nil), db0...), n))
				dyt := tensor.Must(tensor.FromFloat32(append([]float32(nil), dyv...), m, n))
				if err := tensor.LinearBackward(tensor.LinearGradOut{DX: dxt, DWeight: dwt, DBias: dbt},
					tensor.LinearGrad{X: x, Weight: p, DY: dyt, Accumulate: true, GradBF16: round}); err != nil {
					t.Fatal(err)
				}
				dx, _ = dxt.Float32s()
				dw, _ = dwt.Float32s()
				db, _ = dbt.Float32s()
				return dx, dw, db
			}
			dx, dw, db := run(true)
			if _, _, db32 := run(false); !slices.Equal(db, db32) {
				t.Fatal("dbias differs from the float32 backward's")
			}
			if dx2, dw2, _ := run(true); !slices.Equal(dx, dx2) || !slices.Equal(dw, dw2) {
				t.Fatal("a second backward (reused or repacked transposed weight) differs")
			}
			check := func(name string, got float32, want, sum, want32, sum32 float64, terms int, acc bool) {
				t.Helper()
				adds := float64(terms + (terms+255)/256)
				if acc {
					adds++
				}
				if e, bound := math.Abs(float64(got)-want), 1.01*adds*0x1p-24*sum; !(e <= bound) {
					t.Fatalf("%s = %v, want %v (error %g, bound %g)", name, got, want, e, bound)
				}
				if e, bound := math.Abs(float64(got)-want32), 1.01*(0x1p-8+adds*0x1p-24)*sum32; !(e <= bound) {
					t.Fatalf("%s = %v, float32 backward's %v (distance %g, bound %g)", name, got, want32, e, bound)
				}
			}
			for i := range m {
				for j := range k {
					var want, sum, want32, sum32 float64
					for o := range n {
						want += float64(dyr[i*n+o]) * float64(wv[o*k+j])
						sum += math.Abs(float64(dyr[i*n+o]) * float64(wv[o*k+j]))
						want32 += float64(dyv[i*n+o]) * float64(wv[o*k+j])
						sum32 += math.Abs(float64(dyv[i*n+o]) * float64(wv[o*k+j]))
					}
					check(fmt.Sprintf("dx[%d,%d]", i, j), dx[i*k+j], want, sum, want32, sum32, n, false)
				}
			}
			for o := range n {
				for j := range k {
					want, want32 := float64(dw0[o*k+j]), float64(dw0[o*k+j])
					sum, sum32 := math.Abs(want), math.Abs(want)
					for i := range m {
						want += float64(dyr[i*n+o]) * float64(xv[i*k+j])
						sum += math.Abs(float64(dyr[i*n+o]) * float64(xv[i*k+j]))
						want32 += float64(dyv[i*n+o]) * float64(xv[i*k+j])
						sum32 += math.Abs(float64(dyv[i*n+o]) * float64(xv[i*k+j]))
					}
					check(fmt.Sprintf("dw[%d,%d]", o, j), dw[o*k+j], want, sum, want32, sum32, m, true)
				}
			}
		})
	}
}
