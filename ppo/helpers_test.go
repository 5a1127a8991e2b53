package ppo

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// batch is a random [B, T] policy-loss problem in float64.
type batch struct {
	B, T                 int
	old, lp, adv, m, ltm []float64
}

// randMask returns a ragged 0/1 mask: row i has a random length with trailing padding and a
// few holes; row 1 (when B > 2) is empty.
func randMask(rng *rand.Rand, B, T int) []float64 {
	m := make([]float64, B*T)
	for i := range B {
		n := 1 + rng.IntN(T)
		if B > 2 && i == 1 {
			n = 0
		}
		for t := range n {
			if rng.Float64() > 0.1 {
				m[i*T+t] = 1
			}
		}
	}
	return m
}

// randBatch draws log-probs in [-3, -0.1], log ratios in [-spread, spread], advantages in
// [-2, 2] and (optionally) a 0/1 token mask.
func randBatch(rng *rand.Rand, B, T int, spread float64, withLTM bool) batch {
	b := batch{B: B, T: T, m: randMask(rng, B, T)}
	n := B * T
	b.old, b.lp, b.adv = make([]float64, n), make([]float64, n), make([]float64, n)
	for i := range n {
		b.old[i] = -0.1 - 2.9*rng.Float64()
		b.lp[i] = b.old[i] + spread*(2*rng.Float64()-1)
		b.adv[i] = 4*rng.Float64() - 2
	}
	if withLTM {
		b.ltm = make([]float64, n)
		for i := range n {
			if rng.Float64() < 0.6 {
				b.ltm[i] = 1
			}
		}
	}
	return b
}

func f32s(x []float64) []float32 {
	if x == nil {
		return nil
	}
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

func f64s(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

func ten(x []float64, B, T int) *tensor.Tensor {
	if x == nil {
		return nil
	}
	return tensor.Must(tensor.FromFloat32(f32s(x), B, T))
}

func (b batch) inputs() PolicyInputs {
	return PolicyInputs{
		OldLogProbs: ten(b.old, b.B, b.T), LogProbs: ten(b.lp, b.B, b.T), Advantages: ten(b.adv, b.B, b.T),
		ResponseMask: ten(b.m, b.B, b.T), TokenMask: ten(b.ltm, b.B, b.T),
	}
}

// seqRatios returns masked_mean(lp - old, m) per row.
func (b batch) seqRatios() []float64 {
	out := make([]float64, b.B)
	for i := range b.B {
		var s, c float64
		for t := range b.T {
			j := i*b.T + t
			s += (b.lp[j] - b.old[j]) * b.m[j]
			c += b.m[j]
		}
		out[i] = s / (c + 1e-8)
	}
	return out
}

// nearKink reports whether any valid token's log ratio lies within tol of a clamp bound or the
// dual-clip switch, where finite differences are not meaningful.
func nearKink(b batch, cfg PolicyConfig, tol float64) bool {
	cfg = fill(cfg)
	clo, chi := math.Log(1-cfg.ClipLow), math.Log(1+cfg.ClipHigh)
	seq := b.seqRatios()
	for i := range b.B {
		for t := range b.T {
			j := i*b.T + t
			if b.m[j] == 0 {
				continue
			}
			x := b.lp[j] - b.old[j]
			if cfg.LossType == GSPO || cfg.LossType == GSPOToken {
				x = seq[i]
			}
			for _, k := range []float64{clo, chi, -20, 20, math.Log(cfg.ClipDual)} {
				if math.Abs(x-k) < tol {
					return true
				}
			}
		}
	}
	return false
}

// wantErr asserts that err wraps sentinel and names op and arg.
func wantErr(t *testing.T, err, sentinel error, op, arg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v naming %s and %s", sentinel, op, arg)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("error %q does not wrap %v", err, sentinel)
	}
	if !strings.Contains(err.Error(), op) || !strings.Contains(err.Error(), arg) {
		t.Fatalf("error %q does not name %s and %s", err, op, arg)
	}
}

var allAggs = []Agg{{Mode: Token}, {Mode: Seq}, {Mode: SeqMeanTokenSum}, {Mode: SeqMeanTokenSumNorm, Horizon: 16}}

var allLossTypes = []LossType{Vanilla, GSPO, GSPOToken, CISPO, SAPO}

// fill returns c with its zero clip and tau fields set to DefaultPolicyConfig's values: the tests'
// way of writing "the defaults, except these fields".
func fill(c PolicyConfig) PolicyConfig {
	d := DefaultPolicyConfig(c.LossType)
	for _, f := range []struct {
		v *float64
		d float64
	}{
		{&c.ClipLow, d.ClipLow}, {&c.ClipHigh, d.ClipHigh}, {&c.ClipDual, d.ClipDual}, {&c.TauPos, d.TauPos}, {&c.TauNeg, d.TauNeg},
	} {
		if *f.v == 0 {
			*f.v = f.d
		}
	}
	return c
}
