package vlm

import (
	"math"
	"math/rand/v2"
	"testing"
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

// TestSoftmaxSIMDMatchesReference: rows of every length up to 64 with scores spread over exp's
// whole range (down to below expMin, where the reference's exp is 0), and NaN.
func TestSoftmaxSIMDMatchesReference(t *testing.T) {
	requireKernels(t)
	rng := rand.New(rand.NewPCG(1, 1))
	for lim := 1; lim <= 64; lim++ {
		for _, spread := range []float64{1, 30, 400} {
			ref, got := make([]float32, ceil8(lim)), make([]float32, ceil8(lim))
			for j := range lim {
				ref[j] = float32(spread * rng.NormFloat64())
			}
			copy(got, ref)
			softmax(false, ref, lim, 0.25)
			softmax(true, got, lim, 0.25)
			within(t, "softmax", got[:lim], ref[:lim], 1e-6)
			for j := lim; j < len(got); j++ {
				if got[j] != 0 {
					t.Fatalf("padding lane %d of %d: %v, want 0", j, lim, got[j])
				}
			}
		}
	}
	nan := []float32{1, float32(math.NaN()), 2, 0, 0, 0, 0, 0}
	softmax(true, nan, 3, 1)
	if !math.IsNaN(float64(nan[0])) {
		t.Fatalf("softmax with a NaN score: %v, want NaN", nan[:3])
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
