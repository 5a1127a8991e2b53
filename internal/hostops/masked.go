package hostops

import "math"

// MaskEps is the reference's masked_mean epsilon, added to the mask sum in float32.
const MaskEps float32 = 1e-8

// MaskedSum returns sum(v*m) and sum(m), accumulated in float64: each product is rounded to
// float32 as the reference computes it, then added exactly in float64. Positions with m == 0
// are skipped (a NaN value there does not propagate). The pure-Go loop adds in index order; the
// vector kernels keep per-lane float64 partial sums combined in a fixed order (and chunks of
// 2^17 elements in order), so results are deterministic and agree with the Go loop to float64
// rounding (about 1e-16 relative to the sum of magnitudes).
func MaskedSum(v, m []float32) (sum, count float64) {
	if k := maskedImpls.Active(); k != nil {
		return k.sumSIMD(v, m)
	}
	return maskedSumGo(v, m)
}

func maskedSumGo(v, m []float32) (sum, count float64) {
	for i, w := range m {
		if w != 0 {
			sum += float64(v[i] * w)
			count += float64(w)
		}
	}
	return sum, count
}

// sqDevGo returns sum(float32((v-mean)*(v-mean)*m)) over m != 0 in float64, in index order.
func sqDevGo(v, m []float32, mean float32) float64 {
	var sum float64
	for i, w := range m {
		if w != 0 {
			c := v[i] - mean
			sum += float64(c * c * w)
		}
	}
	return sum
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
	_, variance := maskedMoments(v, m, unbiased)
	return variance
}

// maskedMoments returns the masked mean and variance: one pass for sum(v*m) and sum(m), one for
// the squared deviations from the float32 mean (the reference's two-pass formula).
func maskedMoments(v, m []float32, unbiased bool) (mean, variance float32) {
	sum, count := MaskedSum(v, m)
	mean = MeanOf(sum, count)
	var sq float64
	if k := maskedImpls.Active(); k != nil {
		sq = k.sqDevSIMD(v, m, mean)
	} else {
		sq = sqDevGo(v, m, mean)
	}
	variance = MeanOf(sq, count)
	if unbiased && count > 1 {
		variance *= float32(count) / float32(count-1)
	}
	return mean, variance
}

// MaskedWhiten writes (v - mean) * rsqrt(var + 1e-8) into dst for every position, masked or not
// (the reference does not re-mask). dst may alias v. The mean is computed once (three passes in
// all).
func MaskedWhiten(dst, v, m []float32) {
	mean, variance := maskedMoments(v, m, true)
	scale := float32(1 / math.Sqrt(float64(variance+1e-8)))
	if k := maskedImpls.Active(); k != nil {
		k.whitenSIMD(dst, v, mean, scale)
		return
	}
	for i, x := range v {
		dst[i] = (x - mean) * scale
	}
}
