package tensor

import (
	"strconv"
	"strings"

	"github.com/mtrl-go/mtrl/internal/nnref"
)

// Activation is an elementwise activation function, named as Hugging Face's configs name it
// (hidden_act).
type Activation int

// The activations.
const (
	SiLU      Activation = iota + 1 // "silu": x·σ(x)
	GELU                            // "gelu": x·Φ(x), the exact erf form of torch.nn.GELU()
	GELUTanh                        // "gelu_pytorch_tanh": GELU(approximate="tanh")
	QuickGELU                       // "quick_gelu": x·σ(1.702·x) (CLIP, Qwen2-VL's vision tower)
)

var activationNames = map[Activation]string{SiLU: "silu", GELU: "gelu", GELUTanh: "gelu_pytorch_tanh", QuickGELU: "quick_gelu"}

// String returns the Hugging Face name ("silu", "gelu", "gelu_pytorch_tanh", "quick_gelu").
func (a Activation) String() string {
	if s, ok := activationNames[a]; ok {
		return s
	}
	return "Activation(" + strconv.Itoa(int(a)) + ")"
}

// ParseActivation is the inverse of Activation.String.
func ParseActivation(s string) (Activation, error) {
	for a, n := range activationNames {
		if strings.EqualFold(strings.TrimSpace(s), n) {
			return a, nil
		}
	}
	return 0, Errorf(ErrParam, "tensor.ParseActivation", "s", "unknown activation %q (want silu, gelu, gelu_pytorch_tanh or quick_gelu)", s)
}

