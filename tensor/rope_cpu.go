package tensor

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// ropeHost is RoPE (or its inverse) on host tensors x, y [t, h, d]: nnref.RoPEFrequencies's
// float32 arithmetic, bit for bit (the angle pos·f rounded to float32, its cosine and sine
// from float64 rounded to float32, y = float32(x0·cos) − float32(x1·sin) and
// float32(x1·cos) + float32(x0·sin)), read and written in place: a bfloat16 x is widened as it
// is read and y rounded once as it is stored, without a conversion pass (the vector kernels
// rotate a token's heads, rownorm_amd64.s; the Go loop the columns left over). The cosine
// and sine come from one math.Sincos, which gives math.Cos's and math.Sin's bits (the same
// reduction and polynomials; TestRoPEHostMatchesReference).
func ropeHost(y, x *Tensor, pos []int32, sections []int, freq []float32, inverse bool) {
	t, h, d := x.Dim(0), x.Dim(1), x.Dim(2)
	half := d / 2
	sec := nnref.RoPESections(half, sections)
	bf := x.dtype == BFloat16
	var xf, yf []float32
	var xb, yb []BF16
	if bf {
		xb, yb = bf16Of(x), bf16Of(y)
	} else {
		xf, yf = hostF32(x), hostF32(y)
	}
	k := rowImpls.Active()
	parallel.For(t, parallel.Grain(h*d, 1<<14), func(lo, hi int) {
		cos, sin := make([]float32, half), make([]float32, half)
		for ti := lo; ti < hi; ti++ {
			for i := range half {
				a := float32(pos[sec[i]*t+ti]) * freq[i]
				s, c := math.Sincos(float64(a))
				cos[i], sin[i] = float32(c), float32(s)
				if inverse {
					sin[i] = -sin[i]
				}
			}
			o, nv := ti*h*d, 0
			if k != nil {
				if nv = half / k.lanes * k.lanes; nv > 0 {
					if bf {
						k.ropeBF16(bf16Bits(yb[o:o+h*d]), bf16Bits(xb[o:o+h*d]), cos[:nv], sin[:nv], d)
					} else {
						k.ropeF32(yf[o:o+h*d], xf[o:o+h*d], cos[:nv], sin[:nv], d)
					}
				}
			}
			for hh := range h {
				o := (ti*h + hh) * d
				if bf {
					xr, yr := xb[o:o+d], yb[o:o+d]
					for i := nv; i < half; i++ {
						x0, x1 := xr[i].Float32(), xr[i+half].Float32()
						yr[i] = BF16FromFloat32(float32(x0*cos[i]) - float32(x1*sin[i]))
						yr[i+half] = BF16FromFloat32(float32(x1*cos[i]) + float32(x0*sin[i]))
					}
					continue
				}
				xr, yr := xf[o:o+d], yf[o:o+d]
				for i := nv; i < half; i++ {
					x0, x1 := xr[i], xr[i+half]
					yr[i] = float32(x0*cos[i]) - float32(x1*sin[i])
					yr[i+half] = float32(x1*cos[i]) + float32(x0*sin[i])
				}
			}
		}
	})
}
