package perturb

import (
	"errors"
	"math"
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

// FuzzPerturbations applies every perturbation kind, with a fuzzed parameter, to a batch of
// fuzzed shape: nothing panics, errors are *tensor.Error, and image i of ApplyBatch equals
// Apply of that image with its sample id (the documented independence of the batch).
func FuzzPerturbations(f *testing.F) {
	f.Add(uint8(0), uint8(2), uint8(5), uint8(7), uint8(3), 14.0, uint64(1))
	f.Add(uint8(1), uint8(1), uint8(3), uint8(3), uint8(1), 189.0, uint64(2))
	f.Add(uint8(2), uint8(3), uint8(4), uint8(4), uint8(4), 7.0, uint64(3))
	f.Add(uint8(3), uint8(2), uint8(6), uint8(2), uint8(0), 1.5, uint64(4))
	f.Add(uint8(3), uint8(1), uint8(0), uint8(9), uint8(3), math.NaN(), uint64(5))
	f.Add(uint8(0), uint8(0), uint8(3), uint8(3), uint8(2), -4.0, uint64(6))
	f.Fuzz(func(t *testing.T, kind, n, h, w, c uint8, param float64, seed uint64) {
		shape := []int{int(n % 4), int(h % 24), int(w % 24), int(c % 6)}
		if shape[3] == 0 {
			shape = shape[:3]
		}
		var p Perturbation
		switch kind % 4 {
		case 0:
			p = Blackening{PatchSize: int(param), Prob: 0.5}
		case 1:
			p = Noise{Mean: 0, Std: param}
		case 2:
			p = Masking{Value: []int{int(param)}}
		case 3:
			p = Blur{Radius: math.Mod(param, 8)}
		}
		src := make([]uint8, tensor.Shape(shape).NumElements())
		for i := range src {
			src[i] = uint8(i*31 + 7)
		}
		st := tensor.Must(tensor.FromUint8(src, shape...))
		dt := tensor.Must(tensor.NewLike(st, tensor.Uint8))
		ids := make([]uint64, shape[0])
		for i := range ids {
			ids[i] = seed + uint64(i)*7
		}
		err := p.ApplyBatch(dt, st, seed, ids)
		if err != nil {
			var te *tensor.Error
			if !errors.As(err, &te) {
				t.Fatalf("%T: %v is not a *tensor.Error", p, err)
			}
			if p.Validate() == nil && (c%6 == 1 || c%6 == 3 || c%6 == 4 || c%6 == 0) && kind%4 != 2 {
				t.Fatalf("%T %+v on %v: %v", p, p, shape, err)
			}
			return
		}
		got, _ := dt.Uint8s()
		for i := range shape[0] {
			img := tensor.Must(st.Rows(i, i+1))
			one := tensor.Must(img.Reshape(shape[1:]...))
			out := tensor.Must(tensor.NewLike(one, tensor.Uint8))
			if err := p.Apply(out, one, seed, ids[i]); err != nil {
				t.Fatalf("%T: Apply of image %d: %v", p, i, err)
			}
			want, _ := out.Uint8s()
			sz := len(want)
			for j := range want {
				if got[i*sz+j] != want[j] {
					t.Fatalf("%T %+v: image %d byte %d: batch %d, single %d", p, p, i, j, got[i*sz+j], want[j])
				}
			}
		}
	})
}

// FuzzGridSizes: GridSize, Grid and PatchGrid with any sizes: counts are never negative and
// match ceil(h/ps), ceil(w/ps); sizes no image can have are errors, not panics or empty grids.
// Grids of more than 2^16 patches are only tried where they must fail.
func FuzzGridSizes(f *testing.F) {
	f.Add(28, 28, 14, uint64(1))
	f.Add(math.MaxInt, 7, 4, uint64(2))
	f.Add(math.MaxInt, math.MaxInt, 14, uint64(3))
	f.Add(1<<40, 1<<40, 14, uint64(4))
	f.Add(-3, 5, 2, uint64(5))
	f.Add(5, 5, 0, uint64(6))
	f.Fuzz(func(t *testing.T, h, w, ps int, seed uint64) {
		r, c := GridSize(h, w, ps)
		if r < 0 || c < 0 {
			t.Fatalf("GridSize(%d, %d, %d) = %d, %d", h, w, ps, r, c)
		}
		if ps > 0 && h >= 0 && w >= 0 && (r != h/ps+min(h%ps, 1) || c != w/ps+min(w%ps, 1)) {
			t.Fatalf("GridSize(%d, %d, %d) = %d, %d", h, w, ps, r, c)
		}
		_, pixErr := tensor.CheckSize("", "", h, w)
		n, cellErr := tensor.CheckSize("", "", r, c)
		canExist := ps > 0 && pixErr == nil && h*w <= tensor.MaxHostBytes
		if canExist && (cellErr != nil || n > 1<<16) {
			return
		}
		b := Blackening{PatchSize: ps, Prob: 0.5}
		g, err := b.Grid(h, w, seed, 1)
		if (err == nil) != canExist {
			t.Fatalf("Grid(%d, %d) with patch %d: %v (an image of that size can exist: %v)", h, w, ps, err, canExist)
		}
		if err == nil && (g.Rows != r || g.Cols != c || len(g.Black) != r*c) {
			t.Fatalf("Grid(%d, %d) = %d×%d with %d cells", h, w, g.Rows, g.Cols, len(g.Black))
		}
		var draws []float64
		if canExist {
			draws = make([]float64, n)
		}
		if _, err := PatchGrid(h, w, ps, 0.5, draws); (err == nil) != canExist {
			t.Fatalf("PatchGrid(%d, %d, %d): %v", h, w, ps, err)
		}
	})
}
