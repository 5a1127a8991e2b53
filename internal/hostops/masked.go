package hostops

import "math"

// MaskEps is the reference's masked_mean epsilon, added to the mask sum in float32.
const MaskEps float32 = 1e-8

// MaskedSum returns sum(v*m) and sum(m), accumulated in float64 in index order.
func MaskedSum(v, m []float32) (sum, count float64) {
	for i, w := range m {
		if w != 0 {
			sum += float64(v[i] * w)
			count += float64(w)
		}
	}
	return sum, count
}

// MeanOf returns the reference's masked mean sum/(count+1e-8) in float32.
func MeanOf(sum, count float64) float32 { return float32(sum) / (float32(count) + MaskEps) }

// MaskedMean is the reference's masked_mean over all elements.
func MaskedMean(v, m []float32) float32 { return MeanOf(MaskedSum(v, m)) }

// MaskedMeanRows writes the masked mean of each row of length cols into dst.
func MaskedMeanRows(dst, v, m []float32, cols int) {
	for i := range dst {
		lo := i * cols
		dst[i] = MaskedMean(v[lo:lo+cols], m[lo:lo+cols])
	}
}

// MaskedVar is the reference's masked_var. With unbiased set and a mask sum above one it applies
// Bessel's correction; with a mask sum of at most one it silently returns the biased variance,
// as the reference does.
func MaskedVar(v, m []float32, unbiased bool) float32 {
	mean := MaskedMean(v, m)
	var sum, count float64
	for i, w := range m {
		if w != 0 {
			c := v[i] - mean
			sum += float64(c * c * w)
			count += float64(w)
		}
	}
	variance := MeanOf(sum, count)
	if unbiased && count > 1 {
		variance *= float32(count) / float32(count-1)
	}
	return variance
}

// MaskedWhiten writes (v - mean) * rsqrt(var + 1e-8) into dst for every position, masked or not
// (the reference does not re-mask). dst may alias v.
func MaskedWhiten(dst, v, m []float32) {
	mean := MaskedMean(v, m)
	variance := MaskedVar(v, m, true)
	scale := float32(1 / math.Sqrt(float64(variance+1e-8)))
	for i, x := range v {
		dst[i] = (x - mean) * scale
	}
}
