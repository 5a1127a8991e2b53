package ppo

import (
	"errors"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

func FuzzParseAggMode(f *testing.F) {
	for _, s := range []string{"token", "seq", "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "", "TOKEN"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseAggMode(s)
		if err != nil {
			if !errors.Is(err, tensor.ErrParam) {
				t.Fatalf("%q: error %v does not wrap ErrParam", s, err)
			}
			return
		}
		back, err := ParseAggMode(m.String())
		if err != nil || back != m {
			t.Fatalf("%q -> %v -> %v, %v", s, m, back, err)
		}
	})
}

func FuzzParseLossType(f *testing.F) {
	for _, s := range []string{"default", "vanilla", "gspo", "gspo_token", "cispo", "sapo", "", "Default"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLossType(s)
		if err != nil {
			if !errors.Is(err, tensor.ErrParam) {
				t.Fatalf("%q: error %v does not wrap ErrParam", s, err)
			}
			return
		}
		back, err := ParseLossType(l.String())
		if err != nil || back != l {
			t.Fatalf("%q -> %v -> %v, %v", s, l, back, err)
		}
	})
}
