package tensor

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// lnKernels are the vector row kernels of the host LayerNorm (layernorm_amd64.s), bit for bit
// the Go loops below (nnref.LayerNorm's and nnref.LayerNormDX's float32 arithmetic in their
// order), for float32 and bfloat16 activations (widened as loaded, rounded once as stored).
type lnKernels struct {
	lanes      int
	sum8F32    func(x []float32, d int, s *[8]float64)
	sum8BF16   func(x []uint16, d int, s *[8]float64)
	devSq8F32  func(x []float32, d int, mu, s *[8]float64)
	devSq8BF16 func(x []uint16, d int, mu, s *[8]float64)
	scaleF32   func(y, x, w, b []float32, mu, r float32)
	scaleBF16  func(y, x []uint16, w, b []float32, mu, r float32)
	dot8F32    func(x, dy, w []float32, mu, r *[8]float32, d int, sg, sgx *[8]float64)
	dot8BF16   func(x, dy []uint16, w []float32, mu, r *[8]float32, d int, sg, sgx *[8]float64)
	dxAccF32   func(dx, x, dy, w, sw, sb []float32, mu, r, mg, mgx float32)
	dxAccBF16  func(dx, x, dy []uint16, w, sw, sb []float32, mu, r, mg, mgx float32)
}

// lnImpls lists the LayerNorm kernels this build and CPU can run, the Go loops last (which
// are nnref's, run on blocks of widened rows: normForwardHost and normBackwardHost).
var lnImpls = dispatch.New(lnSIMD()...)

// lnGroups runs f on the groups of (at most) 8 rows of rows, in parallel.
func lnGroups(rows, d int, f func(i0, n int)) {
	parallel.For((rows+7)/8, parallel.Grain(8*d, 1<<14), func(glo, ghi int) {
		for g := glo; g < ghi; g++ {
			f(8*g, min(8, rows-8*g))
		}
	})
}

// lnStats writes the mean and 1/sqrt(var + eps) of the n <= 8 rows of d from row i0 of x as
// nnref's layerStats, bit for bit: the float64 sum of x in column order, mu = sum/d in
// float64, the float64 sum of (x − mu)² in column order, each rounded to float32 at the end. A
// group of 8 sums the first d/8·8 columns with the 8-row kernels and the rest in Go.
func lnStats(k *lnKernels, x actView, i0, n, d int, eps float64, mean, rstd *[8]float32) {
	var s, mu, ss [8]float64
	c0, o := 0, i0*d
	if n == 8 {
		c0 = d / 8 * 8
		if x.b16 {
			k.sum8BF16(bf16Bits(x.b[o:o+8*d]), d, &s)
		} else {
			k.sum8F32(x.f[o:o+8*d], d, &s)
		}
	}
	for q := range n {
		for j := (i0+q)*d + c0; j < (i0+q+1)*d; j++ {
			s[q] += float64(x.at(j))
		}
		mu[q] = s[q] / float64(d)
	}
	if n == 8 {
		if x.b16 {
			k.devSq8BF16(bf16Bits(x.b[o:o+8*d]), d, &mu, &ss)
		} else {
			k.devSq8F32(x.f[o:o+8*d], d, &mu, &ss)
		}
	}
	for q := range n {
		for j := (i0+q)*d + c0; j < (i0+q+1)*d; j++ {
			v := float64(x.at(j)) - mu[q]
			ss[q] += v * v
		}
		mean[q], rstd[q] = float32(mu[q]), float32(1/math.Sqrt(ss[q]/float64(d)+eps))
	}
}

