package perturb

import (
	"math"
	"math/rand/v2"

	"github.com/mtrl-go/mtrl/tensor"
)

// Defaults of perc_utils.add_gaussian_noise: mean 0, standard deviation 189 (in pixel units).
const (
	DefaultNoiseMean = 0
	DefaultNoiseStd  = 189
)

// noiseChannels is the number of noised channels per pixel: RGBA leaves alpha alone.
func noiseChannels(g geom) int {
	if g.c == 4 {
		return 3
	}
	return g.c
}

// AddNoise is the deterministic core of Gaussian noise (docs/semantics.md#gaussian-noise): for one
// image src ([H, W] or [H, W, C], uint8) it writes dst = trunc(clip(float64(src) + noise, 0, 255)).
// noise is row-major with H*W*Cn values, where Cn = C except for RGBA, whose alpha channel gets no
// noise (Cn = 3). dst may be src. NaN noise gives 0.
func AddNoise(dst, src *tensor.Tensor, noise []float64) error {
	const op = "perturb.AddNoise"
	_, g, err := checkImages(op, dst, src, false)
	if err != nil {
		return err
	}
	if want := g.h * g.w * noiseChannels(g); len(noise) != want {
		return tensor.Errorf(tensor.ErrShape, op, "noise", "has %d values, want %d (%d×%d×%d)", len(noise), want, g.h, g.w, noiseChannels(g))
	}
	return run(op, dst, src, false, nil, 0, func(d, s []uint8, g geom, _ uint64) {
		addNoise(d, s, g, noise, nil, 0, 0)
	})
}

// addNoise adds noise to each noised channel value, in row-major order: the values of noise
// when it is not nil, else mean + std*r.NormFloat64().
func addNoise(d, s []uint8, g geom, noise []float64, r *rand.Rand, mean, std float64) {
	nc := noiseChannels(g)
	k := 0
	for p := 0; p < g.h*g.w; p++ {
		px, sx := d[p*g.c:(p+1)*g.c], s[p*g.c:(p+1)*g.c]
		for ch := range nc {
			var z float64
			if noise != nil {
				z = noise[k]
				k++
			} else {
				z = mean + std*r.NormFloat64()
			}
			px[ch] = toUint8(float64(sx[ch]) + z)
		}
		for ch := nc; ch < g.c; ch++ {
			px[ch] = sx[ch]
		}
	}
}

// toUint8 is numpy's clip(v, 0, 255).astype(uint8): truncation toward zero; NaN maps to 0.
func toUint8(v float64) uint8 {
	switch {
	case !(v > 0):
		return 0
	case v >= 255:
		return 255
	}
	return uint8(v)
}

// Noise adds Gaussian noise N(Mean, Std²) (pixel units) to every channel except alpha, then
// clips to [0, 255] and truncates. The zero value adds no noise; DefaultNoise returns the
// reference's mean 0, std 189.
//
// The reference draws np.random.normal from numpy's global RandomState; mtrl draws
// Mean + Std*NormFloat64() from rand.New(rand.NewPCG(seed, sampleID)), one value per noised
// channel in row-major order. To replay recorded numpy noise use AddNoise.
type Noise struct {
	Mean float64 `json:"mean" yaml:"mean"`
	Std  float64 `json:"std" yaml:"std"`
}

// DefaultNoise returns Noise{Mean: 0, Std: 189}.
func DefaultNoise() Noise { return Noise{Mean: DefaultNoiseMean, Std: DefaultNoiseStd} }

// Kind returns GaussianNoise.
func (Noise) Kind() Kind { return GaussianNoise }

// Validate checks that Mean is finite and Std is finite and >= 0 (numpy rejects a negative scale).
func (n Noise) Validate() error { return n.check("perturb.Noise.Validate") }

func (n Noise) check(op string) error {
	if math.IsNaN(n.Mean) || math.IsInf(n.Mean, 0) {
		return tensor.Errorf(tensor.ErrParam, op, "Mean", "is %v, want a finite value", n.Mean)
	}
	if !(n.Std >= 0) || math.IsInf(n.Std, 0) {
		return tensor.Errorf(tensor.ErrParam, op, "Std", "is %v, want a finite value >= 0", n.Std)
	}
	return nil
}

// Apply adds noise to one image [H, W] or [H, W, C] for (seed, sampleID).
func (n Noise) Apply(dst, src *tensor.Tensor, seed, sampleID uint64) error {
	const op = "perturb.Noise.Apply"
	if err := n.check(op); err != nil {
		return err
	}
	return run(op, dst, src, false, nil, sampleID, n.kernel(seed))
}

// ApplyBatch adds noise to each image of a batch [N, H, W] or [N, H, W, C]; image i uses
// (seed, ids[i]).
func (n Noise) ApplyBatch(dst, src *tensor.Tensor, seed uint64, ids []uint64) error {
	const op = "perturb.Noise.ApplyBatch"
	if err := n.check(op); err != nil {
		return err
	}
	return run(op, dst, src, true, ids, 0, n.kernel(seed))
}

func (n Noise) kernel(seed uint64) func(d, s []uint8, g geom, id uint64) {
	return func(d, s []uint8, g geom, id uint64) {
		addNoise(d, s, g, nil, rand.New(rand.NewPCG(seed, id)), n.Mean, n.Std)
	}
}
