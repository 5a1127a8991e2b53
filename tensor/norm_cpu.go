package tensor

import (
	"math"
	"runtime"

	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// rowKernels are the vector row kernels of the host RMSNorm and RoPE (rownorm_amd64.s), bit
// for bit the Go loops below and in rope_cpu.go, for float32 and bfloat16 activations
// (widened as loaded, rounded once as stored).
type rowKernels struct {
	lanes      int
	sumSq8F32  func(x []float32, d int, ss *[8]float64)
	sumSq8BF16 func(x []uint16, d int, ss *[8]float64)
	scaleF32   func(y, x, w []float32, r float32)
	scaleBF16  func(y, x []uint16, w []float32, r float32)
	ropeF32    func(y, x, cos, sin []float32, d int)
	ropeBF16   func(y, x []uint16, cos, sin []float32, d int)

	// RMSNorm's backward: the rows' sums, then dx and the weight gradient's terms in one pass.
	rmsDot8F32   func(x, dy, w []float32, r *[8]float32, d int, gx *[8]float64)
	rmsDot8BF16  func(x, dy []uint16, w []float32, r *[8]float32, d int, gx *[8]float64)
	rmsDXAccF32  func(dx, x, dy, w, sw []float32, r, c float32)
	rmsDXAccBF16 func(dx, x, dy []uint16, w, sw []float32, r, c float32)
}

// rowImpls lists the row kernels this build and CPU can run, the Go loops last.
var rowImpls = dispatch.New(rowSIMD()...)

// rmsNormHost is RMSNorm on host tensors: nnref.RMSNorm's float32 arithmetic in its order, bit
// for bit (each row's float64 sum of squares in column order, r = 1/sqrt(mean + eps) rounded
// to float32, y = w·float32(x·r)), read and written in place: a bfloat16 x is widened as it is
// read and y rounded once as it is stored, without a conversion pass or scratch. The vector
// kernels sum 8 rows at once, a row per float64 lane (sumSq8), the Go loops 4 rows
// interleaved, each in its own order, so the sums are not one chain of dependent adds. Each
// row's r goes to rstd when it is not nil.
func rmsNormHost(y, x *Tensor, w []float32, eps float64, rstd []float32) {
	rows, d := rowsOf(x), x.Dim(-1)
	scale := func(i int, ss float64) float32 {
		r := float32(1 / math.Sqrt(ss/float64(d)+eps))
		if rstd != nil {
			rstd[i] = r
		}
		return r
	}
	k := rowImpls.Active()
	if x.dtype == BFloat16 {
		xb, yb := bf16Of(x), bf16Of(y)
		sq := func(h BF16) float64 { v := float64(h.Float32()); return v * v }
		parallel.For(rows, parallel.Grain(d, 1<<14), func(lo, hi int) {
			i := lo
			for ; k != nil && i+8 <= hi; i += 8 {
				var ss [8]float64
				k.sumSq8BF16(bf16Bits(xb[i*d:(i+8)*d]), d, &ss)
				for r := range 8 {
					for _, h := range xb[(i+r)*d+d/8*8 : (i+r+1)*d] {
						ss[r] += sq(h)
					}
					scaleRowBF16(k, yb[(i+r)*d:(i+r+1)*d], xb[(i+r)*d:(i+r+1)*d], w, scale(i+r, ss[r]))
				}
			}
			for ; i+4 <= hi; i += 4 {
				ss := sumSq4BF16(xb[i*d:(i+4)*d], d)
				for r := range 4 {
					scaleRowBF16(k, yb[(i+r)*d:(i+r+1)*d], xb[(i+r)*d:(i+r+1)*d], w, scale(i+r, ss[r]))
				}
			}
			for ; i < hi; i++ {
				var ss float64
				for _, h := range xb[i*d : (i+1)*d] {
					ss += sq(h)
				}
				scaleRowBF16(k, yb[i*d:(i+1)*d], xb[i*d:(i+1)*d], w, scale(i, ss))
			}
		})
		return
	}
	xf, yf := hostF32(x), hostF32(y)
	parallel.For(rows, parallel.Grain(d, 1<<14), func(lo, hi int) {
		i := lo
		for ; k != nil && i+8 <= hi; i += 8 {
			var ss [8]float64
			k.sumSq8F32(xf[i*d:(i+8)*d], d, &ss)
			for r := range 8 {
				for _, v := range xf[(i+r)*d+d/8*8 : (i+r+1)*d] {
					ss[r] += float64(v) * float64(v)
				}
				scaleRowF32(k, yf[(i+r)*d:(i+r+1)*d], xf[(i+r)*d:(i+r+1)*d], w, scale(i+r, ss[r]))
			}
		}
		for ; i+4 <= hi; i += 4 {
			ss := sumSq4F32(xf[i*d:(i+4)*d], d)
			for r := range 4 {
				scaleRowF32(k, yf[(i+r)*d:(i+r+1)*d], xf[(i+r)*d:(i+r+1)*d], w, scale(i+r, ss[r]))
			}
		}
		for ; i < hi; i++ {
			var ss float64
			for _, v := range xf[i*d : (i+1)*d] {
				ss += float64(v) * float64(v)
			}
			scaleRowF32(k, yf[i*d:(i+1)*d], xf[i*d:(i+1)*d], w, scale(i, ss))
		}
	})
}

// sumSq4F32 returns the float64 sums of squares of the four rows of d in x, each summed in
// column order. A product of two widened float32 values is exact in float64, so a fused
// multiply-add gives the same sums.
func sumSq4F32(x []float32, d int) [4]float64 {
	a, b, c, e := x[:d], x[d:2*d], x[2*d:3*d], x[3*d:4*d]
	var s0, s1, s2, s3 float64
	for j, v := range a {
		v0, v1, v2, v3 := float64(v), float64(b[j]), float64(c[j]), float64(e[j])
		s0 += v0 * v0
		s1 += v1 * v1
		s2 += v2 * v2
		s3 += v3 * v3
	}
	return [4]float64{s0, s1, s2, s3}
}

// sumSq4BF16 is sumSq4F32 on bfloat16 rows.
func sumSq4BF16(x []BF16, d int) [4]float64 {
	a, b, c, e := x[:d], x[d:2*d], x[2*d:3*d], x[3*d:4*d]
	var s0, s1, s2, s3 float64
	for j, h := range a {
		v0, v1, v2, v3 := float64(h.Float32()), float64(b[j].Float32()), float64(c[j].Float32()), float64(e[j].Float32())
		s0 += v0 * v0
		s1 += v1 * v1
		s2 += v2 * v2
		s3 += v3 * v3
	}
	return [4]float64{s0, s1, s2, s3}
}

// scaleRowF32 writes y = w·float32(x·r), whole vectors with k's kernel when k is not nil.
func scaleRowF32(k *rowKernels, y, x, w []float32, r float32) {
	x, w = x[:len(y)], w[:len(y)]
	n := 0
	if k != nil {
		if n = len(y) / k.lanes * k.lanes; n > 0 {
			k.scaleF32(y[:n], x[:n], w[:n], r)
		}
	}
	for j := n; j < len(y); j++ {
		y[j] = w[j] * (x[j] * r)
	}
}

// scaleRowBF16 is scaleRowF32 on bfloat16 x and y, y rounded once.
func scaleRowBF16(k *rowKernels, y, x []BF16, w []float32, r float32) {
	x, w = x[:len(y)], w[:len(y)]
	n := 0
	if k != nil {
		if n = len(y) / k.lanes * k.lanes; n > 0 {
			k.scaleBF16(bf16Bits(y[:n]), bf16Bits(x[:n]), w[:n], r)
		}
	}
	for j := n; j < len(y); j++ {
		y[j] = BF16FromFloat32(w[j] * (x[j].Float32() * r))
	}
}

// at returns element i of a host activation as float32.
func (v actView) at(i int) float32 {
	if v.b16 {
		return v.b[i].Float32()
	}
	return v.f[i]
}

// set writes element i of a host activation (rounded once when bfloat16).
func (v actView) set(i int, f float32) {
	if v.b16 {
		v.b[i] = BF16FromFloat32(f)
	} else {
		v.f[i] = f
	}
}

// rmsNormBackwardHost is nnref.RMSNormBackward on host activations read and written in place
// with the row kernels, bit for bit, in two passes. The first, over groups of 8 rows, finds each
// row's r = 1/sqrt(mean(x²) + eps) (float64 sum in column order; taken from saved, the
// forward's, when not nil) and c = float32(gx/d) with gx = Σ float64(dy·w)·float64(x·r)
// (likewise), with the 8-row kernels on the first d/8·8 columns of a whole group and Go for the
// rest. The second writes dx = r·(dy·w − (x·r)·c) and sums dw = Σ dy·(x·r) (normBackwardPasses).
func rmsNormBackwardHost(k *rowKernels, dx, x, dy actView, w, dw []float32, rows, d int, eps float64, saved []float32, acc bool) {
	st := make([]float32, 2*rows) // each row's r and c
	stats := func(i0, n int) {
		var ss, gx [8]float64
		var r [8]float32
		c0 := d / 8 * 8
		if n < 8 {
			c0 = 0
		}
		if saved != nil {
			copy(r[:n], saved[i0:i0+n])
		} else {
			if n == 8 {
				if x.b16 {
					k.sumSq8BF16(bf16Bits(x.b[i0*d:(i0+8)*d]), d, &ss)
				} else {
					k.sumSq8F32(x.f[i0*d:(i0+8)*d], d, &ss)
				}
			}
			for q := range n {
				o := (i0 + q) * d
				for j := c0; j < d; j++ {
					v := float64(x.at(o + j))
					ss[q] += v * v
				}
				r[q] = float32(1 / math.Sqrt(ss[q]/float64(d)+eps))
			}
		}
		if n == 8 {
			if x.b16 {
				k.rmsDot8BF16(bf16Bits(x.b[i0*d:(i0+8)*d]), bf16Bits(dy.b[i0*d:(i0+8)*d]), w, &r, d, &gx)
			} else {
				k.rmsDot8F32(x.f[i0*d:(i0+8)*d], dy.f[i0*d:(i0+8)*d], w, &r, d, &gx)
			}
		}
		for q := range n {
			o, rq := (i0+q)*d, r[q]
			for j := c0; j < d; j++ {
				gx[q] += float64(dy.at(o+j)*w[j]) * float64(x.at(o+j)*rq)
			}
			st[2*(i0+q)], st[2*(i0+q)+1] = rq, float32(gx[q]/float64(d))
		}
	}
	normBackwardPasses(rows, d, dw, nil, acc, stats, func(i, lo, hi int, sw, _ []float32) {
		o, r, c := i*d, st[2*i], st[2*i+1]
		m := lo + (hi-lo)/k.lanes*k.lanes
		if m > lo {
			if x.b16 {
				k.rmsDXAccBF16(bf16Bits(dx.b[o+lo:o+m]), bf16Bits(x.b[o+lo:o+m]), bf16Bits(dy.b[o+lo:o+m]), w[lo:m], sw[lo:m], r, c)
			} else {
				k.rmsDXAccF32(dx.f[o+lo:o+m], x.f[o+lo:o+m], dy.f[o+lo:o+m], w[lo:m], sw[lo:m], r, c)
			}
		}
		for j := m; j < hi; j++ {
			g, xh := dy.at(o+j), float32(x.at(o+j)*r)
			sw[j] += float32(g * xh)
			dx.set(o+j, r*(float32(g*w[j])-float32(xh*c)))
		}
	})
}

// normBackwardPasses runs the norms' two backward passes. The first, stats(i0, n), finds the
// statistics and sums of the n <= 8 rows from i0, in parallel over groups of 8 rows. The second,
// row(i, lo, hi, sw, sb), writes dx on columns [lo, hi) of row i and adds its terms of the
// weight and bias gradients to the column sums sw and sb [d]; every block of columns goes over
// the rows in order, so that every column sums the rows in nnref.NormWeightGrad's order, and
// the result is the same bits for any split. With two cores or fewer the columns are one block
// (one core streams x and dy a row at a time: on a loaded 2-core Zen 4, splitting the columns or
// pipelining chunks of rows between the cores cost more CPU time than it saved wall time); with
// more, blocks of normColumnBlock columns run in parallel, so that the pass scales with the cores
// instead of running on one. At the end the sums overwrite dw and db (db nil for RMSNorm), or are
// added to them when acc.
func normBackwardPasses(rows, d int, dw, db []float32, acc bool, stats func(i0, n int), row func(i, lo, hi int, sw, sb []float32)) {
	parallel.For((rows+7)/8, parallel.Grain(8*d, 1<<14), func(glo, ghi int) {
		for g := glo; g < ghi; g++ {
			stats(8*g, min(8, rows-8*g))
		}
	})
	sw, sb := make([]float32, d), make([]float32, d)
	width := d
	if runtime.GOMAXPROCS(0) > 2 && rows*d >= 1<<16 {
		width = normColumnBlock
	}
	parallel.For(d, width, func(lo, hi int) {
		for i := range rows {
			row(i, lo, hi, sw, sb)
		}
	})
	for j := range d {
		if acc {
			sw[j] += dw[j]
			if db != nil {
				sb[j] += db[j]
			}
		}
		dw[j] = sw[j]
		if db != nil {
			db[j] = sb[j]
		}
	}
}

// normColumnBlock is the width of the second backward pass's column blocks on more than two
// cores: a multiple of every vector width, and 2 KiB of each float32 row.
const normColumnBlock = 512
