package tensor

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/nnref"
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

func checkNorm(op string, x, w, b *Tensor, eps float64, outs []*Tensor, outNames []string) error {
	names := append(outNames, "x", "w", "b")
	if err := checkAll(op, names, len(outs)+2, append(outs, x, w, b)...); err != nil {
		return err
	}
	if x.Rank() < 1 {
		return Errorf(ErrShape, op, "x", "is a scalar, want [..., D]")
	}
	d := x.Dim(-1)
	for _, p := range []struct {
		name string
		t    *Tensor
	}{{"w", w}, {"b", b}} {
		if p.t != nil {
			if err := CheckShape(op, p.name, p.t, d); err != nil {
				return err
			}
		}
	}
	if !(eps >= 0) || math.IsInf(eps, 1) {
		return Errorf(ErrParam, op, "eps", "is %v, want a finite value >= 0", eps)
	}
	return nil
}

// RMSNorm writes y = w ⊙ x / sqrt(mean(x²) + eps) over the last dimension of x [..., D], as
// Qwen2's and Llama's RMSNorm in float32 (the mean is summed in float64). w is [D].
func RMSNorm(y, x, w *Tensor, eps float64) error {
	const op = "tensor.RMSNorm"
	if err := checkNorm(op, x, w, nil, eps, []*Tensor{y}, []string{"y"}); err != nil {
		return err
	}
	if err := CheckSameShape(op, "x", x, "y", y); err != nil {
		return err
	}
	if k, ok := KernelOf[NormKernel](x.Backend()); ok {
		return k.RMSNorm(y, x, w, eps)
	}
	return OnHost(1, []*Tensor{y, x, w}, func(h []*Tensor) error {
		nnref.RMSNorm(rowsOf(h[1]), x.Dim(-1), hostF32(h[1]), hostF32(h[2]), eps, hostF32(h[0]))
		return nil
	})
}

// RMSNormBackward writes dx = r·(g − x̂·mean(g ⊙ x̂)) with g = dy ⊙ w, x̂ = x·r, and dw = Σ dy ⊙ x̂
// over every row.
func RMSNormBackward(dx, dw *Tensor, in NormGrad) error {
	const op = "tensor.RMSNormBackward"
	if err := checkNormGrad(op, in, []*Tensor{dx, dw}, []string{"dx", "dw"}); err != nil {
		return err
	}
	if k, ok := KernelOf[NormKernel](in.X.Backend()); ok {
		return k.RMSNormBackward(dx, dw, in)
	}
	return OnHost(2, []*Tensor{dx, dw, in.X, in.Weight, in.DY}, func(h []*Tensor) error {
		nnref.RMSNormBackward(rowsOf(h[2]), in.X.Dim(-1), hostF32(h[2]), hostF32(h[3]), hostF32(h[4]), in.Eps,
			hostF32(h[0]), hostF32(h[1]), in.Accumulate)
		return nil
	})
}

func checkNormGrad(op string, in NormGrad, outs []*Tensor, names []string) error {
	if err := checkNorm(op, in.X, in.Weight, nil, in.Eps, append(outs, in.DY), append(names, "DY")); err != nil {
		return err
	}
	if err := CheckSameShape(op, "X", in.X, "DY", in.DY); err != nil {
		return err
	}
	if err := CheckSameShape(op, "X", in.X, "dx", outs[0]); err != nil {
		return err
	}
	for i, t := range outs[1:] {
		if err := CheckShape(op, names[i+1], t, in.X.Dim(-1)); err != nil {
			return err
		}
	}
	return nil
}

// LayerNorm writes y = w ⊙ (x − mean)/sqrt(var + eps) + b over the last dimension of x [..., D]
// (biased variance, as torch.nn.LayerNorm; mean and variance summed in float64). w and b are [D].
func LayerNorm(y, x, w, b *Tensor, eps float64) error {
	const op = "tensor.LayerNorm"
	if b == nil {
		return Errorf(ErrShape, op, "b", "is nil")
	}
	if err := checkNorm(op, x, w, b, eps, []*Tensor{y}, []string{"y"}); err != nil {
		return err
	}
	if err := CheckSameShape(op, "x", x, "y", y); err != nil {
		return err
	}
	if k, ok := KernelOf[NormKernel](x.Backend()); ok {
		return k.LayerNorm(y, x, w, b, eps)
	}
	return OnHost(1, []*Tensor{y, x, w, b}, func(h []*Tensor) error {
		nnref.LayerNorm(rowsOf(h[1]), x.Dim(-1), hostF32(h[1]), hostF32(h[2]), hostF32(h[3]), eps, hostF32(h[0]))
		return nil
	})
}

// LayerNormBackward writes dx = r·(g − mean(g) − x̂·mean(g ⊙ x̂)) with g = dy ⊙ w, dw = Σ dy ⊙ x̂
// and db = Σ dy over every row.
func LayerNormBackward(dx, dw, db *Tensor, in NormGrad) error {
	const op = "tensor.LayerNormBackward"
	if err := checkNormGrad(op, in, []*Tensor{dx, dw, db}, []string{"dx", "dw", "db"}); err != nil {
		return err
	}
	if k, ok := KernelOf[NormKernel](in.X.Backend()); ok {
		return k.LayerNormBackward(dx, dw, db, in)
	}
	return OnHost(3, []*Tensor{dx, dw, db, in.X, in.Weight, in.DY}, func(h []*Tensor) error {
		nnref.LayerNormBackward(rowsOf(h[3]), in.X.Dim(-1), hostF32(h[3]), hostF32(h[4]), hostF32(h[5]), in.Eps,
			hostF32(h[0]), hostF32(h[1]), hostF32(h[2]), in.Accumulate)
		return nil
	})
}
