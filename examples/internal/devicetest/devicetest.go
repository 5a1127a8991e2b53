// Package devicetest holds what the examples' device tests share: comparing a model's results
// on a device (a CUDA backend, or its emulation) with the same model's on the CPU.
package devicetest

import (
	"math"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// CloseTo fails t when |got − want| > tol·(1 + max|want|) anywhere (the device's sums run in
// other orders, so a difference is measured against the values' scale); it returns the
// largest difference relative to that scale, for a test to log what it observed.
func CloseTo(t testing.TB, name string, got, want []float32, tol float64) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: device %d values, cpu %d", name, len(got), len(want))
	}
	scale := 0.0
	for _, w := range want {
		scale = max(scale, math.Abs(float64(w)))
	}
	worst := 0.0
	for i := range want {
		d := math.Abs(float64(got[i]-want[i])) / (1 + scale)
		if !(d <= tol) {
			t.Fatalf("%s[%d]: device %v, cpu %v (relative difference %.3g > %.3g)", name, i, got[i], want[i], d, tol)
		}
		worst = max(worst, d)
	}
	return worst
}

// Downloaded returns a float32 tensor's values on the host, copied from its backend (nil for a
// nil tensor); it fails t when they cannot be read.
func Downloaded(t testing.TB, x *tensor.Tensor) []float32 {
	t.Helper()
	if x == nil {
		return nil
	}
	h, err := tensor.To(tensor.CPU(), x)
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	v, err := h.Float32s()
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	return v
}
