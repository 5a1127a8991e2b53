package nnref

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/parallel"
)

// RoPE rotates x [t, h, d] by the rotary position embedding of Hugging Face's rotate_half
// convention (Llama, Qwen2): with half = d/2 and, for i < half, frequency
// f_i = 1/theta^(2i/d) and angle a = pos·f_i,
//
//	y[i]      = x[i]·cos a − x[i+half]·sin a
//	y[i+half] = x[i+half]·cos a + x[i]·sin a
//
// pos holds one row of t positions per section; sections (nil: one section of half) split the
// frequencies into consecutive groups, group s taking its positions from pos[s] — Qwen2-VL's
// multimodal RoPE with mrope_section = sections and pos = [temporal, height, width]. inverse
// applies the transposed rotation (angle −a), which is the backward. The frequency, the angle
// and its cosine and sine are rounded to F as the reference computes them in float32.
func RoPE[F Float](t, h, d int, x []F, pos [][]int32, sections []int, theta float64, inverse bool, y []F) {
	RoPEFrequencies(t, h, d, x, pos, sections, DefaultRoPEFrequencies[F](d, theta), inverse, y)
}

// DefaultRoPEFrequencies returns the d/2 frequencies f_i = 1/theta^(2i/d), rounded to F as the
// reference computes them in float32.
func DefaultRoPEFrequencies[F Float](d int, theta float64) []F {
	freq := make([]F, d/2)
	for i := range freq {
		e := F(F(2*i) / F(d))
		freq[i] = F(1 / F(math.Pow(theta, float64(e))))
	}
	return freq
}

// RoPEGivenFrequencies returns given (rope_scaling's frequencies) rounded to F when it is not
// nil, else DefaultRoPEFrequencies(d, theta).
func RoPEGivenFrequencies[F Float](d int, theta float64, given []float64) []F {
	if given == nil {
		return DefaultRoPEFrequencies[F](d, theta)
	}
	freq := make([]F, len(given))
	for i, f := range given {
		freq[i] = F(f)
	}
	return freq
}

// RoPESections returns the section of each of the half frequencies: sections (nil: one
// section of half) are the sizes of consecutive groups, numbered from 0.
func RoPESections(half int, sections []int) []int {
	sec := make([]int, half)
	i := 0
	for s, n := range sections {
		for range n {
			sec[i] = s
			i++
		}
	}
	return sec
}

// RoPEFrequencies is RoPE with the d/2 frequencies given (rope_scaling's linear and llama3
// forms compute their own).
func RoPEFrequencies[F Float](t, h, d int, x []F, pos [][]int32, sections []int, freq []F, inverse bool, y []F) {
	half := d / 2
	sec := RoPESections(half, sections)
	parallel.For(t, parallel.Grain(h*d, 1<<14), func(lo, hi int) {
		cos, sin := make([]F, half), make([]F, half)
		for ti := lo; ti < hi; ti++ {
			for i := range half {
				a := F(F(pos[sec[i]][ti]) * freq[i])
				cos[i], sin[i] = F(math.Cos(float64(a))), F(math.Sin(float64(a)))
				if inverse {
					sin[i] = -sin[i]
				}
			}
			for hh := range h {
				o := (ti*h + hh) * d
				xr, yr := x[o:o+d], y[o:o+d]
				for i := range half {
					x0, x1 := xr[i], xr[i+half]
					yr[i] = F(x0*cos[i]) - F(x1*sin[i])
					yr[i+half] = F(x1*cos[i]) + F(x0*sin[i])
				}
			}
		}
	})
}
