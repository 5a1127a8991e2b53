package divergence

import (
	"errors"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

func FuzzParseKind(f *testing.F) {
	for _, s := range []string{"kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full", "", "kl2", "FULL"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKind(s)
		if err != nil {
			if !errors.Is(err, tensor.ErrParam) {
				t.Fatalf("ParseKind(%q): %v does not wrap ErrParam", s, err)
			}
			return
		}
		if s != k.String() && s != "k1" && s != "k2" && s != "k3" {
			t.Fatalf("ParseKind(%q) = %v", s, k)
		}
		if k2, err := ParseKind(k.String()); err != nil || k2 != k {
			t.Fatalf("round trip of %v: %v, %v", k, k2, err)
		}
	})
}

// FuzzPenaltyShapes checks that arbitrary shapes either validate and compute without panicking
// or return a shape error.
func FuzzPenaltyShapes(f *testing.F) {
	f.Add(uint8(2), uint8(3), uint8(4), uint8(0), uint8(3), false)
	f.Add(uint8(0), uint8(5), uint8(1), uint8(4), uint8(1), true)
	f.Add(uint8(1), uint8(1), uint8(0), uint8(4), uint8(2), false)
	f.Fuzz(func(t *testing.T, b, tt, v, k, dstRank uint8, grad bool) {
		b, tt, v = b%9, tt%9, v%9
		kind := Kind(k % 6) // 5 is invalid
		lp := make([]float32, int(b)*int(tt)*int(v))
		for i := range lp {
			lp[i] = -float32(i%7) / 3
		}
		ref := make([]float32, len(lp))
		lpT := tensor.Must(tensor.FromFloat32(lp, int(b), int(tt), int(v)))
		refT := tensor.Must(tensor.FromFloat32(ref, int(b), int(tt), int(v)))
		var shape []int
		switch dstRank % 3 {
		case 0:
			shape = []int{int(b), int(tt)}
		case 1:
			shape = []int{int(b), int(tt), int(v)}
		default:
			shape = []int{int(b) * int(tt) * int(v)}
		}
		dst := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, shape...))
		var err error
		if grad {
			err = derivative(dst, lpT, refT, kind)
		} else {
			err = Penalty(dst, lpT, refT, kind)
		}
		if err != nil && !errors.Is(err, tensor.ErrShape) && !errors.Is(err, tensor.ErrParam) {
			t.Fatalf("unexpected error kind: %v", err)
		}
		if kind == 5 && err == nil {
			t.Fatal("invalid kind accepted")
		}
	})
}
