package nnref

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/parallel"
)

// RMSNorm writes y = w ⊙ (x · r) with r = 1/sqrt(mean(x²) + eps) for each of the rows of x
// [rows, d], as Qwen2's RMSNorm does in float32 (the mean is summed in float64 here).
func RMSNorm[F Float](rows, d int, x, w []F, eps float64, y []F) {
	parallel.For(rows, parallel.Grain(d, 1<<14), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xi, yi := x[i*d:i*d+d], y[i*d:i*d+d]
			r := rmsScale(xi, eps)
			for j, v := range xi {
				yi[j] = w[j] * F(v*r)
			}
		}
	})
}

func rmsScale[F Float](x []F, eps float64) F {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	return F(1 / math.Sqrt(ss/float64(len(x))+eps))
}

// RMSNormBackward writes dx and dw (overwritten, or added to when acc) for y = RMSNorm(x, w):
// with x̂ = x·r and g = dy ⊙ w, dx = r·(g − x̂·mean(g ⊙ x̂)) and dw = Σ_rows dy ⊙ x̂.
func RMSNormBackward[F Float](rows, d int, x, w, dy []F, eps float64, dx, dw []F, acc bool) {
	rstd := make([]F, rows)
	RMSNormDX(rows, d, x, w, dy, eps, dx, rstd)
	NormWeightGrad(rows, d, SliceRows(d, x, dy), dw, nil, acc, nil, rstd)
}

// RMSNormDX is RMSNormBackward's dx pass: it writes dx and each row's r into rstd [rows]. Rows
// are independent, so a caller may run it on any block of rows.
func RMSNormDX[F Float](rows, d int, x, w, dy []F, eps float64, dx, rstd []F) {
	parallel.For(rows, parallel.Grain(d, 1<<14), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xi, dyi, dxi := x[i*d:i*d+d], dy[i*d:i*d+d], dx[i*d:i*d+d]
			r := rmsScale(xi, eps)
			rstd[i] = r
			var gx float64
			for j, v := range xi {
				gx += float64(F(dyi[j]*w[j])) * float64(F(v*r))
			}
			c := F(gx / float64(d))
			for j, v := range xi {
				xh := F(v * r)
				dxi[j] = r * (F(dyi[j]*w[j]) - F(xh*c))
			}
		}
	})
}

// NormRows returns columns [lo, hi) of row i of the forward's input x and of dy, for
// NormWeightGrad; buf holds 2·(hi−lo) values the function may convert them into.
type NormRows[F Float] func(i, lo, hi int, buf []F) (x, dy []F)

// SliceRows is the NormRows of x and dy held as F [rows, d].
func SliceRows[F Float](d int, x, dy []F) NormRows[F] {
	return func(i, lo, hi int, _ []F) ([]F, []F) { return x[i*d+lo : i*d+hi], dy[i*d+lo : i*d+hi] }
}

// NormWeightGrad writes dw = Σ dy ⊙ x̂ and db = Σ dy (db may be nil; overwritten, or added to
// when acc) from the rows' statistics the dx pass computed: x̂ = (x − mean)·rstd (mean nil for
// RMSNorm, which does not centre). Each column sums its rows in ascending order, in parallel
// over blocks of columns.
func NormWeightGrad[F Float](rows, d int, at NormRows[F], dw, db []F, acc bool, mean, rstd []F) {
	parallel.For(d, 256, func(lo, hi int) {
		n := hi - lo
		sw, sb, buf := make([]F, n), make([]F, n), make([]F, 2*n)
		for i := range rows {
			x, dy := at(i, lo, hi, buf)
			var mu F
			if mean != nil {
				mu = mean[i]
			}
			r := rstd[i]
			for j, g := range dy[:n] {
				sw[j] += F(g * F((x[j]-mu)*r))
				sb[j] += g
			}
		}
		for j := range n {
			if acc {
				sw[j] += dw[lo+j]
				if db != nil {
					sb[j] += db[lo+j]
				}
			}
			dw[lo+j] = sw[j]
			if db != nil {
				db[lo+j] = sb[j]
			}
		}
	})
}

// layerStats returns the mean of x and 1/sqrt(var + eps) (biased variance), summed in float64.
func layerStats[F Float](x []F, eps float64) (F, F) {
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	mu := s / float64(len(x))
	var ss float64
	for _, v := range x {
		ss += (float64(v) - mu) * (float64(v) - mu)
	}
	return F(mu), F(1 / math.Sqrt(ss/float64(len(x))+eps))
}

// LayerNorm writes y = w ⊙ (x − mean)·r + b with r = 1/sqrt(var + eps) (biased variance), as
// torch.nn.LayerNorm, for each row of x [rows, d].
func LayerNorm[F Float](rows, d int, x, w, b []F, eps float64, y []F) {
	parallel.For(rows, parallel.Grain(d, 1<<14), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xi, yi := x[i*d:i*d+d], y[i*d:i*d+d]
			mu, r := layerStats(xi, eps)
			for j, v := range xi {
				yi[j] = F(w[j]*F((v-mu)*r)) + b[j]
			}
		}
	})
}

// LayerNormBackward writes dx, dw and db (the last two overwritten, or added to when acc):
// with g = dy ⊙ w, dx = r·(g − mean(g) − x̂·mean(g ⊙ x̂)), dw = Σ dy ⊙ x̂, db = Σ dy.
func LayerNormBackward[F Float](rows, d int, x, w, dy []F, eps float64, dx, dw, db []F, acc bool) {
	mean, rstd := make([]F, rows), make([]F, rows)
	LayerNormDX(rows, d, x, w, dy, eps, dx, mean, rstd)
	NormWeightGrad(rows, d, SliceRows(d, x, dy), dw, db, acc, mean, rstd)
}

// LayerNormDX is LayerNormBackward's dx pass: it writes dx and each row's mean and r into mean
// and rstd [rows]. Rows are independent, so a caller may run it on any block of rows.
func LayerNormDX[F Float](rows, d int, x, w, dy []F, eps float64, dx, mean, rstd []F) {
	parallel.For(rows, parallel.Grain(d, 1<<14), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xi, dyi, dxi := x[i*d:i*d+d], dy[i*d:i*d+d], dx[i*d:i*d+d]
			mu, r := layerStats(xi, eps)
			mean[i], rstd[i] = mu, r
			var sg, sgx float64
			for j, v := range xi {
				g := F(dyi[j] * w[j])
				sg += float64(g)
				sgx += float64(g) * float64(F((v-mu)*r))
			}
			mg, mgx := F(sg/float64(d)), F(sgx/float64(d))
			for j, v := range xi {
				xh := F((v - mu) * r)
				dxi[j] = r * (F(dyi[j]*w[j]) - mg - F(xh*mgx))
			}
		}
	})
}
