package advantage

import (
	"errors"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// FuzzEstimators builds a batch from the fuzz input: shape, mask bits, group ids and rewards.
// Every estimator must not panic; with finite inputs the outputs are finite, masked positions of
// the group estimators and ReMax are 0, and the only error is a group of one.
func FuzzEstimators(f *testing.F) {
	f.Add(uint8(4), uint8(5), []byte{0xff, 0x0f, 0xf0}, []byte{0, 0, 1, 1}, int64(1), 0.99, 0.95)
	f.Add(uint8(1), uint8(1), []byte{1}, []byte{0}, int64(2), 1.0, 1.0)
	f.Add(uint8(8), uint8(3), []byte{}, []byte{7, 7, 7, 9, 9, 3, 3, 3}, int64(3), 0.0, 0.0)
	f.Add(uint8(0), uint8(3), []byte{}, []byte{}, int64(4), 0.5, 0.5)
	f.Add(uint8(6), uint8(0), []byte{}, []byte{1, 2, 1, 2, 1, 2}, int64(5), 0.5, 0.5)
	f.Add(uint8(5), uint8(9), []byte{0xaa, 0x55, 0x00, 0x01, 0x80, 0xff}, []byte{200, 1, 200, 1, 1}, int64(6), 0.3, 0.7)
	f.Fuzz(func(t *testing.T, bs, ls uint8, maskBits, idBytes []byte, seed int64, gamma, lam float64) {
		b, l := int(bs%17), int(ls%33)
		rng := newRand(uint64(seed))
		n := b * l
		r, v, m := make([]float32, n), make([]float32, n), make([]float32, n)
		for k := range n {
			r[k] = float32(rng.NormFloat64() * 3)
			v[k] = float32(rng.NormFloat64() * 3)
			if len(maskBits) > 0 && maskBits[(k/8)%len(maskBits)]>>(k%8)&1 == 1 {
				m[k] = 1
			}
		}
		ids := make([]int32, b)
		base := make([]float32, b)
		for i := range b {
			if len(idBytes) > 0 {
				ids[i] = int32(idBytes[i%len(idBytes)]) * 16777259 // spread over int32
			}
			base[i] = float32(rng.NormFloat64())
		}
		in := Inputs{Rewards: t32(t, r, b, l), ResponseMask: t32(t, m, b, l), Values: t32(t, v, b, l),
			Index: i32(t, ids), Baselines: t32(t, base, b)}
		for e := range numEstimators {
			cfg := Config{Estimator: e, Gamma: gamma, Lambda: lam}
			adv, ret := zeros(t, b, l), zeros(t, b, l)
			err := ComputeWithReturns(adv, ret, in, cfg)
			if err != nil {
				if !errors.Is(err, tensor.ErrParam) {
					t.Fatalf("%v: unexpected error %v", e, err)
				}
				if cfg.Validate() == nil && e != EstimatorGRPO && e != EstimatorGRPOPassK && e != EstimatorRLOO {
					t.Fatalf("%v: valid config rejected: %v", e, err)
				}
				continue
			}
			a, rt := data(t, adv), data(t, ret)
			if !allFinite(a) || !allFinite(rt) {
				t.Fatalf("%v: non-finite output for finite input\nadv %v\nret %v", e, a, rt)
			}
			if e == EstimatorGAE || e == EstimatorReinforcePlusPlus {
				continue // whitened everywhere, masked or not
			}
			for k, w := range m {
				if w == 0 && a[k] != 0 {
					t.Fatalf("%v: masked position %d has adv %v", e, k, a[k])
				}
			}
		}
	})
}

// FuzzParseEstimator: parsing never panics, and a parsed name round-trips through String.
func FuzzParseEstimator(f *testing.F) {
	for _, s := range []string{"gae", "grpo", "grpo_passk", "rloo", "reinforce_plus_plus", "remax", "", "GRPO", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseEstimator(s)
		if err != nil {
			if !errors.Is(err, tensor.ErrParam) {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		if e.String() != s {
			t.Fatalf("%q parsed to %v", s, e)
		}
	})
}
