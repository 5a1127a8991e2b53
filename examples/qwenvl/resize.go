package qwenvl

import (
	"math"

	"github.com/mtrl-go/mtrl/tensor"
)

// SmartResize returns the height and width Qwen2VLImageProcessor resizes an image of
// height × width to: both multiples of factor, minPixels ≤ h·w ≤ maxPixels, the aspect ratio
// kept as closely as that allows. As Hugging Face's smart_resize, a side below factor or an
// aspect ratio above 200 is an error, and the first guess rounds halves to even (Python's round).
func SmartResize(height, width, factor, minPixels, maxPixels int) (h, w int, err error) {
	const op = "qwenvl.SmartResize"
	switch {
	case factor <= 0:
		return 0, 0, tensor.Errorf(tensor.ErrParam, op, "factor", "%d must be positive", factor)
	case height < factor || width < factor:
		return 0, 0, tensor.Errorf(tensor.ErrShape, op, "image", "height %d or width %d is below the factor %d", height, width, factor)
	case float64(max(height, width))/float64(min(height, width)) > 200:
		return 0, 0, tensor.Errorf(tensor.ErrShape, op, "image", "aspect ratio %d:%d is above 200", max(height, width), min(height, width))
	}
	f := float64(factor)
	h = int(math.RoundToEven(float64(height)/f)) * factor
	w = int(math.RoundToEven(float64(width)/f)) * factor
	// Python evaluates height / beta / factor left to right in float64; so does this.
	if h*w > maxPixels {
		beta := math.Sqrt(float64(height*width) / float64(maxPixels))
		h = int(math.Floor(float64(height)/beta/f)) * factor
		w = int(math.Floor(float64(width)/beta/f)) * factor
	} else if h*w < minPixels {
		beta := math.Sqrt(float64(minPixels) / float64(height*width))
		h = int(math.Ceil(float64(float64(height)*beta)/f)) * factor
		w = int(math.Ceil(float64(float64(width)*beta)/f)) * factor
	}
	return h, w, nil
}

// RGB is an 8-bit RGB image, rows top to bottom, pixels packed R, G, B.
type RGB struct {
	Width, Height int
	Pix           []uint8 // len 3·Width·Height
}

// NewRGB returns a black width × height image.
func NewRGB(width, height int) *RGB {
	return &RGB{Width: width, Height: height, Pix: make([]uint8, 3*width*height)}
}

// Pillow's fixed-point format for 8-bit resampling: coefficients scaled by 2^22, leaving room
// for the 8-bit pixel and for sums of negative lobes above 1 in an int32.
const (
	precisionBits = 32 - 8 - 2
	bicubicA      = -0.5 // Pillow's (and Keys') bicubic parameter
	bicubicRadius = 2.0
)

// bicubic is Pillow's bicubic kernel (a = -0.5). The explicit float64 conversions keep every
// product rounded on its own, as the C code's are, on targets that could fuse them.
func bicubic(x float64) float64 {
	if x < 0 {
		x = -x
	}
	if x < 1 {
		p := float64((bicubicA+2)*x) - (bicubicA + 3)
		p = float64(p * x)
		return float64(p*x) + 1
	}
	if x < 2 {
		p := float64(float64(x-5)*x) + 8
		p = float64(p*x) - 4
		return p * bicubicA
	}
	return 0
}

// taps holds, for each output pixel along one axis, the first input pixel it reads, how many it
// reads and their fixed-point weights (ksize per output pixel).
type taps struct {
	first, count []int
	weight       []int32
	ksize        int
}

// bicubicTaps computes Pillow's weights for resampling inSize pixels to outSize: the kernel is
// widened by the downscale factor (so downscaling averages rather than aliases), each output
// pixel's weights are normalised to sum to one, then rounded half away from zero to 2^22.
func bicubicTaps(inSize, outSize int) taps {
	scale := float64(inSize) / float64(outSize)
	filterScale := max(scale, 1)
	support := bicubicRadius * filterScale
	ksize := int(math.Ceil(support))*2 + 1
	t := taps{first: make([]int, outSize), count: make([]int, outSize), weight: make([]int32, outSize*ksize), ksize: ksize}
	w := make([]float64, ksize)
	inv := 1 / filterScale
	for o := range outSize {
		center := float64(float64(o)+0.5) * scale
		lo := max(int(center-support+0.5), 0) // int() truncates as C's cast does
		hi := min(int(center+support+0.5), inSize)
		n := hi - lo
		var sum float64
		for i := range n {
			w[i] = bicubic(float64(float64(i+lo)-center+0.5) * inv)
			sum += w[i]
		}
		k := t.weight[o*ksize : o*ksize+ksize]
		for i := range n {
			if sum != 0 {
				w[i] /= sum
			}
			scaled := float64(w[i] * (1 << precisionBits))
			if w[i] < 0 {
				k[i] = int32(scaled - 0.5)
			} else {
				k[i] = int32(scaled + 0.5)
			}
		}
		t.first[o], t.count[o] = lo, n
	}
	return t
}

