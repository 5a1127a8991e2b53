package tensor

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// NormKernel is implemented by backends with their own normalisation layers.
type NormKernel interface {
	RMSNorm(y, x, w *Tensor, eps float64) error
	RMSNormBackward(dx, dw *Tensor, in NormGrad) error
	LayerNorm(y, x, w, b *Tensor, eps float64) error
	LayerNormBackward(dx, dw, db *Tensor, in NormGrad) error
}

// NormStatsKernel is implemented by backends whose norms can write each row's statistics for
// the backward (RMSNormStats, LayerNormStats). Without it the norm runs on its backend and the
// statistics are found on the host (x is downloaded for it).
type NormStatsKernel interface {
	RMSNormStats(y, rstd, x, w *Tensor, eps float64) error
	LayerNormStats(y, mean, rstd, x, w, b *Tensor, eps float64) error
}

// NormGrad is what RMSNormBackward and LayerNormBackward read: the forward's input, weight and
// eps and the gradient flowing into its output. The backward recomputes each row's statistics
// from X (two passes over the row for LayerNorm, one for RMSNorm) unless the forward saved them.
type NormGrad struct {
	X, Weight, DY *Tensor
	Eps           float64
	// Accumulate adds into the weight (and bias) gradients instead of overwriting them; dx is
	// always overwritten.
	Accumulate bool
	// Mean and Rstd, when not nil, are the statistics the forward wrote for these X and Eps
	// (LayerNormStats: both; RMSNormStats: Rstd, and Mean nil), float32 [rows] with rows the
	// product of X's leading dimensions: the backward reads them instead of recomputing them, with
	// the same results bit for bit. A backend may also ignore them and recompute.
	Mean, Rstd *Tensor
}

// checkNorm checks a norm's tensors: acts (names; the input last) are the activations, of one
// shape and dtype, float32 or bfloat16; params (pnames: the weight, the bias if any) float32 or
// that dtype, [D]; grads (gnames) the parameter gradients, float32 [D]. Every one is required.
func checkNorm(op string, acts []*Tensor, names []string, params []*Tensor, pnames []string, grads []*Tensor, gnames []string, eps float64) error {
	all := append(append(append([]*Tensor{}, acts...), params...), grads...)
	allNames := append(append(append([]string{}, names...), pnames...), gnames...)
	if err := checkNonNil(op, allNames, all...); err != nil {
		return err
	}
	act, err := checkActs(op, names, acts...)
	if err != nil {
		return err
	}
	if err := checkParams(op, act, pnames, params...); err != nil {
		return err
	}
	if err := checkF32(op, gnames, grads...); err != nil {
		return err
	}
	if err := CheckSameBackend(op, allNames, all...); err != nil {
		return err
	}
	x := acts[len(acts)-1]
	if x.Rank() < 1 {
		return Errorf(ErrShape, op, names[len(acts)-1], "is a scalar, want [..., D]")
	}
	d := x.Dim(-1)
	for i, t := range all[len(acts):] {
		if err := CheckShape(op, allNames[len(acts)+i], t, d); err != nil {
			return err
		}
	}
	for i, t := range acts[:len(acts)-1] {
		if err := CheckSameShape(op, names[len(acts)-1], x, names[i], t); err != nil {
			return err
		}
	}
	if !(eps >= 0) || math.IsInf(eps, 1) {
		return Errorf(ErrParam, op, "eps", "is %v, want a finite value >= 0", eps)
	}
	return nil
}

// RMSNorm writes y = w ⊙ x / sqrt(mean(x²) + eps) over the last dimension of x [..., D], as
// Qwen2's and Llama's RMSNorm in float32 (the mean is summed in float64). x and y are float32 or
// both bfloat16; w [D] is float32 or x's dtype. A bfloat16 y is the float32 result on the
// widened inputs, rounded to nearest even once.
func RMSNorm(y, x, w *Tensor, eps float64) error {
	const op = "tensor.RMSNorm"
	if err := checkNorm(op, []*Tensor{y, x}, []string{"y", "x"}, []*Tensor{w}, []string{"w"}, nil, nil, eps); err != nil {
		return err
	}
	if k, ok := KernelOf[NormKernel](x.Backend()); ok {
		return k.RMSNorm(y, x, w, eps)
	}
	return OnHost(1, []*Tensor{y, x, w}, func(h []*Tensor) error {
		rmsNormHost(h[0], h[1], hostF32(h[2]), eps, nil)
		return nil
	})
}

