// Package nntest is the conformance suite of the transformer op families of package tensor
// (MatMul, Linear, RMSNorm and LayerNorm, RoPE, Attention, activations and SwiGLU, Embedding,
// AdamW and gradient clipping, the fused LM head). A backend certifies all of them in one line:
//
//	func TestOps(t *testing.T) { nntest.Run(t, mybackend) }
//
// Each op runs on the backend in float32 (and bfloat16 where the op takes it) on random inputs
// with fixed seeds, and its outputs are compared with the float64 evaluation of the pure-Go
// reference kernels (internal/nnref, themselves checked by finite differences and against the
// ops' textbook definitions) on the same input values: the tolerances are float32 rounding,
// so a backend may sum in any order but must compute the same function. Every op also runs
// twice, and the two results must be bitwise equal. Unlike backendtest, the suite runs on the
// CPU backend too.
//
// One file per op family, named as the family's file in package tensor.
package nntest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// Run runs every family's checks on backend b.
func Run(t *testing.T, b tensor.Backend) {
	for _, f := range []struct {
		name string
		run  func(*testing.T, tensor.Backend)
	}{
		{"MatMul", MatMul}, {"Linear", Linear}, {"Norm", Norm}, {"RoPE", RoPE},
		{"Attention", Attention}, {"Activation", Activation}, {"Embedding", Embedding},
		{"AdamW", AdamW}, {"LMHead", LMHead},
	} {
		t.Run(f.name, func(t *testing.T) { f.run(t, b) })
	}
}

// env uploads inputs to a backend and reads results back, failing the test on any error.
type env struct {
	t testing.TB
	b tensor.Backend
	r *rand.Rand
}

func newEnv(t testing.TB, b tensor.Backend, seed uint64) env {
	return env{t: t, b: b, r: rand.New(rand.NewPCG(seed, 0x6e6e))}
}

func (e env) ok(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

// randn returns n normal values times scale, rounded to bfloat16 when bf16 (so that the
// float64 oracle sees exactly the values the backend sees).
func (e env) randn(n int, scale float64, bf16 bool) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(e.r.NormFloat64() * scale)
		if bf16 {
			v[i] = tensor.BF16FromFloat32(v[i]).Float32()
		}
	}
	return v
}

// put uploads v with the given shape as float32, or as bfloat16 when bf16.
func (e env) put(v []float32, bf16 bool, shape ...int) *tensor.Tensor {
	e.t.Helper()
	h := tensor.Must(tensor.FromFloat32(v, shape...))
	if bf16 {
		b := make([]tensor.BF16, len(v))
		for i, x := range v {
			b[i] = tensor.BF16FromFloat32(x)
		}
		h = tensor.Must(tensor.FromBF16(b, shape...))
	}
	d, err := tensor.To(e.b, h)
	e.ok(err)
	return d
}

func (e env) f32(v []float32, shape ...int) *tensor.Tensor {
	e.t.Helper()
	return e.put(v, false, shape...)
}

func (e env) i32(v []int32, shape ...int) *tensor.Tensor {
	e.t.Helper()
	d, err := tensor.To(e.b, tensor.Must(tensor.FromInt32(v, shape...)))
	e.ok(err)
	return d
}

// zeros returns a zero float32 tensor on the backend.
func (e env) zeros(shape ...int) *tensor.Tensor {
	e.t.Helper()
	d, err := tensor.New(e.b, tensor.Float32, shape...)
	e.ok(err)
	return d
}

// host returns a float32 tensor's values (a copy).
func (e env) host(d *tensor.Tensor) []float32 {
	e.t.Helper()
	h, err := tensor.To(tensor.CPU(), d)
	e.ok(err)
	v, err := h.Float32s()
	e.ok(err)
	return v
}

// twice runs fn twice and fails when its outputs differ in any bit; it returns the first run's.
func twice(t *testing.T, fn func() [][]float32) [][]float32 {
	t.Helper()
	a, b := fn(), fn()
	for i := range a {
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				t.Fatalf("output %d differs between two runs at %d: %v, %v", i, j, a[i][j], b[i][j])
			}
		}
	}
	return a
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// near fails t when |got − want| > atol + rtol·|want| anywhere (NaN must match NaN).
func near(t *testing.T, name string, got []float32, want []float64, rtol, atol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	bad := 0
	for i, w := range want {
		g := float64(got[i])
		if math.IsNaN(g) != math.IsNaN(w) || math.Abs(g-w) > atol+rtol*math.Abs(w) {
			if bad < 3 {
				t.Errorf("%s[%d] = %.9g, want %.9g", name, i, g, w)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%s: %d of %d values outside %g + %g·|want|", name, bad, len(want), atol, rtol)
	}
}

// Tolerances of float32 results against the float64 oracle for the O(1) values of the suite.
const (
	rtol = 2e-5
	atol = 2e-5
)
