package perturb

import (
	"errors"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// FuzzBlackening applies seeded blackening to arbitrary shapes and patch sizes and checks the
// invariants: valid inputs succeed, every patch is either untouched or all zero, and invalid
// inputs give ErrShape / ErrParam.
func FuzzBlackening(f *testing.F) {
	f.Add(uint8(28), uint8(28), uint8(3), 14, 0.5, uint64(1))
	f.Add(uint8(5), uint8(7), uint8(0), 14, 0.5, uint64(2))
	f.Add(uint8(9), uint8(13), uint8(4), 4, 0.5, uint64(3))
	f.Add(uint8(0), uint8(3), uint8(1), 1, 1.0, uint64(4))
	f.Add(uint8(3), uint8(3), uint8(2), 2, 0.5, uint64(5))
	f.Add(uint8(3), uint8(3), uint8(3), 0, 0.5, uint64(6))
	f.Add(uint8(3), uint8(3), uint8(3), 2, 1.5, uint64(7))
	f.Fuzz(func(t *testing.T, h, w, c uint8, ps int, prob float64, seed uint64) {
		h, w, c = h%40, w%40, c%6
		shape := []int{int(h), int(w), int(c)}
		if c == 0 {
			shape = shape[:2]
		}
		n := tensor.Shape(shape).NumElements()
		src := make([]uint8, n)
		for i := range src {
			src[i] = uint8(1 + i%250)
		}
		st := tensor.Must(tensor.FromUint8(src, shape...))
		dt := tensor.Must(tensor.NewLike(st, tensor.Uint8))
		b := Blackening{PatchSize: ps, Prob: prob}
		err := b.Apply(dt, st, seed, 7)
		validShape := c == 0 || c == 1 || c == 3 || c == 4
		validParam := ps > 0 && prob >= 0 && prob <= 1
		switch {
		case !validParam:
			if !errors.Is(err, tensor.ErrParam) {
				t.Fatalf("want ErrParam, got %v", err)
			}
			return
		case !validShape:
			if !errors.Is(err, tensor.ErrShape) {
				t.Fatalf("want ErrShape, got %v", err)
			}
			return
		case err != nil:
			t.Fatalf("unexpected error: %v", err)
		}
		g, err := b.Grid(int(h), int(w), seed, 7)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := dt.Uint8s()
		cc := max(int(c), 1)
		for i := range d {
			px := i / cc
			y, x := px/int(w), px%int(w)
			black := g.Black[(y/ps)*g.Cols+x/ps]
			if black && d[i] != 0 || !black && d[i] != src[i] {
				t.Fatalf("element %d (y %d x %d): got %d, src %d, black %v", i, y, x, d[i], src[i], black)
			}
		}
	})
}

func FuzzParseKind(f *testing.F) {
	for _, s := range []string{"patch_blackening", "gaussian_noise", "complete_masking", "gaussian_blur", "", "blur"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKind(s)
		if err != nil {
			if !errors.Is(err, tensor.ErrParam) {
				t.Fatal(err)
			}
			return
		}
		if k.String() != s {
			t.Fatalf("ParseKind(%q) = %v", s, k)
		}
	})
}