// clip8 turns a fixed-point sum into a byte as Pillow does: shift out the fraction (the sum
// started at one half, so this rounds), then clamp to 0..255.
func clip8(s int32) uint8 {
	v := s >> precisionBits
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// ResizeBicubic returns src resized to width × height exactly as Pillow's
// Image.resize((width, height), Image.BICUBIC) resizes an RGB image: a horizontal pass into an
// 8-bit intermediate (only over the rows the vertical pass reads), then a vertical pass, each
// with bicubicTaps' fixed-point weights and clip8's rounding. The same size returns a copy.
func ResizeBicubic(src *RGB, width, height int) (*RGB, error) {
	const op = "qwenvl.ResizeBicubic"
	if src == nil || src.Width <= 0 || src.Height <= 0 || len(src.Pix) != 3*src.Width*src.Height {
		return nil, tensor.Errorf(tensor.ErrShape, op, "src", "need a non-empty image with 3·width·height bytes")
	}
	if width <= 0 || height <= 0 {
		return nil, tensor.Errorf(tensor.ErrShape, op, "size", "%d×%d must be positive", width, height)
	}
	if width == src.Width && height == src.Height {
		return &RGB{Width: width, Height: height, Pix: append([]uint8(nil), src.Pix...)}, nil
	}
	vert := bicubicTaps(src.Height, height)
	rowFirst := vert.first[0]
	rowEnd := vert.first[height-1] + vert.count[height-1]
	img, rowOffset := src, 0
	if width != src.Width {
		img = resampleRows(src, width, rowFirst, rowEnd, bicubicTaps(src.Width, width))
		rowOffset = rowFirst
	}
	if height == src.Height {
		return img, nil
	}
	return resampleColumns(img, height, rowOffset, vert), nil
}

// resampleRows resamples rows [rowFirst, rowEnd) of src to width pixels each.
func resampleRows(src *RGB, width, rowFirst, rowEnd int, t taps) *RGB {
	dst := NewRGB(width, rowEnd-rowFirst)
	for y := rowFirst; y < rowEnd; y++ {
		in := src.Pix[3*y*src.Width : 3*(y+1)*src.Width]
		out := dst.Pix[3*(y-rowFirst)*width : 3*(y-rowFirst+1)*width]
		for x := range width {
			k := t.weight[x*t.ksize : x*t.ksize+t.count[x]]
			px := in[3*t.first[x] : 3*(t.first[x]+len(k))]
			r, g, b := int32(1<<(precisionBits-1)), int32(1<<(precisionBits-1)), int32(1<<(precisionBits-1))
			for i, w := range k {
				r += int32(px[3*i]) * w
				g += int32(px[3*i+1]) * w
				b += int32(px[3*i+2]) * w
			}
			out[3*x], out[3*x+1], out[3*x+2] = clip8(r), clip8(g), clip8(b)
		}
	}
	return dst
}

// resampleColumns resamples src to height rows; src's row 0 is the source row rowOffset.
func resampleColumns(src *RGB, height, rowOffset int, t taps) *RGB {
	stride := 3 * src.Width
	dst := NewRGB(src.Width, height)
	acc := make([]int32, stride)
	for y := range height {
		k := t.weight[y*t.ksize : y*t.ksize+t.count[y]]
		first := t.first[y] - rowOffset
		for i := range acc {
			acc[i] = 1 << (precisionBits - 1)
		}
		for i, w := range k {
			row := src.Pix[(first+i)*stride : (first+i+1)*stride]
			for j, v := range row {
				acc[j] += int32(v) * w
			}
		}
		out := dst.Pix[y*stride : (y+1)*stride]
		for j, s := range acc {
			out[j] = clip8(s)
		}
	}
	return dst
}
