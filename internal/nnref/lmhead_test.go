package nnref

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestLMHead(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	n, d, v := LMRowBlock+19, 5, 2*LMVocabChunk+37 // partial row blocks and a partial vocabulary chunk
	h, w := randn(r, n*d, 1), randn(r, v*d, 1)
	targets := make([]int32, n)
	for i := range targets {
		targets[i] = int32(r.IntN(v))
	}
	const temp = 0.8
	logp, ent := make([]float64, n), make([]float64, n)
	LMHead(n, v, RefKernels[float64]{D: d, H: h, W: w}, targets, temp, logp, ent)
	for i := range n { // against the materialised logits row
		z := make([]float64, v)
		m := math.Inf(-1)
		for j := range v {
			for p := range d {
				z[j] += h[i*d+p] * w[j*d+p]
			}
			z[j] /= temp
			m = math.Max(m, z[j])
		}
		var s float64
		for _, x := range z {
			s += math.Exp(x - m)
		}
		lse := m + math.Log(s)
		var e float64
		for _, x := range z {
			e -= math.Exp(x-lse) * (x - lse)
		}
		near(t, "logp", logp[i:i+1], []float64{z[targets[i]] - lse}, 1e-12)
		near(t, "entropy", ent[i:i+1], []float64{e}, 1e-12)
	}

	gl, ge := randn(r, n, 1), randn(r, n, 1)
	g := LMHeadGrad[float64]{Targets: targets, LogP: logp, Ent: ent, DLogP: gl, DEnt: ge, Temp: temp}
	dh, dw := make([]float64, n*d), make([]float64, v*d)
	LMHeadBackward(n, d, v, RefKernels[float64]{D: d, H: h, W: w}, g, dh, dw, false)
	loss := func() float64 {
		LMHead(n, v, RefKernels[float64]{D: d, H: h, W: w}, targets, temp, logp, ent)
		return dotLoss(gl, logp) + dotLoss(ge, ent)
	}
	for _, row := range []int{0, 1, LMRowBlock - 1, LMRowBlock, n - 1} { // each row block, both ends
		fdStep(t, "dh", h[row*d:(row+1)*d], loss, dh[row*d:(row+1)*d], 1e-5)
	}
	// Perturb a sample of the vocabulary rows only (the full set is slow): the target rows and a
	// few others, compared through a restricted loss.
	rowsToCheck := []int{int(targets[0]), int(targets[1]), 0, LMVocabChunk, v - 1}
	for _, row := range rowsToCheck {
		fdStep(t, "dw", w[row*d:(row+1)*d], loss, dw[row*d:(row+1)*d], 1e-5)
	}
}

// TestRoundBF16: nearest bfloat16 with ties to even (bfloat16 keeps 7 fraction bits), exact
// values unchanged, NaN kept.
func TestRoundBF16(t *testing.T) {
	x := []float64{1, 1 + 0x1p-9, 1 + 0x1p-8, 1 + 3*0x1p-8, -2.5, 1 - 0x1p-10, math.NaN()}
	want := []float64{1, 1, 1, 1 + 0x1p-6, -2.5, 1, math.NaN()}
	RoundBF16(x)
	for i := range x {
		if x[i] != want[i] && !(math.IsNaN(x[i]) && math.IsNaN(want[i])) {
			t.Errorf("RoundBF16 element %d = %v, want %v", i, x[i], want[i])
		}
	}
}
