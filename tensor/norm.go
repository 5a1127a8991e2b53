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

// NormGrad is what RMSNormBackward and LayerNormBackward read: the forward's input, weight and
// eps and the gradient flowing into its output. The backward recomputes each row's statistics
// from X (one pass over the row) rather than keeping them from the forward.
type NormGrad struct {
	X, Weight, DY *Tensor
	Eps           float64
	// Accumulate adds into the weight (and bias) gradients instead of overwriting them; dx is
	// always overwritten.
	Accumulate bool
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
		rmsNormHost(h[0], h[1], hostF32(h[2]), eps)
		return nil
	})
}

// RMSNormBackward writes dx = r·(g − x̂·mean(g ⊙ x̂)) with g = dy ⊙ w, x̂ = x·r, and dw = Σ dy ⊙ x̂
// over every row. dx, X and DY share one dtype, float32 or bfloat16 (dx rounded once); Weight
// is float32 or that dtype; dw is float32.
func RMSNormBackward(dx, dw *Tensor, in NormGrad) error {
	const op = "tensor.RMSNormBackward"
	if err := checkNormGrad(op, dx, in, []*Tensor{dw}, []string{"dw"}); err != nil {
		return err
	}
	if k, ok := KernelOf[NormKernel](in.X.Backend()); ok {
		return k.RMSNormBackward(dx, dw, in)
	}
	return OnHost(2, []*Tensor{dx, dw, in.X, in.Weight, in.DY}, func(h []*Tensor) error {
		normBackwardHost(h[0], h[1], nil, h[2], h[3], h[4], in.Eps, in.Accumulate)
		return nil
	})
}

func checkNormGrad(op string, dx *Tensor, in NormGrad, grads []*Tensor, gnames []string) error {
	return checkNorm(op, []*Tensor{dx, in.DY, in.X}, []string{"dx", "DY", "X"}, []*Tensor{in.Weight}, []string{"Weight"}, grads, gnames, in.Eps)
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
		normForwardHost(h[0], h[1], h[2], h[3], eps)
		return nil
	})
}

// LayerNormBackward writes dx = r·(g − mean(g) − x̂·mean(g ⊙ x̂)) with g = dy ⊙ w, dw = Σ dy ⊙ x̂
// and db = Σ dy over every row, with RMSNormBackward's dtypes (db float32).
func LayerNormBackward(dx, dw, db *Tensor, in NormGrad) error {
	const op = "tensor.LayerNormBackward"
	if err := checkNormGrad(op, dx, in, []*Tensor{dw, db}, []string{"dw", "db"}); err != nil {
		return err
	}
	if k, ok := KernelOf[NormKernel](in.X.Backend()); ok {
		return k.LayerNormBackward(dx, dw, db, in)
	}
	return OnHost(3, []*Tensor{dx, dw, db, in.X, in.Weight, in.DY}, func(h []*Tensor) error {
		normBackwardHost(h[0], h[1], h[2], h[3], h[4], h[5], in.Eps, in.Accumulate)
		return nil
	})
}

// normForwardHost is RMSNorm (b nil) or LayerNorm on host tensors: LayerNorm with the vector
// kernels (layernorm_cpu.go) where they run, reading and writing bfloat16 in place; otherwise
// in blocks of rows whose bfloat16 values are widened into scratch (nnref's kernels run each
// block in place: a block is at most one of their parallel chunks).
func normForwardHost(y, x, w, b *Tensor, eps float64) {
	rows, d := rowsOf(x), x.Dim(-1)
	yv, xv, wv, bv := viewOf(y), viewOf(x), hostF32(w), hostF32(b)
	if lk := lnImpls.Active(); b != nil && lk != nil {
		layerNormHost(lk, yv, xv, wv, bv, rows, d, eps)
		return
	}
	blocks(rows, parallel.Grain(d, blockElems), func(lo, hi int, s *arena) {
		n := (hi - lo) * d
		xs := xv.load(lo*d, hi*d, s.take(n))
		ys := yv.out(lo*d, hi*d, s.take(n))
		if b == nil {
			nnref.RMSNorm(hi-lo, d, xs, wv, eps, ys)
		} else {
			nnref.LayerNorm(hi-lo, d, xs, wv, bv, eps, ys)
		}
		yv.store(lo*d, ys)
	})
}

// normBackwardHost is RMSNormBackward (db nil) or LayerNormBackward on host tensors: the dx
// pass, then the weight gradients. With the vector row kernels (norm_cpu.go, layernorm_cpu.go)
// the dx passes and both weight gradients read and write bfloat16 in place; otherwise the dx pass runs
// nnref's kernels in blocks of rows as normForwardHost, and the weight gradients read x and dy
// a row segment at a time.
func normBackwardHost(dx, dw, db, x, w, dy *Tensor, eps float64, acc bool) {
	rows, d := rowsOf(x), x.Dim(-1)
	dxv, xv, dyv, wv := viewOf(dx), viewOf(x), viewOf(dy), hostF32(w)
	var mean []float32
	if db != nil {
		mean = make([]float32, rows)
	}
	rstd := make([]float32, rows)
	k, lk := rowImpls.Active(), lnImpls.Active()
	if db == nil && k != nil {
		rmsNormDXHost(k, dxv, xv, dyv, wv, rows, d, eps, rstd)
	} else if db != nil && lk != nil {
		layerNormDXHost(lk, dxv, xv, dyv, wv, rows, d, eps, mean, rstd)
	} else {
		blocks(rows, parallel.Grain(d, blockElems), func(lo, hi int, s *arena) {
			n := (hi - lo) * d
			xs := xv.load(lo*d, hi*d, s.take(n))
			dys := dyv.load(lo*d, hi*d, s.take(n))
			dxs := dxv.out(lo*d, hi*d, s.take(n))
			if db == nil {
				nnref.RMSNormDX(hi-lo, d, xs, wv, dys, eps, dxs, rstd[lo:hi])
			} else {
				nnref.LayerNormDX(hi-lo, d, xs, wv, dys, eps, dxs, mean[lo:hi], rstd[lo:hi])
			}
			dxv.store(lo*d, dxs)
		})
	}
	if k != nil {
		normWeightGradHost(k, hostF32(dw), hostF32(db), xv, dyv, rows, d, mean, rstd, acc)
		return
	}
	at := func(i, lo, hi int, buf []float32) ([]float32, []float32) {
		n := hi - lo
		return xv.load(i*d+lo, i*d+hi, buf[:n]), dyv.load(i*d+lo, i*d+hi, buf[n:])
	}
	nnref.NormWeightGrad(rows, d, at, hostF32(dw), hostF32(db), acc, mean, rstd)
}
