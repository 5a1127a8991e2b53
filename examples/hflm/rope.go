package hflm

import (
	"math"

	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/tensor"
)

// RoPEFrequencies returns the rotary frequencies of a config's rope_scaling, computed in float32
// as transformers' modeling_rope_utils does, or nil for plain RoPE (1/rope_theta^(2i/D), which
// tensor.RoPE computes itself).
func RoPEFrequencies(c *hfmodel.Config) ([]float64, error) {
	rs := c.RopeScaling
	if rs == nil {
		return nil, nil
	}
	inv := nnref.DefaultRoPEFrequencies[float32](c.HeadDim, c.RopeTheta)
	factor := float32(rs.Factor)
	switch rs.Type {
	case "linear":
		for i := range inv {
			inv[i] /= factor
		}
	case "llama3":
		old := float32(rs.OriginalMaxPositionEmbeddings)
		lowF, highF := float32(rs.LowFreqFactor), float32(rs.HighFreqFactor)
		lowWavelen, highWavelen := old/lowF, old/highF
		for i, f := range inv {
			// torch evaluates 2π / inv_freq as reciprocal(inv_freq) · 2π.
			wavelen := (1 / f) * float32(2*math.Pi)
			scaled := f
			if wavelen > lowWavelen {
				scaled = f / factor
			}
			if !(wavelen < highWavelen) && !(wavelen > lowWavelen) {
				smooth := (old*(1/wavelen) - lowF) / (highF - lowF)
				scaled = (1-smooth)*scaled/factor + smooth*scaled
			}
			inv[i] = scaled
		}
	default:
		return nil, tensor.Errorf(tensor.ErrParam, "hflm.RoPEFrequencies", "rope_scaling", "rope type %q is not supported (linear or llama3)", rs.Type)
	}
	out := make([]float64, len(inv))
	for i, f := range inv {
		out[i] = float64(f)
	}
	return out, nil
}
