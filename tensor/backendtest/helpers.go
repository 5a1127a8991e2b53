package backendtest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// Upload returns float32 values v with the given shape on backend b.
func Upload(t testing.TB, b tensor.Backend, v []float32, shape ...int) *tensor.Tensor {
	t.Helper()
	d, err := tensor.To(b, tensor.Must(tensor.FromFloat32(v, shape...)))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// UploadInt32 returns int32 values v with the given shape on backend b.
func UploadInt32(t testing.TB, b tensor.Backend, v []int32, shape ...int) *tensor.Tensor {
	t.Helper()
	d, err := tensor.To(b, tensor.Must(tensor.FromInt32(v, shape...)))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Host returns the values of d (float32, bfloat16, int32 or uint8) as float32 in host memory.
func Host(t testing.TB, d *tensor.Tensor) []float32 {
	t.Helper()
	h, err := tensor.To(tensor.CPU(), d)
	if err != nil {
		t.Fatal(err)
	}
	widen := func(n int, at func(i int) float32) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = at(i)
		}
		return out
	}
	switch h.DType() {
	case tensor.Int32:
		v, _ := h.Int32s()
		return widen(len(v), func(i int) float32 { return float32(v[i]) })
	case tensor.BFloat16:
		v, _ := h.BF16s()
		return widen(len(v), func(i int) float32 { return v[i].Float32() })
	case tensor.Uint8:
		v, _ := h.Uint8s()
		return widen(len(v), func(i int) float32 { return float32(v[i]) })
	}
	v, err := h.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Randn returns n normal values times scale.
func Randn(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * scale)
	}
	return v
}

// Mask01 returns n values that are 1 with probability p and 0 otherwise.
func Mask01(r *rand.Rand, n int, p float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		if r.Float64() < p {
			v[i] = 1
		}
	}
	return v
}

// near reports the elements of got that differ from want by more than atol + rtol*|want| (NaN
// matches NaN; rtol = atol = 0 asks for equal values).
func near(t *testing.T, name string, got, want []float32, rtol, atol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, want %d", name, len(got), len(want))
		return
	}
	bad := 0
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		ok := math.Abs(g-w) <= atol+rtol*math.Abs(w) || (math.IsNaN(g) && math.IsNaN(w)) || g == w
		if !ok {
			if bad < 3 {
				t.Errorf("%s[%d] = %v, reference %v", name, i, got[i], want[i])
			}
			bad++
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d of %d differ", name, bad, len(want))
	}
}

// nearTerms is near with a second relative tolerance, ttol, applied to scale[i]: the size of
// the terms want[i] is computed from (which can cancel to far below them).
func nearTerms(t *testing.T, name string, got, want []float32, scale []float64, rtol, ttol, atol float64) {
	t.Helper()
	if len(got) != len(want) || len(scale) != len(want) {
		t.Errorf("%s: %d values and %d scales, want %d", name, len(got), len(scale), len(want))
		return
	}
	bad := 0
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		ok := math.Abs(g-w) <= atol+rtol*math.Abs(w)+ttol*scale[i] || (math.IsNaN(g) && math.IsNaN(w)) || g == w
		if !ok {
			if bad < 3 {
				t.Errorf("%s[%d] = %v, reference %v (terms %.3g)", name, i, got[i], want[i], scale[i])
			}
			bad++
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d of %d differ", name, bad, len(want))
	}
}

func same(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// NewF32 returns a new float32 tensor of the given shape on backend be.
func NewF32(be tensor.Backend, shape ...int) *tensor.Tensor {
	return tensor.Must(tensor.New(be, tensor.Float32, shape...))
}

// Scalars returns xs as float32, for returning scalar results from an Op.
func Scalars(xs ...float64) []float32 {
	out := make([]float32, len(xs))
	for i, x := range xs {
		out[i] = float32(x)
	}
	return out
}
