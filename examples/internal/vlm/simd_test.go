package vlm

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/internal/hostops"
)

// useReferenceKernels makes Model run the pure-Go reference kernels (HostOps') for the test.
func useReferenceKernels(t *testing.T) {
	t.Helper()
	saved := modelSIMD
	modelSIMD = false
	t.Cleanup(func() { modelSIMD = saved })
}

func requireKernels(t *testing.T) {
	t.Helper()
	if !hasKernel {
		t.Skip("no AVX2 kernels in this build or on this CPU")
	}
}

// within fails unless |got - want| <= tol·(1 + |want|) for every element.
func within(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(w) != math.IsNaN(g) || math.Abs(g-w) > tol*(1+math.Abs(w)) {
			t.Fatalf("%s[%d]: simd %v, reference %v (tolerance %g relative)", what, i, g, w, tol)
		}
	}
}

// TestExpShiftMatchesExp32: the vector exp against hostops.Exp32 over softmax's range and the
// special values.
func TestExpShiftMatchesExp32(t *testing.T) {
	requireKernels(t)
	rng := rand.New(rand.NewPCG(1, 1))
	x := []float32{0, -0.0, -87.3, -87.34, -88, -100, -1e30, float32(math.Inf(-1)), float32(math.NaN()), 1e-8, -1e-8, 0.34, 10, 80, 88}
	for len(x)%8 != 0 || len(x) < 4096 {
		x = append(x, float32(-90*rng.Float64()))
	}
	got := append([]float32(nil), x...)
	expShift(len(got), &got[0], 0)
	for i, v := range x {
		want := hostops.Exp32(v)
		g := got[i]
		switch {
		case math.IsNaN(float64(want)):
			if !math.IsNaN(float64(g)) {
				t.Fatalf("exp(%v) = %v, want NaN", v, g)
			}
		case math.Abs(float64(g-want)) > 4e-7*float64(want):
			t.Fatalf("exp(%v) = %v, Exp32 %v", v, g, want)
		}
	}
}

func TestGELUSIMDMatchesReference(t *testing.T) {
	requireKernels(t)
	rng := rand.New(rand.NewPCG(2, 2))
	u := make([]float32, 1003) // not a multiple of 8: the tail takes the reference loop
	for i := range u {
		u[i] = float32(6 * rng.NormFloat64())
	}
	u[0], u[1], u[2] = -60, 60, float32(math.NaN())
	ref, got := make([]float32, len(u)), make([]float32, len(u))
	gelu(u, ref, false)
	gelu(u, got, true)
	within(t, "gelu", got, ref, 1e-6)
	for i := range ref {
		ref[i], got[i] = float32(rng.NormFloat64()), 0
	}
	copy(got, ref)
	geluBack(u, ref, false)
	geluBack(u, got, true)
	within(t, "geluBack", got, ref, 1e-6)
}

// TestAttentionSIMDMatchesReference at the trainer's shapes (16 patches + 43 text tokens, heads
// of 16): probabilities, outputs and the backward's dqkv against the reference kernels.
func TestAttentionSIMDMatchesReference(t *testing.T) {
	requireKernels(t)
	c := DefaultConfig(73)
	c.MaxLen = 43
	b, s := 3, c.Patches()+43
	n, d := b*s, c.Dim
	rng := rand.New(rand.NewPCG(3, 3))
	rnd := func(k int, sd float64) []float32 {
		v := make([]float32, k)
		for i := range v {
			v[i] = float32(sd * rng.NormFloat64())
		}
		return v
	}
	qkv, dao := rnd(n*3*d, 1.5), rnd(n*d, 1)
	pRef, pGot := make([]float32, b*c.Heads*s*s), make([]float32, b*c.Heads*s*s)
	aoRef, aoGot := make([]float32, n*d), make([]float32, n*d)
	attention(c, b, s, qkv, pRef, aoRef, false)
	attention(c, b, s, qkv, pGot, aoGot, true)
	within(t, "p", pGot, pRef, 1e-5)
	within(t, "ao", aoGot, aoRef, 1e-5)
	dRef, dGot := make([]float32, n*3*d), make([]float32, n*3*d)
	attentionBack(c, b, s, qkv, pRef, dao, dRef, false)
	attentionBack(c, b, s, qkv, pRef, dao, dGot, true)
	within(t, "dqkv", dGot, dRef, 1e-5)
}