// layerNormHost is nnref.LayerNorm on host activations read and written in place with the
// vector kernels, bit for bit: y = w·((x − mean)·r) + b, each operation rounded to float32, a
// bfloat16 y rounded once as it is stored. The rows' mean and r go to saveMean and saveRstd
// when they are not nil.
func layerNormHost(k *lnKernels, y, x actView, w, b []float32, rows, d int, eps float64, saveMean, saveRstd []float32) {
	m := d / k.lanes * k.lanes
	lnGroups(rows, d, func(i0, n int) {
		var mean, rstd [8]float32
		lnStats(k, x, i0, n, d, eps, &mean, &rstd)
		if saveRstd != nil {
			copy(saveMean[i0:i0+n], mean[:n])
			copy(saveRstd[i0:i0+n], rstd[:n])
		}
		for q := range n {
			o, mu, r := (i0+q)*d, mean[q], rstd[q]
			if m > 0 {
				if x.b16 {
					k.scaleBF16(bf16Bits(y.b[o:o+m]), bf16Bits(x.b[o:o+m]), w[:m], b[:m], mu, r)
				} else {
					k.scaleF32(y.f[o:o+m], x.f[o:o+m], w[:m], b[:m], mu, r)
				}
			}
			for j := m; j < d; j++ {
				y.set(o+j, float32(w[j]*float32((x.at(o+j)-mu)*r))+b[j])
			}
		}
	})
}

// layerNormBackwardHost is nnref.LayerNormBackward on host activations read and written in
// place with the vector kernels, bit for bit, in two passes. The first, over groups of 8 rows,
// finds each row's mean and r (lnStats; taken from savedMean and savedRstd, the forward's, when
// not nil) and, with g = dy·w and x̂ = (x − mean)·r, mg = float32(Σ g / d) and
// mgx = float32(Σ g·x̂ / d) (float64 sums in column order). The second (normBackwardPasses) writes
// dx = r·(g − mg − x̂·mgx) and sums dw = Σ dy·x̂ and db = Σ dy.
func layerNormBackwardHost(k *lnKernels, dx, x, dy actView, w, dw, db []float32, rows, d int, eps float64, savedMean, savedRstd []float32, acc bool) {
	st := make([]float32, 4*rows) // each row's mean, r, mg and mgx
	stats := func(i0, n int) {
		var mu, r [8]float32
		var sg, sgx [8]float64
		if savedRstd != nil {
			copy(mu[:n], savedMean[i0:i0+n])
			copy(r[:n], savedRstd[i0:i0+n])
		} else {
			lnStats(k, x, i0, n, d, eps, &mu, &r)
		}
		c0, o := 0, i0*d
		if n == 8 {
			c0 = d / 8 * 8
			if x.b16 {
				k.dot8BF16(bf16Bits(x.b[o:o+8*d]), bf16Bits(dy.b[o:o+8*d]), w, &mu, &r, d, &sg, &sgx)
			} else {
				k.dot8F32(x.f[o:o+8*d], dy.f[o:o+8*d], w, &mu, &r, d, &sg, &sgx)
			}
		}
		for q := range n {
			o, mq, rq := (i0+q)*d, mu[q], r[q]
			for j := c0; j < d; j++ {
				g := float32(dy.at(o+j) * w[j])
				sg[q] += float64(g)
				sgx[q] += float64(g) * float64(float32((x.at(o+j)-mq)*rq))
			}
			i := i0 + q
			st[4*i], st[4*i+1], st[4*i+2], st[4*i+3] = mq, rq, float32(sg[q]/float64(d)), float32(sgx[q]/float64(d))
		}
	}
	normBackwardPasses(rows, d, dw, db, acc, stats, func(i, lo, hi int, sw, sb []float32) {
		o, mu, r, mg, mgx := i*d, st[4*i], st[4*i+1], st[4*i+2], st[4*i+3]
		m := lo + (hi-lo)/k.lanes*k.lanes
		if m > lo {
			if x.b16 {
				k.dxAccBF16(bf16Bits(dx.b[o+lo:o+m]), bf16Bits(x.b[o+lo:o+m]), bf16Bits(dy.b[o+lo:o+m]), w[lo:m], sw[lo:m], sb[lo:m], mu, r, mg, mgx)
			} else {
				k.dxAccF32(dx.f[o+lo:o+m], x.f[o+lo:o+m], dy.f[o+lo:o+m], w[lo:m], sw[lo:m], sb[lo:m], mu, r, mg, mgx)
			}
		}
		for j := m; j < hi; j++ {
			g, xh := dy.at(o+j), float32((x.at(o+j)-mu)*r)
			sw[j] += float32(g * xh)
			sb[j] += g
			dx.set(o+j, r*(float32(g*w[j])-mg-float32(xh*mgx)))
		}
	})
}
