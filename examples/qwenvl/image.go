package qwenvl

import (
	"image"
	"image/color"
	_ "image/gif" // registered decoders: the formats LoadImage reads
	_ "image/jpeg"
	_ "image/png"
	"os"

	"github.com/mtrl-go/mtrl/tensor"
)

// ToRGB converts img to 8-bit RGB as Pillow's Image.convert("RGB") does, which is what
// Hugging Face's convert_to_rgb calls: gray is replicated, a palette is looked up, alpha is
// dropped (not composited onto a background), 16-bit channels keep their high byte (as Pillow
// reads 16-bit RGB PNGs). 16-bit gray is an error (Pillow reads it as mode I;16, whose
// conversion to RGB clips at 255), and so is CMYK (Pillow's formula differs by version).
// JPEG's YCbCr is converted by Go's decoder, which can differ from libjpeg by a level.
func ToRGB(img image.Image) (*RGB, error) {
	const op = "qwenvl.ToRGB"
	if img == nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, "img", "nil image")
	}
	b := img.Bounds()
	if b.Empty() {
		return nil, tensor.Errorf(tensor.ErrShape, op, "img", "empty image %v", b)
	}
	dst := NewRGB(b.Dx(), b.Dy())
	set := func(x, y int, r, g, bl uint8) {
		i := 3 * ((y-b.Min.Y)*dst.Width + x - b.Min.X)
		dst.Pix[i], dst.Pix[i+1], dst.Pix[i+2] = r, g, bl
	}
	switch src := img.(type) {
	case *image.RGBA: // what Go's PNG decoder returns for RGB without alpha
		if src.Opaque() {
			for y := b.Min.Y; y < b.Max.Y; y++ {
				row := src.Pix[src.PixOffset(b.Min.X, y):]
				out := dst.Pix[3*(y-b.Min.Y)*dst.Width:]
				for x := range dst.Width {
					out[3*x], out[3*x+1], out[3*x+2] = row[4*x], row[4*x+1], row[4*x+2]
				}
			}
			return dst, nil
		}
		return convertEach(dst, img), nil
	case *image.NRGBA:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			row := src.Pix[src.PixOffset(b.Min.X, y):]
			out := dst.Pix[3*(y-b.Min.Y)*dst.Width:]
			for x := range dst.Width {
				out[3*x], out[3*x+1], out[3*x+2] = row[4*x], row[4*x+1], row[4*x+2]
			}
		}
	case *image.Gray16, *image.CMYK:
		return nil, tensor.Errorf(tensor.ErrParam, op, "img", "%T is not supported (convert it to 8-bit RGB first)", img)
	case *image.Paletted:
		pal := make([][3]uint8, len(src.Palette))
		for i, c := range src.Palette {
			pal[i] = straightRGB(c)
		}
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				p := pal[src.ColorIndexAt(x, y)]
				set(x, y, p[0], p[1], p[2])
			}
		}
	default:
		convertEach(dst, img)
	}
	return dst, nil
}

// convertEach fills dst pixel by pixel through straightRGB.
func convertEach(dst *RGB, img image.Image) *RGB {
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			p := straightRGB(img.At(x, y))
			i := 3 * ((y-b.Min.Y)*dst.Width + x - b.Min.X)
			dst.Pix[i], dst.Pix[i+1], dst.Pix[i+2] = p[0], p[1], p[2]
		}
	}
	return dst
}

// straightRGB returns the colour channels of c without alpha, un-premultiplied: exact for the
// non-premultiplied and opaque types Go's decoders return (NRGBA, NRGBA64, Gray, YCbCr, opaque
// RGBA); a translucent premultiplied colour is un-premultiplied by color.NRGBAModel.
func straightRGB(c color.Color) [3]uint8 {
	switch v := c.(type) {
	case color.NRGBA:
		return [3]uint8{v.R, v.G, v.B}
	case color.NRGBA64:
		return [3]uint8{uint8(v.R >> 8), uint8(v.G >> 8), uint8(v.B >> 8)}
	case color.Gray:
		return [3]uint8{v.Y, v.Y, v.Y}
	case color.RGBA:
		if v.A == 0xff {
			return [3]uint8{v.R, v.G, v.B}
		}
	case color.RGBA64:
		if v.A == 0xffff {
			return [3]uint8{uint8(v.R >> 8), uint8(v.G >> 8), uint8(v.B >> 8)}
		}
	}
	n := color.NRGBA64Model.Convert(c).(color.NRGBA64)
	return [3]uint8{uint8(n.R >> 8), uint8(n.G >> 8), uint8(n.B >> 8)}
}

// LoadImage decodes a PNG, JPEG or GIF file and converts it with ToRGB.
func LoadImage(path string) (*RGB, error) {
	const op = "qwenvl.LoadImage"
	f, err := os.Open(path)
	if err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, "path", "%v", err)
	}
	defer f.Close()
	img, _, err := image.Decode(f)
	if err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, "path", "%s: %v", path, err)
	}
	return ToRGB(img)
}
