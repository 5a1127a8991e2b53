package tensor_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// TestLMHeadMatchesLogProbEntropy checks the fused LM head against the unfused path it
// replaces: logits = MatMul(hidden, weightᵀ), then LogProbEntropy and LogProbEntropyBackward,
// then the two products of the logits gradient.
func TestLMHeadMatchesLogProbEntropy(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	const n, d, v, temp = 21, 40, 2500, 1.3
	randn := func(k int, s float64) []float32 {
		x := make([]float32, k)
		for i := range x {
			x[i] = float32(r.NormFloat64() * s)
		}
		return x
	}
	h := tensor.Must(tensor.FromFloat32(randn(n*d, 1), n, d))
	w := tensor.Must(tensor.FromFloat32(randn(v*d, 0.3), v, d))
	ys := make([]int32, n)
	for i := range ys {
		ys[i] = int32(r.IntN(v))
	}
	y := tensor.Must(tensor.FromInt32(ys, n))
	gl, ge := tensor.Must(tensor.FromFloat32(randn(n, 1), n)), tensor.Must(tensor.FromFloat32(randn(n, 1), n))
	zeros := func(s ...int) *tensor.Tensor { return tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, s...)) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	logits := zeros(n, v)
	must(tensor.MatMul(logits, h, w, tensor.MatMulOptions{TransB: true}))
	lp, ent := zeros(n), zeros(n)
	must(tensor.LogProbEntropy(lp, ent, logits, y, temp))
	dlogits := zeros(n, v)
	must(tensor.LogProbEntropyBackward(dlogits, tensor.LogProbGrad{Logits: logits, Targets: y, LogProbs: lp, Entropy: ent,
		DLogProbs: gl, DEntropy: ge, Temperature: temp}))
	dh, dw := zeros(n, d), zeros(v, d)
	must(tensor.MatMul(dh, dlogits, w, tensor.MatMulOptions{}))
	must(tensor.MatMul(dw, dlogits, h, tensor.MatMulOptions{TransA: true}))

	pw, err := tensor.PackWeight(w)
	must(err)
	in := tensor.LMHeadInputs{Hidden: h, Weight: pw, Targets: y, Temperature: temp}
	flp, fent := zeros(n), zeros(n)
	must(tensor.LMHeadLogProbs(flp, fent, in))
	fdh, fdw := zeros(n, d), zeros(v, d)
	must(tensor.LMHeadBackward(fdh, fdw, tensor.LMHeadGrad{LMHeadInputs: in, LogProbs: flp, Entropy: fent, DLogProbs: gl, DEntropy: ge}))

	for _, c := range []struct {
		name       string
		got, want  *tensor.Tensor
		rtol, atol float64
	}{{"logp", flp, lp, 1e-5, 1e-5}, {"entropy", fent, ent, 1e-5, 1e-5}, {"dhidden", fdh, dh, 1e-4, 1e-6}, {"dweight", fdw, dw, 1e-4, 1e-6}} {
		g, _ := c.got.Float32s()
		wv, _ := c.want.Float32s()
		for i := range wv {
			if math.Abs(float64(g[i]-wv[i])) > c.atol+c.rtol*math.Abs(float64(wv[i])) {
				t.Fatalf("%s[%d]: fused %.9g, unfused %.9g", c.name, i, g[i], wv[i])
			}
		}
	}
}