// MarshalText implements encoding.TextMarshaler with String; an undefined value is an error.
func (a Activation) MarshalText() ([]byte, error) {
	if _, ok := activationNames[a]; !ok {
		return nil, Errorf(ErrParam, "tensor.Activation.MarshalText", "a", "unknown activation %d", int(a))
	}
	return []byte(a.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseActivation.
func (a *Activation) UnmarshalText(b []byte) error {
	v, err := ParseActivation(string(b))
	if err == nil {
		*a = v
	}
	return err
}

func (a Activation) ref() nnref.Act {
	return map[Activation]nnref.Act{SiLU: nnref.SiLU, GELU: nnref.GELU, GELUTanh: nnref.GELUTanh, QuickGELU: nnref.QuickGELU}[a]
}

// ActivationKernel is implemented by backends with their own activations and gated MLP.
type ActivationKernel interface {
	Activate(y, x *Tensor, a Activation) error
	ActivateBackward(dx *Tensor, in ActivationGrad) error
	SwiGLU(y, gate, up *Tensor) error
	SwiGLUBackward(dgate, dup *Tensor, in SwiGLUGrad) error
}

// checkElementwise checks that ts (names) are non-nil float32 tensors of one shape on one
// backend.
func checkElementwise(op string, names []string, ts ...*Tensor) error {
	if err := checkAll(op, names, len(ts), ts...); err != nil {
		return err
	}
	return checkSameShapes(op, names, ts...)
}

func checkSameShapes(op string, names []string, ts ...*Tensor) error {
	for i := 1; i < len(ts); i++ {
		if err := CheckSameShape(op, names[0], ts[0], names[i], ts[i]); err != nil {
			return err
		}
	}
	return nil
}

// checkActElementwise checks that ts (names) are non-nil tensors of one shape and one dtype,
// float32 or bfloat16, on one backend.
func checkActElementwise(op string, names []string, ts ...*Tensor) error {
	if err := checkNonNil(op, names, ts...); err != nil {
		return err
	}
	if _, err := checkActs(op, names, ts...); err != nil {
		return err
	}
	if err := CheckSameBackend(op, names, ts...); err != nil {
		return err
	}
	return checkSameShapes(op, names, ts...)
}

// elementwiseHost runs kernel on float32 views of host tensors of one length, outs first, in
// blocks of blockElems elements (bfloat16 ones widened into scratch and the outputs rounded once).
// kernel's own parallel loops take blocks of that size, so each block runs inline.
func elementwiseHost(nOut int, ts []*Tensor, kernel func(v [][]float32)) {
	views := make([]actView, len(ts))
	for i, t := range ts {
		views[i] = viewOf(t)
	}
	blocks(ts[0].Len(), blockElems, func(lo, hi int, s *arena) {
		v := make([][]float32, len(ts))
		for i, tv := range views {
			if i < nOut {
				v[i] = tv.out(lo, hi, s.take(hi-lo))
			} else {
				v[i] = tv.load(lo, hi, s.take(hi-lo))
			}
		}
		kernel(v)
		for i := range nOut {
			views[i].store(lo, v[i])
		}
	})
}

// bf16Of returns a host bfloat16 tensor's elements.
func bf16Of(t *Tensor) []BF16 {
	b, _ := t.BF16s()
	return b
}

func checkActivation(op string, a Activation) error {
	if _, ok := activationNames[a]; !ok {
		return Errorf(ErrParam, op, "a", "unknown activation %d", int(a))
	}
	return nil
}

// Activate writes y = a(x) elementwise in float32 (on the CPU with a float32 exp, and GELU's
// erf in float32 arithmetic, as AVX-512/AVX2 kernels equal to the Go loops bit for bit). y and
// x are float32 or both bfloat16 (y rounded once from the float32 result on the widened x).
// y may be x.
func Activate(y, x *Tensor, a Activation) error {
	const op = "tensor.Activate"
	if err := checkActivation(op, a); err != nil {
		return err
	}
	if err := checkActElementwise(op, []string{"y", "x"}, y, x); err != nil {
		return err
	}
	if k, ok := KernelOf[ActivationKernel](x.Backend()); ok {
		return k.Activate(y, x, a)
	}
	return OnHost(1, []*Tensor{y, x}, func(h []*Tensor) error {
		if h[0].dtype == BFloat16 && activateBF16(a, bf16Of(h[1]), bf16Of(h[0])) {
			return nil
		}
		elementwiseHost(1, h, func(v [][]float32) { activateCPU(a, v[1], v[0]) })
		return nil
	})
}

// ActivationGrad is what ActivateBackward reads: the forward's input and activation and the
// gradient flowing into its output.
type ActivationGrad struct {
	X, DY      *Tensor
	Activation Activation
}

// ActivateBackward writes dx = dy·a'(x); dx, X and DY share one dtype, float32 or bfloat16.
// dx may be DY.
func ActivateBackward(dx *Tensor, in ActivationGrad) error {
	const op = "tensor.ActivateBackward"
	if err := checkActivation(op, in.Activation); err != nil {
		return err
	}
	if err := checkActElementwise(op, []string{"dx", "X", "DY"}, dx, in.X, in.DY); err != nil {
		return err
	}
	if k, ok := KernelOf[ActivationKernel](dx.Backend()); ok {
		return k.ActivateBackward(dx, in)
	}
	return OnHost(1, []*Tensor{dx, in.X, in.DY}, func(h []*Tensor) error {
		if h[0].dtype == BFloat16 && activateBackwardBF16(in.Activation, bf16Of(h[1]), bf16Of(h[2]), bf16Of(h[0])) {
			return nil
		}
		elementwiseHost(1, h, func(v [][]float32) { activateBackwardCPU(in.Activation, v[1], v[2], v[0]) })
		return nil
	})
}

// SwiGLU writes y = silu(gate) ⊙ up, the gated MLP of Llama and Qwen2 (between the gate/up
// projections and the down projection). y, gate and up share one dtype, float32 or bfloat16.
func SwiGLU(y, gate, up *Tensor) error {
	const op = "tensor.SwiGLU"
	if err := checkActElementwise(op, []string{"y", "gate", "up"}, y, gate, up); err != nil {
		return err
	}
	if k, ok := KernelOf[ActivationKernel](y.Backend()); ok {
		return k.SwiGLU(y, gate, up)
	}
	return OnHost(1, []*Tensor{y, gate, up}, func(h []*Tensor) error {
		if h[0].dtype == BFloat16 && swiGLUBF16(bf16Of(h[1]), bf16Of(h[2]), bf16Of(h[0])) {
			return nil
		}
		elementwiseHost(1, h, func(v [][]float32) { swiGLUCPU(v[1], v[2], v[0]) })
		return nil
	})
}

// SwiGLUGrad is what SwiGLUBackward reads.
type SwiGLUGrad struct {
	Gate, Up, DY *Tensor
}

// SwiGLUBackward writes dgate = dy ⊙ up ⊙ silu'(gate) and dup = dy ⊙ silu(gate); all five
// tensors share one dtype, float32 or bfloat16.
func SwiGLUBackward(dgate, dup *Tensor, in SwiGLUGrad) error {
	const op = "tensor.SwiGLUBackward"
	if err := checkActElementwise(op, []string{"dgate", "dup", "Gate", "Up", "DY"}, dgate, dup, in.Gate, in.Up, in.DY); err != nil {
		return err
	}
	if k, ok := KernelOf[ActivationKernel](dgate.Backend()); ok {
		return k.SwiGLUBackward(dgate, dup, in)
	}
	return OnHost(2, []*Tensor{dgate, dup, in.Gate, in.Up, in.DY}, func(h []*Tensor) error {
		if h[0].dtype == BFloat16 && swiGLUBackwardBF16(bf16Of(h[2]), bf16Of(h[3]), bf16Of(h[4]), bf16Of(h[0]), bf16Of(h[1])) {
			return nil
		}
		elementwiseHost(2, h, func(v [][]float32) { swiGLUBackwardCPU(v[2], v[3], v[4], v[0], v[1]) })
		return nil
	})
}

// ArithKernel is implemented by backends with their own elementwise arithmetic (Axpby, Mul):
// the residual connections, scaled sums and masks of a model's forward and backward.
type ArithKernel interface {
	Axpby(y, x *Tensor, alpha, beta float32) error
	Mul(y, a, b *Tensor) error
}

// Axpby writes y = alpha·x + beta·y elementwise in float32 (BLAS's axpby): beta 1 is an
// accumulation (a residual connection, y += alpha·x, one rounding of alpha·x and one of the
// sum), beta 0 an overwrite. As in BLAS, beta 0 does not read y and alpha 0 does not read x, so
// Axpby(y, y, 0, 0) zeroes y whatever it held (NaN included). y may be x.
func Axpby(y, x *Tensor, alpha, beta float32) error {
	const op = "tensor.Axpby"
	if err := checkElementwise(op, []string{"y", "x"}, y, x); err != nil {
		return err
	}
	if k, ok := KernelOf[ArithKernel](y.Backend()); ok {
		return k.Axpby(y, x, alpha, beta)
	}
	return OnHost(1, []*Tensor{y, x}, func(h []*Tensor) error {
		axpbyCPU(hostF32(h[0]), hostF32(h[1]), alpha, beta)
		return nil
	})
}

// Mul writes y = a ⊙ b elementwise in float32 (a dropout mask's multiply). y may be a or b.
func Mul(y, a, b *Tensor) error {
	const op = "tensor.Mul"
	if err := checkElementwise(op, []string{"y", "a", "b"}, y, a, b); err != nil {
		return err
	}
	if k, ok := KernelOf[ArithKernel](y.Backend()); ok {
		return k.Mul(y, a, b)
	}
	return OnHost(1, []*Tensor{y, a, b}, func(h []*Tensor) error {
		mulCPU(hostF32(h[0]), hostF32(h[1]), hostF32(h[2]))
		return nil
	})
}