// RMSNormStats is RMSNorm that also writes each row's r = 1/sqrt(mean(x²) + eps), rounded to
// float32, into rstd (float32 [rows], rows the product of x's leading dimensions), for
// NormGrad.Rstd: the backward then skips its pass over x for them.
func RMSNormStats(y, rstd, x, w *Tensor, eps float64) error {
	const op = "tensor.RMSNormStats"
	if err := checkNorm(op, []*Tensor{y, x}, []string{"y", "x"}, []*Tensor{w}, []string{"w"}, nil, nil, eps); err != nil {
		return err
	}
	if err := checkStats(op, x, []*Tensor{rstd}, []string{"rstd"}); err != nil {
		return err
	}
	if k, ok := KernelOf[NormStatsKernel](x.Backend()); ok {
		return k.RMSNormStats(y, rstd, x, w, eps)
	}
	if k, ok := KernelOf[NormKernel](x.Backend()); ok {
		if err := k.RMSNorm(y, x, w, eps); err != nil {
			return err
		}
		return OnHost(1, []*Tensor{rstd, x}, func(h []*Tensor) error {
			normStatsGo(viewOf(h[1]), rowsOf(h[1]), h[1].Dim(-1), eps, nil, hostF32(h[0]))
			return nil
		})
	}
	return OnHost(2, []*Tensor{y, rstd, x, w}, func(h []*Tensor) error {
		rmsNormHost(h[0], h[2], hostF32(h[3]), eps, hostF32(h[1]))
		return nil
	})
}

// checkStats checks a norm's saved statistics: float32 [rows] on x's backend.
func checkStats(op string, x *Tensor, stats []*Tensor, names []string) error {
	if err := checkNonNil(op, names, stats...); err != nil {
		return err
	}
	if err := checkF32(op, names, stats...); err != nil {
		return err
	}
	for i, t := range stats {
		if err := CheckShape(op, names[i], t, rowsOf(x)); err != nil {
			return err
		}
	}
	return CheckSameBackend(op, append([]string{"x"}, names...), append([]*Tensor{x}, stats...)...)
}

// RMSNormBackward writes dx = r·(g − x̂·mean(g ⊙ x̂)) with g = dy ⊙ w, x̂ = x·r, and dw = Σ dy ⊙ x̂
// over every row. dx, X and DY share one dtype, float32 or bfloat16 (dx rounded once); Weight
// is float32 or that dtype; dw is float32.
func RMSNormBackward(dx, dw *Tensor, in NormGrad) error {
	const op = "tensor.RMSNormBackward"
	if err := checkNormGrad(op, dx, in, []*Tensor{dw}, []string{"dw"}, false); err != nil {
		return err
	}
	if k, ok := KernelOf[NormKernel](in.X.Backend()); ok {
		return k.RMSNormBackward(dx, dw, in)
	}
	return OnHost(2, []*Tensor{dx, dw, in.X, in.Weight, in.DY, in.Rstd}, func(h []*Tensor) error {
		normBackwardHost(h[0], h[1], nil, h[2], h[3], h[4], in.Eps, in.Accumulate, nil, h[5])
		return nil
	})
}

// checkNormGrad checks a backward's tensors, and its saved statistics when given: Rstd, and Mean
// with it for LayerNorm (layer), never for RMSNorm.
func checkNormGrad(op string, dx *Tensor, in NormGrad, grads []*Tensor, gnames []string, layer bool) error {
	if err := checkNorm(op, []*Tensor{dx, in.DY, in.X}, []string{"dx", "DY", "X"}, []*Tensor{in.Weight}, []string{"Weight"}, grads, gnames, in.Eps); err != nil {
		return err
	}
	switch {
	case !layer && in.Mean != nil:
		return Errorf(ErrParam, op, "Mean", "is set, but RMSNorm has no mean")
	case layer && (in.Mean == nil) != (in.Rstd == nil):
		return Errorf(ErrParam, op, "Mean", "and Rstd are saved together or not at all")
	case in.Rstd == nil:
		return nil
	case layer:
		return checkStats(op, in.X, []*Tensor{in.Mean, in.Rstd}, []string{"Mean", "Rstd"})
	}
	return checkStats(op, in.X, []*Tensor{in.Rstd}, []string{"Rstd"})
}

