package tensor

import "github.com/mtrl-go/mtrl/internal/parallel"

// The bulk bfloat16 conversions of callers that keep their own activations (the mixed-precision
// models of examples/): the vector kernels of bf16conv_amd64.s (AVX-512 or AVX2; the Go loops
// under noasm), bit for bit BF16FromFloat32 and BF16.Float32, split over the cores for long
// slices.

// convGrain is how many elements one goroutine converts at a time (a few L1-sized blocks).
const convGrain = 1 << 15

// RoundToBF16 writes src rounded to the nearest bfloat16 (ties to even, NaN kept quiet, as
// BF16FromFloat32) into dst. Like copy, it converts min(len(dst), len(src)) elements and
// returns that number.
func RoundToBF16(dst []BF16, src []float32) int {
	n := min(len(dst), len(src))
	parallel.For(n, convGrain, func(lo, hi int) { roundBF16(dst[lo:hi], src[lo:hi]) })
	return n
}

// WidenBF16 writes src widened to float32 (exact) into dst. Like copy, it converts
// min(len(dst), len(src)) elements and returns that number.
func WidenBF16(dst []float32, src []BF16) int {
	n := min(len(dst), len(src))
	parallel.For(n, convGrain, func(lo, hi int) { widenBF16(dst[lo:hi], src[lo:hi]) })
	return n
}

// RoundFloat32s rounds every value of v to the nearest bfloat16 in place (v then holds bfloat16
// values as float32, BF16FromFloat32(x).Float32() of each x): the rounding a bfloat16 op's
// output gets, for activations kept in float32.
func RoundFloat32s(v []float32) {
	parallel.For(len(v), convGrain, func(lo, hi int) {
		var buf [1024]BF16
		for i := lo; i < hi; i += len(buf) {
			part := v[i:min(hi, i+len(buf))]
			roundBF16(buf[:len(part)], part)
			widenBF16(part, buf[:len(part)])
		}
	})
}
