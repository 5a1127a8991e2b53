package nnref

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/parallel"
)

// Act names an elementwise activation.
type Act int

// The activations, as torch defines them.
const (
	SiLU      Act = iota // x·σ(x)
	GELU                 // x·Φ(x) with the exact erf (torch.nn.GELU())
	GELUTanh             // the tanh approximation (GELU(approximate="tanh"))
	QuickGELU            // x·σ(1.702x) (CLIP, Qwen2-VL's vision tower)
)

// actFn returns f(x) and f'(x) in float64.
func actFn(a Act, x float64) (f, df float64) {
	switch a {
	case SiLU:
		s := 1 / (1 + math.Exp(-x))
		return x * s, s * (1 + x*(1-s))
	case GELU:
		c := 0.5 * (1 + math.Erf(x/math.Sqrt2))
		return x * c, c + x*math.Exp(-x*x/2)/math.Sqrt(2*math.Pi)
	case GELUTanh:
		const k = 0.7978845608028654 // sqrt(2/pi)
		u := k * (x + 0.044715*x*x*x)
		th := math.Tanh(u)
		return 0.5 * x * (1 + th), 0.5*(1+th) + 0.5*x*(1-th*th)*k*(1+3*0.044715*x*x)
	case QuickGELU:
		s := 1 / (1 + math.Exp(-1.702*x))
		return x * s, s + 1.702*x*s*(1-s)
	}
	return math.NaN(), math.NaN()
}

// Activate writes y = f(x) elementwise, evaluated in float64 and rounded to F.
func Activate[F Float](a Act, x, y []F) {
	parallel.For(len(x), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			f, _ := actFn(a, float64(x[i]))
			y[i] = F(f)
		}
	})
}

// ActivateBackward writes dx = dy·f'(x).
func ActivateBackward[F Float](a Act, x, dy, dx []F) {
	parallel.For(len(x), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			_, df := actFn(a, float64(x[i]))
			dx[i] = dy[i] * F(df)
		}
	})
}

// SwiGLU writes y = silu(gate) ⊙ up, the gated MLP of Llama and Qwen2.
func SwiGLU[F Float](gate, up, y []F) {
	parallel.For(len(gate), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			f, _ := actFn(SiLU, float64(gate[i]))
			y[i] = F(f) * up[i]
		}
	})
}

// SwiGLUBackward writes dgate = dy ⊙ up ⊙ silu'(gate) and dup = dy ⊙ silu(gate).
func SwiGLUBackward[F Float](gate, up, dy, dgate, dup []F) {
	parallel.For(len(gate), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			f, df := actFn(SiLU, float64(gate[i]))
			dgate[i] = F(dy[i]*up[i]) * F(df)
			dup[i] = dy[i] * F(f)
		}
	})
}