// LayerNorm writes y = w ⊙ (x − mean)/sqrt(var + eps) + b over the last dimension of x [..., D]
// (biased variance, as torch.nn.LayerNorm; mean and variance summed in float64). x and y are
// float32 or both bfloat16 (y rounded once); w and b [D] are float32 or x's dtype.
func LayerNorm(y, x, w, b *Tensor, eps float64) error {
	const op = "tensor.LayerNorm"
	if err := checkNorm(op, []*Tensor{y, x}, []string{"y", "x"}, []*Tensor{w, b}, []string{"w", "b"}, nil, nil, eps); err != nil {
		return err
	}
	if k, ok := KernelOf[NormKernel](x.Backend()); ok {
		return k.LayerNorm(y, x, w, b, eps)
	}
	return OnHost(1, []*Tensor{y, x, w, b}, func(h []*Tensor) error {
		normForwardHost(h[0], h[1], h[2], h[3], eps, nil, nil)
		return nil
	})
}

// LayerNormStats is LayerNorm that also writes each row's mean and r = 1/sqrt(var + eps),
// rounded to float32, into mean and rstd (float32 [rows], rows the product of x's leading
// dimensions), for NormGrad.Mean and Rstd: the backward then skips its two passes over x for
// them.
func LayerNormStats(y, mean, rstd, x, w, b *Tensor, eps float64) error {
	const op = "tensor.LayerNormStats"
	if err := checkNorm(op, []*Tensor{y, x}, []string{"y", "x"}, []*Tensor{w, b}, []string{"w", "b"}, nil, nil, eps); err != nil {
		return err
	}
	if err := checkStats(op, x, []*Tensor{mean, rstd}, []string{"mean", "rstd"}); err != nil {
		return err
	}
	if k, ok := KernelOf[NormStatsKernel](x.Backend()); ok {
		return k.LayerNormStats(y, mean, rstd, x, w, b, eps)
	}
	if k, ok := KernelOf[NormKernel](x.Backend()); ok {
		if err := k.LayerNorm(y, x, w, b, eps); err != nil {
			return err
		}
		return OnHost(2, []*Tensor{mean, rstd, x}, func(h []*Tensor) error {
			normStatsGo(viewOf(h[2]), rowsOf(h[2]), h[2].Dim(-1), eps, hostF32(h[0]), hostF32(h[1]))
			return nil
		})
	}
	return OnHost(3, []*Tensor{y, mean, rstd, x, w, b}, func(h []*Tensor) error {
		normForwardHost(h[0], h[3], h[4], h[5], eps, hostF32(h[1]), hostF32(h[2]))
		return nil
	})
}

// LayerNormBackward writes dx = r·(g − mean(g) − x̂·mean(g ⊙ x̂)) with g = dy ⊙ w, dw = Σ dy ⊙ x̂
// and db = Σ dy over every row, with RMSNormBackward's dtypes (db float32).
func LayerNormBackward(dx, dw, db *Tensor, in NormGrad) error {
	const op = "tensor.LayerNormBackward"
	if err := checkNormGrad(op, dx, in, []*Tensor{dw, db}, []string{"dw", "db"}, true); err != nil {
		return err
	}
	if k, ok := KernelOf[NormKernel](in.X.Backend()); ok {
		return k.LayerNormBackward(dx, dw, db, in)
	}
	return OnHost(3, []*Tensor{dx, dw, db, in.X, in.Weight, in.DY, in.Mean, in.Rstd}, func(h []*Tensor) error {
		normBackwardHost(h[0], h[1], h[2], h[3], h[4], h[5], in.Eps, in.Accumulate, h[6], h[7])
		return nil
	})
}

