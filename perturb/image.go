package perturb

import (
	"image"
	"image/color"

	"github.com/mtrl-go/mtrl/tensor"
)

// FromImage converts img to a CPU uint8 tensor in the layout np.array(pil_image) gives:
// grayscale images (*image.Gray, *image.Gray16) become [H, W]; images that report themselves
// opaque (Opaque() true, e.g. JPEG's *image.YCbCr or an NRGBA whose alpha is all 255) become RGB
// [H, W, 3]; all others become non-premultiplied RGBA [H, W, 4]. Use FromImageAs to force a
// layout.
func FromImage(img image.Image) (*tensor.Tensor, error) { return FromImageAs(img, 0) }

// FromImageAs converts img to [H, W] (channels 1, grayscale by Go's color.GrayModel luma),
// [H, W, 3] (channels 3, RGB, alpha dropped), [H, W, 4] (channels 4, non-premultiplied RGBA) or,
// for channels 0, the layout FromImage picks. Other channel counts are ErrParam.
func FromImageAs(img image.Image, channels int) (*tensor.Tensor, error) {
	const op = "perturb.FromImageAs"
	if img == nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, "img", "is nil")
	}
	b := img.Bounds()
	h, w := b.Dy(), b.Dx() // negative when the bounds' width overflows int
	if err := checkPixels(op, "img.Bounds()", h, w); err != nil {
		return nil, err
	}
	if err := checkStdImage(op, img); err != nil {
		return nil, err
	}
	if channels == 0 {
		switch im := img.(type) {
		case *image.Gray, *image.Gray16:
			channels = 1
		case interface{ Opaque() bool }:
			channels = 4
			if im.Opaque() {
				channels = 3
			}
		default:
			channels = 4
		}
	}
	if channels != 1 && channels != 3 && channels != 4 {
		return nil, tensor.Errorf(tensor.ErrParam, op, "channels", "is %d, want 0, 1, 3 or 4", channels)
	}
	shape := []int{h, w, channels}
	if channels == 1 {
		shape = shape[:2]
	}
	if err := checkPixels(op, "img.Bounds()", shape...); err != nil {
		return nil, err
	}
	t, err := tensor.New(tensor.CPU(), tensor.Uint8, shape...)
	if err != nil {
		return nil, err
	}
	out, _ := t.Uint8s()
	if g, ok := img.(*image.Gray); ok && channels == 1 {
		for y := range h {
			copy(out[y*w:(y+1)*w], g.Pix[g.PixOffset(b.Min.X, b.Min.Y+y):])
		}
		return t, nil
	}
	n, isNRGBA := img.(*image.NRGBA)
	for y := range h {
		for x := range w {
			if isNRGBA && channels != 1 {
				o := n.PixOffset(b.Min.X+x, b.Min.Y+y)
				copy(out[(y*w+x)*channels:(y*w+x+1)*channels], n.Pix[o:o+4])
				continue
			}
			c := img.At(b.Min.X+x, b.Min.Y+y)
			if c == nil {
				return nil, tensor.Errorf(tensor.ErrParam, op, "img", "has no colour at (%d, %d) (At returned nil)", b.Min.X+x, b.Min.Y+y)
			}
			if channels == 1 {
				out[y*w+x] = color.GrayModel.Convert(c).(color.Gray).Y
				continue
			}
			nc := color.NRGBAModel.Convert(c).(color.NRGBA)
			px := [4]uint8{nc.R, nc.G, nc.B, nc.A}
			copy(out[(y*w+x)*channels:(y*w+x+1)*channels], px[:channels])
		}
	}
	return t, nil
}

