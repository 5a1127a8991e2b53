//go:build cuda

package cuda_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/tensor"
)

// TestLMHeadChunks runs the fused LM head over several vocabulary chunks (the last one
// partial), with every pairing of float32 and bfloat16 hidden states and head weight and with
// and without the bfloat16-rounded logits gradient (GradBF16), against the float64 reference
// with tensor/nntest's LMHead bounds. The inputs are bfloat16 values in either dtype, so every
// variant sees the reference's numbers. The first variant accumulates into dweight, the others
// overwrite it. With GradBF16 a logits gradient whose float32 value may lie on the other side
// of a bfloat16 rounding boundary than the float64 one (within 1e-5 of its terms: the float32
// error of dz) may round to the neighbouring bfloat16: the bound grows by that difference times
// the weight or hidden value it multiplies, for those elements alone (bf16Slack).
func TestLMHeadChunks(t *testing.T) {
	defer cuda.SetLMHeadChunk(1000)()
	be := device(t)
	const n, d, v, temp = 37, 40, 3001, 0.7
	r := rand.New(rand.NewPCG(3, 4))
	hv, wv := roundBF16(randn(r, n*d, 1)), roundBF16(randn(r, v*d, 0.2))
	glv, gev, dw0 := randn(r, n, 1), randn(r, n, 1), randn(r, v*d, 1)
	ys := make([]int32, n)
	for i := range ys {
		ys[i] = int32(r.IntN(v))
	}
	put := func(x []float32, dt tensor.DType, shape ...int) *tensor.Tensor {
		c := tensor.Must(tensor.FromFloat32(x, shape...))
		if dt == tensor.BFloat16 {
			h := make([]tensor.BF16, len(x))
			for i, f := range x {
				h[i] = tensor.BF16FromFloat32(f)
			}
			c = tensor.Must(tensor.FromBF16(h, shape...))
		}
		return tensor.Must(tensor.To(be, c))
	}
	ref := nnref.RefKernels[float64]{D: d, H: f64s(hv), W: f64s(wv)}
	lp, ent := make([]float64, n), make([]float64, n)
	nnref.LMHead(n, v, ref, ys, temp, lp, ent)
	dts := []tensor.DType{tensor.Float32, tensor.BFloat16}
	first := true
	for _, hdt := range dts {
		for _, wdt := range dts {
			for _, gradBF16 := range []bool{false, true} {
				acc := first
				first = false
				t.Run(fmt.Sprintf("hidden=%v/weight=%v/GradBF16=%v", hdt, wdt, gradBF16), func(t *testing.T) {
					w, err := tensor.PackWeight(put(wv, wdt, v, d))
					if err != nil {
						t.Fatal(err)
					}
					in := tensor.LMHeadInputs{Hidden: put(hv, hdt, n, d), Weight: w, Targets: upI(t, be, ys, n), Temperature: temp}
					glp, gent := up(t, be, make([]float32, n), n), up(t, be, make([]float32, n), n)
					if err := tensor.LMHeadLogProbs(glp, gent, in); err != nil {
						t.Fatal(err)
					}
					dh, dw := up(t, be, make([]float32, n*d), n, d), up(t, be, dw0, v, d)
					if err := tensor.LMHeadBackward(dh, dw, tensor.LMHeadGrad{LMHeadInputs: in, LogProbs: glp, Entropy: gent,
						DLogProbs: up(t, be, glv, n), DEntropy: up(t, be, gev, n), Accumulate: acc, GradBF16: gradBF16}); err != nil {
						t.Fatal(err)
					}
					wdh, wdw := make([]float64, n*d), f64s(dw0)
					nnref.LMHeadBackward(n, d, v, ref, nnref.LMHeadGrad[float64]{Targets: ys, LogP: lp, Ent: ent,
						DLogP: f64s(glv), DEnt: f64s(gev), Temp: temp, BF16: gradBF16}, wdh, wdw, acc)
					closeTo(t, "logp", host(t, glp), lp, 1e-5, 1e-4)
					closeTo(t, "entropy", host(t, gent), ent, 1e-5, 1e-4)
					var sh, sw []float64
					if gradBF16 {
						sh, sw = bf16Slack(n, d, v, hv, wv, ys, lp, ent, glv, gev, temp)
					}
					closeToSlack(t, "dhidden", host(t, dh), wdh, sh, 1e-4, 1e-4)
					closeToSlack(t, "dweight", host(t, dw), wdw, sw, 1e-4, 1e-5)
				})
			}
		}
	}
	t.Run("no rows", func(t *testing.T) {
		w, err := tensor.PackWeight(put(wv, tensor.Float32, v, d))
		if err != nil {
			t.Fatal(err)
		}
		in := tensor.LMHeadInputs{Hidden: put(nil, tensor.Float32, 0, d), Weight: w, Targets: upI(t, be, nil, 0), Temperature: 1}
		lp, ent := up(t, be, nil, 0), up(t, be, nil, 0)
		if err := tensor.LMHeadLogProbs(lp, ent, in); err != nil {
			t.Fatal(err)
		}
		dh, dw := up(t, be, nil, 0, d), up(t, be, dw0, v, d)
		if err := tensor.LMHeadBackward(dh, dw, tensor.LMHeadGrad{LMHeadInputs: in, LogProbs: lp, Entropy: ent}); err != nil {
			t.Fatal(err)
		}
		for i, x := range host(t, dw) {
			if x != 0 {
				t.Fatalf("dweight[%d] = %v with no rows, want 0 (overwritten)", i, x)
			}
		}
	})
}