// normForwardHost is LayerNorm on host tensors: with the vector kernels (layernorm_cpu.go)
// where they run, reading and writing bfloat16 in place; otherwise in blocks of rows whose
// bfloat16 values are widened into scratch (nnref's kernels run each block in place: a block is
// at most one of their parallel chunks). The rows' statistics go to mean and rstd when they are
// not nil.
func normForwardHost(y, x, w, b *Tensor, eps float64, mean, rstd []float32) {
	rows, d := rowsOf(x), x.Dim(-1)
	yv, xv, wv, bv := viewOf(y), viewOf(x), hostF32(w), hostF32(b)
	if lk := lnImpls.Active(); lk != nil {
		layerNormHost(lk, yv, xv, wv, bv, rows, d, eps, mean, rstd)
		return
	}
	blocks(rows, parallel.Grain(d, blockElems), func(lo, hi int, s *arena) {
		n := (hi - lo) * d
		xs := xv.load(lo*d, hi*d, s.take(n))
		ys := yv.out(lo*d, hi*d, s.take(n))
		nnref.LayerNorm(hi-lo, d, xs, wv, bv, eps, ys)
		yv.store(lo*d, ys)
	})
	if rstd != nil {
		normStatsGo(xv, rows, d, eps, mean, rstd)
	}
}

// normStatsGo writes the rows' statistics as the backward finds them (nnref's layerStats, or
// RMSNorm's r when mean is nil), with Go loops: float64 sums in column order, rounded to float32
// at the end.
func normStatsGo(x actView, rows, d int, eps float64, mean, rstd []float32) {
	parallel.For(rows, parallel.Grain(d, 1<<14), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			var s, ss float64
			mu := 0.0
			if mean != nil {
				for j := i * d; j < (i+1)*d; j++ {
					s += float64(x.at(j))
				}
				mu = s / float64(d)
				mean[i] = float32(mu)
			}
			for j := i * d; j < (i+1)*d; j++ {
				v := float64(x.at(j)) - mu
				ss += v * v
			}
			rstd[i] = float32(1 / math.Sqrt(ss/float64(d)+eps))
		}
	})
}

// normBackwardHost is RMSNormBackward (db nil) or LayerNormBackward on host tensors, from the
// forward's statistics when mean (LayerNorm) and rstd are not nil. With the vector row kernels
// (norm_cpu.go, layernorm_cpu.go) it reads and writes bfloat16 in place in two passes (the rows'
// sums, then dx with the weight gradients); otherwise the dx pass runs nnref's kernels in blocks
// of rows as normForwardHost (recomputing the statistics: the same values), and the weight
// gradients read x and dy a row segment at a time.
func normBackwardHost(dx, dw, db, x, w, dy *Tensor, eps float64, acc bool, mean, rstd *Tensor) {
	rows, d := rowsOf(x), x.Dim(-1)
	dxv, xv, dyv, wv := viewOf(dx), viewOf(x), viewOf(dy), hostF32(w)
	if k := rowImpls.Active(); db == nil && k != nil {
		rmsNormBackwardHost(k, dxv, xv, dyv, wv, hostF32(dw), rows, d, eps, hostF32(rstd), acc)
		return
	}
	if lk := lnImpls.Active(); db != nil && lk != nil {
		layerNormBackwardHost(lk, dxv, xv, dyv, wv, hostF32(dw), hostF32(db), rows, d, eps, hostF32(mean), hostF32(rstd), acc)
		return
	}
	var mu []float32
	if db != nil {
		mu = make([]float32, rows)
	}
	r := make([]float32, rows)
	blocks(rows, parallel.Grain(d, blockElems), func(lo, hi int, s *arena) {
		n := (hi - lo) * d
		xs := xv.load(lo*d, hi*d, s.take(n))
		dys := dyv.load(lo*d, hi*d, s.take(n))
		dxs := dxv.out(lo*d, hi*d, s.take(n))
		if db == nil {
			nnref.RMSNormDX(hi-lo, d, xs, wv, dys, eps, dxs, r[lo:hi])
		} else {
			nnref.LayerNormDX(hi-lo, d, xs, wv, dys, eps, dxs, mu[lo:hi], r[lo:hi])
		}
		dxv.store(lo*d, dxs)
	})
	at := func(i, lo, hi int, buf []float32) ([]float32, []float32) {
		n := hi - lo
		return xv.load(i*d+lo, i*d+hi, buf[:n]), dyv.load(i*d+lo, i*d+hi, buf[n:])
	}
	nnref.NormWeightGrad(rows, d, at, hostF32(dw), hostF32(db), acc, mu, r)
}
