package tensor_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/internal/gradcheck"
	"github.com/mtrl-go/mtrl/tensor"
)

// logpEntropy64 is log softmax(x/temp)[y] and the entropy of softmax(x/temp), in float64.
func logpEntropy64(x []float64, y int, temp float64) (logp, ent float64) {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v/temp)
	}
	var s float64
	for _, v := range x {
		s += math.Exp(v/temp - m)
	}
	lse := m + math.Log(s)
	for _, v := range x {
		lp := v/temp - lse
		ent -= math.Exp(lp) * lp
	}
	return x[y]/temp - lse, ent
}

// TestLogProbEntropyBackwardFiniteDifferences checks the analytic backward (float32) against
// central differences of gl*logp + ge*entropy computed in float64.
func TestLogProbEntropyBackwardFiniteDifferences(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, c := range []struct {
		v    int
		temp float32
	}{{1, 1}, {2, 1}, {7, 0.7}, {33, 1.3}} {
		x := make([]float32, c.v)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 2)
		}
		y := r.IntN(c.v)
		gl, ge := float32(r.NormFloat64()), float32(r.NormFloat64())

		logits := tensor.Must(tensor.FromFloat32(x, 1, c.v))
		ys := tensor.Must(tensor.FromInt32([]int32{int32(y)}, 1))
		lp, ent := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 1)), tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 1))
		if err := tensor.LogProbEntropy(lp, ent, logits, ys, c.temp); err != nil {
			t.Fatal(err)
		}
		dl := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 1, c.v))
		err := tensor.LogProbEntropyBackward(dl, tensor.LogProbGrad{
			Logits: logits, Targets: ys, LogProbs: lp, Entropy: ent,
			DLogProbs: tensor.Must(tensor.FromFloat32([]float32{gl}, 1)),
			DEntropy:  tensor.Must(tensor.FromFloat32([]float32{ge}, 1)), Temperature: c.temp,
		})
		if err != nil {
			t.Fatal(err)
		}
		got32, _ := dl.Float32s()
		got := make([]float64, c.v)
		x64 := make([]float64, c.v)
		for i := range x {
			got[i], x64[i] = float64(got32[i]), float64(x[i])
		}
		f := func(x []float64) float64 {
			l, e := logpEntropy64(x, y, float64(c.temp))
			return float64(gl)*l + float64(ge)*e
		}
		gradcheck.Check(t, "dlogits", f, x64, got, 1e-6, 1e-4, 1e-5)
	}
}
