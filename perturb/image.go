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
	b := img.Bounds()
	h, w := b.Dy(), b.Dx()
	var out []uint8
	var shape []int
	switch channels {
	case 1:
		out, shape = make([]uint8, h*w), []int{h, w}
		if g, ok := img.(*image.Gray); ok {
			for y := range h {
				copy(out[y*w:(y+1)*w], g.Pix[g.PixOffset(b.Min.X, b.Min.Y+y):])
			}
			break
		}
		for y := range h {
			for x := range w {
				out[y*w+x] = color.GrayModel.Convert(img.At(b.Min.X+x, b.Min.Y+y)).(color.Gray).Y
			}
		}
	case 3, 4:
		out, shape = make([]uint8, h*w*channels), []int{h, w, channels}
		n, isNRGBA := img.(*image.NRGBA)
		for y := range h {
			for x := range w {
				var px [4]uint8
				if isNRGBA {
					o := n.PixOffset(b.Min.X+x, b.Min.Y+y)
					copy(px[:], n.Pix[o:o+4])
				} else {
					c := color.NRGBAModel.Convert(img.At(b.Min.X+x, b.Min.Y+y)).(color.NRGBA)
					px = [4]uint8{c.R, c.G, c.B, c.A}
				}
				copy(out[(y*w+x)*channels:(y*w+x+1)*channels], px[:channels])
			}
		}
	default:
		return nil, tensor.Errorf(tensor.ErrParam, op, "channels", "is %d, want 0, 1, 3 or 4", channels)
	}
	return tensor.FromUint8(out, shape...)
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
