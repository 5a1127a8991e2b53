package tensor

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/nnref"
)

// RoPEConfig is the rotary position embedding of a model.
type RoPEConfig struct {
	// Theta is the frequency base (rope_theta: 10000 for Llama 2, 1e6 for Qwen2); > 0.
	Theta float64
	// Sections, when set, make it Qwen2-VL's multimodal RoPE: the D/2 frequencies are split into
	// consecutive groups of these sizes (mrope_section, e.g. [16, 24, 24] for D = 128), group s
	// taking its positions from row s of the positions (temporal, height, width). They must sum
	// to D/2. Nil means one group: positions is [T].
	Sections []int
	// Frequencies, when set, are the D/2 frequencies f_i (each finite and > 0) used instead of
	// 1/Theta^(2i/D): those a rope_scaling computes (linear interpolation, Llama 3). Theta is
	// then not read. They are rounded to float32 as the reference computes in float32.
	Frequencies []float64
}

// RoPEKernel is implemented by backends with their own rotary embedding; inverse applies the
// transposed rotation (the backward).
type RoPEKernel interface {
	RoPE(y, x, positions *Tensor, cfg RoPEConfig, inverse bool) error
}

// RoPE rotates x [T, H, D] (D even) by the rotary embedding at int32 positions [T], or
// [len(cfg.Sections), T] for the multimodal form, in Hugging Face's rotate_half convention: with
// half = D/2, f_i = 1/Theta^(2i/D) and a = position·f_i,
//
//	y[i] = x[i]·cos a − x[i+half]·sin a,  y[i+half] = x[i+half]·cos a + x[i]·sin a.
//
// The frequency, angle, cosine and sine are rounded to float32 as the reference computes them.
// x and y are float32 or both bfloat16 (y rounded once from the float32 rotation of the widened
// x). y may be x.
func RoPE(y, x, positions *Tensor, cfg RoPEConfig) error {
	return rope("tensor.RoPE", y, x, positions, cfg, false)
}

// RoPEGrad is what RoPEBackward reads: the gradient flowing into RoPE's output and the
// forward's positions and configuration.
type RoPEGrad struct {
	DY, Positions *Tensor
	Config        RoPEConfig
}

// RoPEBackward writes dx, the rotation of DY by the opposite angles (the transpose of RoPE);
// dx and DY share one dtype, float32 or bfloat16. dx may be DY.
func RoPEBackward(dx *Tensor, in RoPEGrad) error {
	return rope("tensor.RoPEBackward", dx, in.DY, in.Positions, in.Config, true)
}

func rope(op string, y, x, positions *Tensor, cfg RoPEConfig, inverse bool) error {
	names := []string{"y", "x", "positions"}
	if err := checkNonNil(op, names, y, x, positions); err != nil {
		return err
	}
	if _, err := checkActs(op, names[:2], y, x); err != nil {
		return err
	}
	if err := CheckDType(op, "positions", positions, Int32); err != nil {
		return err
	}
	if err := CheckShape(op, "x", x, -1, -1, -1); err != nil {
		return err
	}
	if err := CheckSameShape(op, "x", x, "y", y); err != nil {
		return err
	}
	t, d := x.Dim(0), x.Dim(2)
	if d%2 != 0 {
		return Errorf(ErrShape, op, "x", "has head dimension %d, want an even one", d)
	}
	if cfg.Frequencies != nil {
		if len(cfg.Frequencies) != d/2 {
			return Errorf(ErrParam, op, "cfg.Frequencies", "has %d values, want D/2 = %d", len(cfg.Frequencies), d/2)
		}
		for i, f := range cfg.Frequencies {
			if !(f > 0) || math.IsInf(f, 1) {
				return Errorf(ErrParam, op, "cfg.Frequencies", "[%d] is %v, want a finite value > 0", i, f)
			}
		}
	} else if !(cfg.Theta > 0) || math.IsInf(cfg.Theta, 1) {
		return Errorf(ErrParam, op, "cfg.Theta", "is %v, want a finite value > 0", cfg.Theta)
	}
	if cfg.Sections == nil {
		if err := CheckShape(op, "positions", positions, t); err != nil {
			return err
		}
	} else {
		sum := 0
		for _, s := range cfg.Sections {
			if s < 0 {
				return Errorf(ErrParam, op, "cfg.Sections", "%v has a negative size", cfg.Sections)
			}
			sum += s
		}
		if sum != d/2 {
			return Errorf(ErrParam, op, "cfg.Sections", "%v sums to %d, want D/2 = %d", cfg.Sections, sum, d/2)
		}
		if err := CheckShape(op, "positions", positions, len(cfg.Sections), t); err != nil {
			return err
		}
	}
	if err := CheckSameBackend(op, names, y, x, positions); err != nil {
		return err
	}
	if k, ok := KernelOf[RoPEKernel](x.Backend()); ok {
		return k.RoPE(y, x, positions, cfg, inverse)
	}
	return OnHost(1, []*Tensor{y, x, positions}, func(h []*Tensor) error {
		p := hostI32(h[2])
		freq := nnref.RoPEGivenFrequencies[float32](d, cfg.Theta, cfg.Frequencies)
		ropeHost(h[0], h[1], p, cfg.Sections, freq, inverse)
		return nil
	})
}