func roundBF16(v []float32) []float32 {
	for i, x := range v {
		v[i] = tensor.BF16FromFloat32(x).Float32()
	}
	return v
}

func f64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// bf16Slack returns, for dhidden [n, d] and dweight [v, d], Σ|Δ|·|w| and Σ|Δ|·|h| over the
// logits gradient elements whose bfloat16 rounding is ambiguous at float32 accuracy (Δ the gap
// between the two roundings; 0 elsewhere), from the float64 gradient of the reference's formula.
func bf16Slack(n, d, v int, h, w []float32, ys []int32, lp, ent []float64, gl, ge []float32, temp float64) (sh, sw []float64) {
	sh, sw = make([]float64, n*d), make([]float64, v*d)
	dot := func(i, j int) float64 {
		s := 0.0
		for k := range d {
			s += float64(h[i*d+k]) * float64(w[j*d+k])
		}
		return s / temp
	}
	rnd := func(x float64) float64 { return float64(tensor.BF16FromFloat32(float32(x)).Float32()) }
	for i := range n {
		y := int(ys[i])
		lse := dot(i, y) - lp[i]
		a, b := float64(gl[i]), float64(ge[i])
		for j := range v {
			u := dot(i, j) - lse
			p := math.Exp(u)
			g := -a*p - b*p*(u+ent[i])
			e := math.Abs(a*p) + math.Abs(b*p)*(math.Abs(u+ent[i])+1)
			if j == y {
				g += a
				e += math.Abs(a)
			}
			g, e = g/temp, 1e-5*e/temp
			gap := math.Abs(rnd(g+e) - rnd(g-e))
			if gap == 0 {
				continue
			}
			for k := range d {
				sh[i*d+k] += gap * math.Abs(float64(w[j*d+k]))
				sw[j*d+k] += gap * math.Abs(float64(h[i*d+k]))
			}
		}
	}
	return sh, sw
}

// closeToSlack is closeTo with slack[i] (nil: none) added to the bound of element i.
func closeToSlack(t *testing.T, name string, got []float32, want, slack []float64, rtol, atol float64) {
	t.Helper()
	for i, w := range want {
		s := 0.0
		if slack != nil {
			s = slack[i]
		}
		if g := float64(got[i]); math.IsNaN(g) != math.IsNaN(w) || math.Abs(g-w) > atol+rtol*math.Abs(w)+s {
			t.Fatalf("%s[%d] = %.9g, want %.9g (within %g + %g·|want| + %g)", name, i, g, w, atol, rtol, s)
		}
	}
}

// closeTo fails t when |got − want| > atol + rtol·|want| anywhere (as tensor/nntest's bounds).
func closeTo(t *testing.T, name string, got []float32, want []float64, rtol, atol float64) {
	t.Helper()
	for i, w := range want {
		if g := float64(got[i]); math.IsNaN(g) != math.IsNaN(w) || math.Abs(g-w) > atol+rtol*math.Abs(w) {
			t.Fatalf("%s[%d] = %.9g, want %.9g (within %g + %g·|want|)", name, i, g, w, atol, rtol)
		}
	}
}

// TestLMHeadChunkWidth checks the chunk's width: 8192 vocabulary rows up to 8192 hidden states,
// then narrower so that the logits stay within 256 MiB, never below 1024 (nor past V).
func TestLMHeadChunkWidth(t *testing.T) {
	for _, c := range []struct{ rows, v, want int }{
		{1, 151936, 8192}, {8192, 151936, 8192}, {8193, 151936, 7936}, {16384, 151936, 4096},
		{65536, 151936, 1024}, {1 << 20, 151936, 1024}, {100, 3001, 3001}, {100000, 500, 500},
	} {
		if got := cuda.LMChunk(c.rows, c.v); got != c.want {
			t.Errorf("lmChunk(%d, %d) = %d, want %d", c.rows, c.v, got, c.want)
		}
		if got := cuda.LMChunk(c.rows, c.v); c.rows*got*4 > 256<<20 && got > 1024 {
			t.Errorf("lmChunk(%d, %d) = %d: %d bytes of logits", c.rows, c.v, got, c.rows*got*4)
		}
	}
}
