package nntest

import (
	"math"
	"testing"

	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/tensor"
)

// AdamW checks three AdamW steps (with the bfloat16 parameter copy) against the float32
// reference, and GradNorm and ClipGradNorm against float64 sums.
func AdamW(t *testing.T, b tensor.Backend) {
	e := newEnv(t, b, 28)
	const n = 5000
	cfg := tensor.AdamWConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	p0 := e.randn(n, 1, false)
	grads := [][]float32{e.randn(n, 1, false), e.randn(n, 0.1, false), e.randn(n, 10, false)}
	got := twice(t, func() [][]float32 {
		p, m, v := e.f32(append([]float32(nil), p0...), n), e.zeros(n), e.zeros(n)
		pb, err := tensor.New(b, tensor.BFloat16, n)
		e.ok(err)
		for step, g := range grads {
			e.ok(tensor.AdamWStep(tensor.AdamWParams{Param: p, Grad: e.f32(g, n), ExpAvg: m, ExpAvgSq: v, ParamBF16: pb}, step+1, cfg))
		}
		h, err := tensor.To(tensor.CPU(), pb)
		e.ok(err)
		bv, _ := h.BF16s()
		pbf := make([]float32, n)
		for i, x := range bv {
			pbf[i] = x.Float32()
		}
		return [][]float32{e.host(p), e.host(m), e.host(v), pbf}
	})
	p, m, v := append([]float32(nil), p0...), make([]float32, n), make([]float32, n)
	for step, g := range grads {
		nnref.AdamW(p, g, m, v, step+1, cfg.LR, cfg.Beta1, cfg.Beta2, cfg.Eps, cfg.WeightDecay)
	}
	near(t, "param", got[0], f64(p), 1e-6, 1e-7) // a few float32 ulp: a backend may fuse multiply-adds
	near(t, "exp_avg", got[1], f64(m), 1e-6, 1e-7)
	near(t, "exp_avg_sq", got[2], f64(v), 1e-6, 1e-7)
	for i, x := range got[0] {
		if got[3][i] != tensor.BF16FromFloat32(x).Float32() {
			t.Fatalf("param_bf16[%d] = %v, want %v rounded to bfloat16", i, got[3][i], x)
		}
	}

	t.Run("clip", func(t *testing.T) {
		var ss float64
		for _, g := range grads {
			for _, x := range g {
				ss += float64(x) * float64(x)
			}
		}
		want := math.Sqrt(ss)
		for _, maxNorm := range []float64{want / 3, want * 2} {
			gs := make([]*tensor.Tensor, len(grads))
			for i, g := range grads {
				gs[i] = e.f32(append([]float32(nil), g...), 50, n/50)
			}
			norm, err := tensor.GradNorm(gs)
			e.ok(err)
			if math.Abs(norm-want) > 1e-12*want {
				t.Fatalf("GradNorm = %.15g, want %.15g", norm, want)
			}
			norm, err = tensor.ClipGradNorm(gs, maxNorm)
			e.ok(err)
			if math.Abs(norm-want) > 1e-12*want {
				t.Fatalf("ClipGradNorm returned %.15g, want %.15g", norm, want)
			}
			c := float32(math.Min(1, maxNorm/(want+1e-6)))
			for i, g := range grads {
				wantG := make([]float64, n)
				for j, x := range g {
					wantG[j] = float64(x * c)
				}
				near(t, "clipped", e.host(gs[i]), wantG, 0, 0)
			}
		}
	})
}
