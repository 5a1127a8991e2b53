package nntest

import (
	"fmt"
	"testing"

	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/tensor"
)

// RoPE checks RoPE and RoPEBackward, plain, with given frequencies (rope_scaling) and with
// Qwen2-VL's multimodal sections, at positions up to 4096 (where a float32 angle has lost most of its fraction: the backend must
// round the angle to float32 as the reference does); then with bfloat16 activations
// (checkBF16).
func RoPE(t *testing.T, b tensor.Backend) {
	for _, c := range []struct {
		sections []int
		theta    float64
		scaled   bool // frequencies given: the default ones divided by 1 + i/8
	}{{nil, 1e6, false}, {nil, 1e6, true}, {[]int{16, 24, 24}, 1e6, false}} {
		t.Run(fmt.Sprint("sections=", c.sections, "/scaled=", c.scaled), func(t *testing.T) {
			e := newEnv(t, b, 23)
			const tn, h, d = 9, 3, 128
			ns := max(1, len(c.sections))
			pos := make([]int32, ns*tn)
			for i := range pos {
				pos[i] = int32(e.r.IntN(4096))
			}
			xv, dyv := e.randn(tn*h*d, 1, false), e.randn(tn*h*d, 1, false)
			cfg := tensor.RoPEConfig{Theta: c.theta, Sections: c.sections}
			freq := nnref.DefaultRoPEFrequencies[float32](d, c.theta)
			if c.scaled {
				cfg.Theta = 0 // not read
				for i := range freq {
					freq[i] /= 1 + float32(i)/8
					cfg.Frequencies = append(cfg.Frequencies, float64(freq[i]))
				}
			}
			got := twice(t, func() [][]float32 {
				posShape := []int{tn}
				if c.sections != nil {
					posShape = []int{ns, tn}
				}
				p := e.i32(pos, posShape...)
				y, dx := e.zeros(tn, h, d), e.zeros(tn, h, d)
				e.ok(tensor.RoPE(y, e.f32(xv, tn, h, d), p, cfg))
				e.ok(tensor.RoPEBackward(dx, tensor.RoPEGrad{DY: e.f32(dyv, tn, h, d), Positions: p, Config: cfg}))
				return [][]float32{e.host(y), e.host(dx)}
			})
			rows := make([][]int32, ns)
			for s := range rows {
				rows[s] = pos[s*tn : (s+1)*tn]
			}
			// The float32 reference: the angle is rounded to float32, so float64 angles would differ
			// by up to position·2⁻²⁴ radians.
			y, dx := make([]float32, len(xv)), make([]float32, len(xv))
			nnref.RoPEFrequencies(tn, h, d, xv, rows, c.sections, freq, false, y)
			nnref.RoPEFrequencies(tn, h, d, dyv, rows, c.sections, freq, true, dx)
			near(t, "y", got[0], f64(y), rtol, atol)
			near(t, "dx", got[1], f64(dx), rtol, atol)

			// bfloat16: the forward in place (y = x), the backward into a separate dx.
			bf16s(xv)
			bf16s(dyv)
			run := func(bf16 bool) [][]float32 {
				posShape := []int{tn}
				if c.sections != nil {
					posShape = []int{ns, tn}
				}
				p := e.i32(pos, posShape...)
				x, dx := e.put(xv, bf16, tn, h, d), e.zerosOf(dtype(bf16), tn, h, d)
				e.ok(tensor.RoPE(x, x, p, cfg))
				e.ok(tensor.RoPEBackward(dx, tensor.RoPEGrad{DY: e.put(dyv, bf16, tn, h, d), Positions: p, Config: cfg}))
				return [][]float32{e.values(x), e.values(dx)}
			}
			got16 := twice(t, func() [][]float32 { return run(true) })
			nnref.RoPEFrequencies(tn, h, d, xv, rows, c.sections, freq, false, y)
			nnref.RoPEFrequencies(tn, h, d, dyv, rows, c.sections, freq, true, dx)
			checkBF16(t, []string{"bf16 y", "bf16 dx"}, []bool{true, true}, got16, run(false), [][]float32{y, dx},
				[]tol{{rtol, atol}, {rtol, atol}})
		})
	}
}
