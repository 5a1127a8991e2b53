package advantage

import (
	"errors"
	"math"
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

// FuzzGroupRowAdvantages: any scores, group ids, estimator and options give advantages (one
// per row) or an ErrParam/ErrShape error; never a panic. Valid options and groups of at least
// two finite scores give finite advantages.
func FuzzGroupRowAdvantages(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4}, []byte{0, 0, 1, 1}, uint8(0), 0.0, 0.0, false)
	f.Add([]byte{1, 1, 1}, []byte{5, 5, 5}, uint8(2), 1e-3, 0.1, true)
	f.Add([]byte{9, 0}, []byte{0, 1}, uint8(0), -1.0, 0.0, false)
	f.Add([]byte{}, []byte{}, uint8(3), math.NaN(), math.Inf(-1), false)
	f.Add([]byte{7, 7, 200, 3}, []byte{1, 1, 1}, uint8(1), 0.0, 0.0, false)
	f.Fuzz(func(t *testing.T, raw, idBytes []byte, est uint8, eps, floor float64, noStd bool) {
		scores := make([]float32, len(raw))
		for i, x := range raw {
			scores[i] = float32(int(x)-128) / 16
		}
		ids := make([]int32, len(idBytes))
		for i, x := range idBytes {
			ids[i] = int32(x % 4)
		}
		e := []Estimator{EstimatorGRPO, EstimatorGRPOPassK, EstimatorRLOO, EstimatorGAE}[est%4]
		opts := GRPOOptions{Eps: eps, StdFloor: floor, NoStdNorm: noStd}
		a, err := GroupRowAdvantages(scores, ids, e, opts)
		if err != nil {
			if !errors.Is(err, tensor.ErrParam) && !errors.Is(err, tensor.ErrShape) {
				t.Fatalf("unexpected error %v", err)
			}
			if opts.validate("") != nil || e == EstimatorGAE || len(scores) != len(ids) {
				return
			}
			if !errors.Is(err, tensor.ErrParam) {
				t.Fatalf("valid options: %v", err)
			}
			return // a group of one
		}
		if opts.validate("") != nil {
			t.Fatalf("options %+v accepted", opts)
		}
		if len(a) != len(scores) || !allFinite(a) {
			t.Fatalf("advantages %v for scores %v", a, scores)
		}
	})
}
