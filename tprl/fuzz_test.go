package tprl

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
)

// FuzzPrepareMicroBatch builds a mini-batch and a configuration from the fuzz input (shape
// including T = 0, mask bits, feature flags, top-p, the micro-batch range, the global token
// count) and runs Prepare and MicroBatch. Nothing panics; errors are *tensor.Error; a valid
// configuration and row range succeed, with a finite loss and gradient for finite inputs.
func FuzzPrepareMicroBatch(f *testing.F) {
	f.Add(uint8(4), uint8(5), uint8(0xff), []byte{0xff, 0x0f}, uint64(1), 0.2, 0, 2, 0.0)
	f.Add(uint8(3), uint8(0), uint8(0x3f), []byte{}, uint64(2), 0.5, 0, 3, 0.0)
	f.Add(uint8(1), uint8(1), uint8(0), []byte{1}, uint64(3), 1.0, 0, 1, 7.0)
	f.Add(uint8(2), uint8(3), uint8(0x1c), []byte{0}, uint64(4), 0.0, 1, 2, 0.0)
	f.Add(uint8(2), uint8(3), uint8(0xff), []byte{0xaa}, uint64(5), 1.5, -1, 9, -1.0)
	f.Add(uint8(0), uint8(3), uint8(0x01), []byte{}, uint64(6), 0.2, 0, 0, 0.0)
	f.Fuzz(func(t *testing.T, bs, ts, flags uint8, maskBits []byte, seed uint64, topP float64, lo, hi int, globalTokens float64) {
		b, l := int(bs%9), int(ts%17)
		rng := rand.New(rand.NewPCG(seed, 0))
		normal := func() *tensor.Tensor {
			v := make([]float32, b*l)
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
			return tensor.Must(tensor.FromFloat32(v, b, l))
		}
		m := make([]float32, b*l)
		for k := range m {
			if len(maskBits) > 0 && maskBits[(k/8)%len(maskBits)]>>(k%8)&1 == 1 {
				m[k] = 1
			}
		}
		tok := DefaultConfig()
		tok.EnableEntropyFiltering, tok.EnablePerceptionFiltering = flags&1 != 0, flags&2 != 0
		tok.EnableTrajectoryReweighting, tok.ShapingRequiresPerception = flags&4 != 0, flags&8 != 0
		tok.TopPEntropyTokens, tok.TopPPerceptionTokens = topP, topP
		if flags&16 != 0 {
			tok.TrajectoryShapingScope = PerMicroBatchScope
		}
		cfg := UpdateConfig{Tokens: tok, Policy: ppo.DefaultPolicyConfig(ppo.LossType(flags >> 6))}
		if flags&32 != 0 {
			cfg.KLLoss = &ppo.KLConfig{Kind: divergence.LowVarKL, Coef: 0.1}
			cfg.EntropyPenalty = &ppo.EntropyConfig{Coef: 0.01}
		}
		mb := MiniBatch{ResponseMask: tensor.Must(tensor.FromFloat32(m, b, l)), OldLogProbs: normal(), Advantages: normal(),
			AugLogProbs: normal(), RefLogProbs: normal(), GlobalTokens: globalTokens}
		u, err := cfg.Prepare(mb)
		validGT := globalTokens == 0 || globalTokens > 0 && !math.IsInf(globalTokens, 0)
		if err != nil {
			if cfg.Validate() == nil && b > 0 && validGT {
				t.Fatalf("Prepare refused a valid configuration: %v", err)
			}
			checkError(t, err)
			return
		}
		defer u.Release()
		rows := max(hi-lo, 0)
		grad := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, rows, l))
		lp := make([]float32, rows*l)
		for i := range lp {
			lp[i] = float32(rng.NormFloat64())
		}
		in := MicroInputs{LogProbs: tensor.Must(tensor.FromFloat32(lp, rows, l)), Entropy: tensor.Must(tensor.FromFloat32(append([]float32(nil), lp...), rows, l))}
		res, err := u.MicroBatch(grad, in, lo, hi)
		if err != nil {
			if lo >= 0 && lo < hi && hi <= b {
				t.Fatalf("MicroBatch(%d, %d) of %d rows: %v", lo, hi, b, err)
			}
			checkError(t, err)
			return
		}
		defer res.Release()
		g, _ := grad.Float32s()
		for i, x := range g {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				t.Fatalf("grad[%d] = %v", i, x)
			}
		}
		if math.IsNaN(float64(res.Loss)) || math.IsInf(float64(res.Loss), 0) {
			t.Fatalf("loss %v", res.Loss)
		}
	})
}

func checkError(t *testing.T, err error) {
	t.Helper()
	var te *tensor.Error
	if !errors.As(err, &te) {
		t.Fatalf("%v is not a *tensor.Error", err)
	}
}