// checkStdImage checks the pixel memory of the standard library's images against their
// bounds, and a paletted image's indices against its palette: their Opaque and At methods
// index Pix without checking. (The planes of *image.YCbCr are not checked.)
func checkStdImage(op string, img image.Image) error {
	h, w := img.Bounds().Dy(), img.Bounds().Dx()
	switch im := img.(type) {
	case *image.Gray:
		return checkPix(op, im.Pix, im.Stride, 1, h, w)
	case *image.Gray16:
		return checkPix(op, im.Pix, im.Stride, 2, h, w)
	case *image.Alpha:
		return checkPix(op, im.Pix, im.Stride, 1, h, w)
	case *image.Alpha16:
		return checkPix(op, im.Pix, im.Stride, 2, h, w)
	case *image.RGBA:
		return checkPix(op, im.Pix, im.Stride, 4, h, w)
	case *image.RGBA64:
		return checkPix(op, im.Pix, im.Stride, 8, h, w)
	case *image.NRGBA:
		return checkPix(op, im.Pix, im.Stride, 4, h, w)
	case *image.NRGBA64:
		return checkPix(op, im.Pix, im.Stride, 8, h, w)
	case *image.CMYK:
		return checkPix(op, im.Pix, im.Stride, 4, h, w)
	case *image.Paletted:
		if err := checkPix(op, im.Pix, im.Stride, 1, h, w); err != nil {
			return err
		}
		return checkPalette(op, im)
	}
	return nil
}

// checkPix checks that pixel memory of the given stride and bytes per pixel holds h rows of
// w pixels.
func checkPix(op string, pix []uint8, stride, bpp, h, w int) error {
	if h == 0 || w == 0 {
		return nil
	}
	last, err := tensor.CheckSize(op, "img.Stride", h-1, stride) // offset of the last row
	if err == nil && (stride < w*bpp || last > len(pix) || w*bpp > len(pix)-last) {
		err = tensor.Errorf(tensor.ErrShape, op, "img", "has %d bytes of pixels with stride %d, a %d×%d image needs %d bytes per row", len(pix), stride, h, w, w*bpp)
	}
	return err
}

// checkPalette checks that every pixel of p indexes its palette (image.Paletted.At panics or
// returns nil otherwise).
func checkPalette(op string, p *image.Paletted) error {
	b := p.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		row := p.Pix[p.PixOffset(b.Min.X, y):][:b.Dx()]
		for x, i := range row {
			if int(i) >= len(p.Palette) {
				return tensor.Errorf(tensor.ErrParam, op, "img", "pixel (%d, %d) has palette index %d, the palette has %d colours", b.Min.X+x, y, i, len(p.Palette))
			}
		}
	}
	return nil
}

// ToImage converts a uint8 image tensor to an image.Image: [H, W] and [H, W, 1] become
// *image.Gray, [H, W, 3] becomes *image.NRGBA with opaque alpha and [H, W, 4] becomes
// *image.NRGBA (non-premultiplied, like PIL's RGBA). The pixels are copied (device tensors are
// downloaded first).
func ToImage(t *tensor.Tensor) (image.Image, error) {
	const op = "perturb.ToImage"
	if t == nil {
		return nil, tensor.Errorf(tensor.ErrShape, op, "t", "is nil")
	}
	if err := tensor.CheckDType(op, "t", t, tensor.Uint8); err != nil {
		return nil, err
	}
	_, g, err := imageGeom(op, "t", t.Shape(), false)
	if err != nil {
		return nil, err
	}
	var img image.Image
	err = tensor.OnHost(0, []*tensor.Tensor{t}, func(h []*tensor.Tensor) error {
		p, _ := h[0].Uint8s()
		r := image.Rect(0, 0, g.w, g.h)
		if g.c == 1 {
			im := image.NewGray(r)
			copy(im.Pix, p)
			img = im
			return nil
		}
		im := image.NewNRGBA(r)
		for i := range g.h * g.w {
			px := im.Pix[4*i : 4*i+4]
			copy(px, p[i*g.c:(i+1)*g.c])
			if g.c == 3 {
				px[3] = 255
			}
		}
		img = im
		return nil
	})
	return img, err
}
