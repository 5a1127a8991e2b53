package perturb

import (
	"errors"
	"image"
	"image/color"
	"math"
	"testing"

	"github.com/mtrl-go/mtrl/internal/hostile"
	"github.com/mtrl-go/mtrl/tensor"
)

// TestHostileSizes: the examples of each class give errors (or, for GridSize, the
// exact count), not panics, empty grids or negative counts.
func TestHostileSizes(t *testing.T) {
	if r, c := GridSize(math.MaxInt, 7, 4); r != math.MaxInt/4+1 || c != 2 {
		t.Errorf("GridSize(MaxInt, 7, 4) = %d, %d, want %d, 2", r, c, math.MaxInt/4+1)
	}
	if r, c := GridSize(-5, 7, 4); r != 0 || c != 0 {
		t.Errorf("GridSize(-5, 7, 4) = %d, %d, want 0, 0", r, c)
	}
	b := DefaultBlackening()
	img := hostile.U8(2, 4, 5, 3)
	for _, tc := range []struct {
		name string
		kind error
		call func() error
	}{
		{"Grid(MaxInt, MaxInt)", tensor.ErrShape, func() error { _, err := b.Grid(math.MaxInt, math.MaxInt, 1, 2); return err }},
		{"Grid(1<<40, 1<<40)", tensor.ErrShape, func() error { _, err := b.Grid(1<<40, 1<<40, 1, 2); return err }},
		{"PatchGrid(MaxInt, MaxInt)", tensor.ErrShape, func() error { _, err := PatchGrid(math.MaxInt, math.MaxInt, 14, 0.5, nil); return err }},
		{"FromImage huge bounds", tensor.ErrShape, func() error {
			_, err := FromImage(hugeImage{image.Rect(0, 0, math.MaxInt, math.MaxInt)})
			return err
		}},
		{"FromImage overflowing bounds", tensor.ErrShape, func() error {
			_, err := FromImage(hugeImage{image.Rect(math.MinInt, 0, math.MaxInt, 2)})
			return err
		}},
		{"FromImage empty palette", tensor.ErrParam, func() error {
			_, err := FromImage(image.NewPaletted(image.Rect(0, 0, 2, 2), nil))
			return err
		}},
		{"FromImage At nil", tensor.ErrParam, func() error {
			_, err := FromImageAs(nilColors{hugeImage{image.Rect(0, 0, 2, 2)}}, 3)
			return err
		}},
		{"ApplyBatch zero src", tensor.ErrShape, func() error { return b.ApplyBatch(img, &tensor.Tensor{}, 1, []uint64{1, 2}) }},
		{"ApplyBatch zero dst", tensor.ErrShape, func() error { return b.ApplyBatch(&tensor.Tensor{}, img, 1, []uint64{1, 2}) }},
		{"ApplyImage nil", tensor.ErrParam, func() error {
			_, err := ApplyImage(nil, image.NewGray(image.Rect(0, 0, 2, 2)), 1, 2)
			return err
		}},
	} {
		if err := tc.call(); !errors.Is(err, tc.kind) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.kind)
		}
	}
	// A palette that covers every index still converts.
	p := image.NewPaletted(image.Rect(0, 0, 2, 1), color.Palette{color.Black, color.White})
	p.Pix[1] = 1
	got, err := FromImage(p)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := got.Uint8s(); v[0] != 0 || v[3] != 255 {
		t.Errorf("paletted image converted to %v", v)
	}
}
