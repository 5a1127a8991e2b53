package nnref

import (
	"math"
	"math/rand/v2"
	"testing"
)

// ropeHF is Hugging Face's apply_multimodal_rotary_pos_emb written out in float64: the cosines
// and sines of every section's positions over cat(freqs, freqs), split along the head dimension
// by mrope_section*2, chunk c taken from section c%len(sections); then x·cos + rotate_half(x)·sin.
func ropeHF(t, h, d int, x []float64, pos [][]int32, sections []int, theta float64) []float64 {
	half := d / 2
	chunks := append(append([]int{}, sections...), sections...)
	y := make([]float64, len(x))
	for ti := range t {
		cos, sin := make([]float64, d), make([]float64, d)
		j := 0
		for c, n := range chunks {
			for range n {
				f := 1 / math.Pow(theta, float64(2*(j%half))/float64(d))
				a := float64(pos[c%len(sections)][ti]) * f
				cos[j], sin[j] = math.Cos(a), math.Sin(a)
				j++
			}
		}
		for hh := range h {
			o := (ti*h + hh) * d
			for i := range d {
				var rot float64 // rotate_half(x) = cat(-x2, x1)
				if i < half {
					rot = -x[o+i+half]
				} else {
					rot = x[o+i-half]
				}
				y[o+i] = x[o+i]*cos[i] + rot*sin[i]
			}
		}
	}
	return y
}

func TestRoPE(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	tn, h, d := 5, 3, 16
	x := randn(r, tn*h*d, 1)
	pos := make([][]int32, 3)
	for s := range pos {
		pos[s] = make([]int32, tn)
		for i := range pos[s] {
			pos[s][i] = int32(r.IntN(50))
		}
	}
	sections := []int{2, 3, 3} // sums to d/2, like Qwen2-VL's [16, 24, 24] for d = 128
	y := make([]float64, len(x))
	RoPE(tn, h, d, x, pos, sections, 10000, false, y)
	near(t, "mrope", y, ropeHF(tn, h, d, x, pos, sections, 10000), 1e-12)
	RoPE(tn, h, d, x, pos[:1], nil, 1e6, false, y)
	near(t, "rope", y, ropeHF(tn, h, d, x, pos[:1], []int{d / 2}, 1e6), 1e-12)

	// The backward is the inverse rotation.
	ry := randn(r, len(x), 1)
	dx := make([]float64, len(x))
	RoPE(tn, h, d, ry, pos, sections, 10000, true, dx)
	fd(t, "dx", x, func() float64 { RoPE(tn, h, d, x, pos, sections, 10000, false, y); return dotLoss(ry, y) }, dx)
}
