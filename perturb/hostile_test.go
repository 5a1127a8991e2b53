package perturb

import (
	"image"
	"image/color"
	"math"
	"testing"

	"github.com/mtrl-go/mtrl/internal/hostile"
	"github.com/mtrl-go/mtrl/tensor"
)

// perturbFuncs lists every exported function and method of perturb.
// UnmarshalText is called on a valid receiver: decoding into a nil pointer is the caller's bug,
// as with any encoding.TextUnmarshaler.
func perturbFuncs() map[string]any {
	return map[string]any{
		"AddNoise":              AddNoise,
		"ApplyImage":            ApplyImage,
		"BlackenPatches":        BlackenPatches,
		"Blackening.Apply":      Blackening.Apply,
		"Blackening.ApplyBatch": Blackening.ApplyBatch,
		"Blackening.Grid":       Blackening.Grid,
		"Blackening.Kind":       Blackening.Kind,
		"Blackening.Validate":   Blackening.Validate,
		"Blur.Apply":            Blur.Apply,
		"Blur.ApplyBatch":       Blur.ApplyBatch,
		"Blur.Kind":             Blur.Kind,
		"Blur.Validate":         Blur.Validate,
		"Default":               Default,
		"DefaultBlackening":     DefaultBlackening,
		"DefaultBlur":           DefaultBlur,
		"DefaultNoise":          DefaultNoise,
		"Fill":                  Fill,
		"FromImage":             FromImage,
		"FromImageAs":           FromImageAs,
		"GridSize":              GridSize,
		"Kind.MarshalText":      Kind.MarshalText,
		"Kind.String":           Kind.String,
		"Kind.Valid":            Kind.Valid,
		"Kind.UnmarshalText":    func(b []byte) error { var k Kind; return k.UnmarshalText(b) },
		"Masking.Apply":         Masking.Apply,
		"Masking.ApplyBatch":    Masking.ApplyBatch,
		"Masking.Kind":          Masking.Kind,
		"Masking.Validate":      Masking.Validate,
		"Noise.Apply":           Noise.Apply,
		"Noise.ApplyBatch":      Noise.ApplyBatch,
		"Noise.Kind":            Noise.Kind,
		"Noise.Validate":        Noise.Validate,
		"ParseKind":             ParseKind,
		"PatchGrid":             PatchGrid,
		"ToImage":               ToImage,
	}
}

// hugeImage reports bounds far larger than any image; At is never worth calling.
type hugeImage struct{ r image.Rectangle }

func (h hugeImage) ColorModel() color.Model { return color.RGBAModel }
func (h hugeImage) Bounds() image.Rectangle { return h.r }
func (h hugeImage) At(x, y int) color.Color { return color.Black }

// nilColors is an image whose At returns nil (as image.Paletted does with an empty palette).
type nilColors struct{ hugeImage }

func (nilColors) At(x, y int) color.Color { return nil }

func perturbValues() *hostile.Values {
	v := hostile.NewValues()
	v.Add(DefaultBlackening(), Blackening{PatchSize: 2, Prob: 1}, DefaultNoise(), Masking{}, Masking{Value: []int{1, 2, 3}}, DefaultBlur(), Blur{Radius: 1})
	hostile.AddAs[Perturbation](v, DefaultBlackening(), DefaultNoise(), Masking{}, DefaultBlur(), nil)
	v.Add(PatchBlackening, GaussianBlur, Kind(-1), Kind(99))
	v.Add(Grid{Rows: 1, Cols: 1, Black: []bool{true}}, Grid{Rows: 1 << 62, Cols: 4, Black: []bool{true}})
	hostile.Gen(v, "image u8[4 5 3]", func() *tensor.Tensor { return hostile.U8(4, 5, 3) })
	v.Add([]uint64{1, 2}, []float64{0.1, 0.9, 0.5, 0.2})
	rgba := image.NewRGBA(image.Rect(0, 0, 3, 2))
	pal := image.NewPaletted(image.Rect(0, 0, 3, 2), color.Palette{color.Black, color.White})
	pal.Pix[1] = 7 // outside the palette
	hostile.AddAs[image.Image](v, rgba, image.NewGray(image.Rect(1, 1, 4, 3)), image.NewNRGBA(image.Rect(0, 0, 2, 2)),
		image.NewPaletted(image.Rect(0, 0, 3, 2), nil), pal, image.NewYCbCr(image.Rect(0, 0, 4, 4), image.YCbCrSubsampleRatio420),
		image.NewRGBA(image.Rect(0, 0, 0, 5)), image.NewGray16(image.Rect(0, 0, 2, 1)),
		hugeImage{image.Rect(0, 0, math.MaxInt, math.MaxInt)}, hugeImage{image.Rect(0, 0, 1<<40, 1<<40)},
		hugeImage{image.Rect(math.MinInt, math.MinInt, math.MaxInt, math.MaxInt)}, hugeImage{image.Rect(0, 0, 1<<25, 1<<25)},
		nilColors{hugeImage{image.Rect(0, 0, 2, 2)}}, &image.Gray{Rect: image.Rect(0, 0, 3, 3)},
		&image.NRGBA{Rect: image.Rect(0, 0, 2, 2), Pix: make([]uint8, 16), Stride: -4},
		&image.Paletted{Rect: image.Rect(0, 0, 2, 2), Stride: 2, Palette: color.Palette{color.White}},
		&image.RGBA{Rect: image.Rect(0, 0, 2, 2), Stride: math.MaxInt}, nil)
	return v
}

// TestHostileInputs: no exported function of perturb panics, whatever its arguments; every
// error is a *tensor.Error.
func TestHostileInputs(t *testing.T) {
	hostile.Test(t, perturbFuncs(), nil, perturbValues(), hostile.Options{TensorErrors: true})
}
