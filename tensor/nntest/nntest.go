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

// The bfloat16 activations of the non-GEMM ops (norms, RoPE, activations and SwiGLU, embedding).
// Their contract: the arithmetic of the float32 op on the widened inputs, each bfloat16 output
// rounded to nearest even once, at the store. Each family runs an op twice on the same
// bfloat16-representable values, once with bfloat16 activations and once with float32 ones,
// and checkBF16 compares the first run's outputs
//   - with the second's: a bfloat16 output must be the float32 one rounded, a float32 output (a
//     parameter gradient) the float32 one, bit for bit, on every backend;
//   - with the pure-Go reference (nnref in float32 on the widened inputs, rounded): bit for bit
//     where the contract fixes the order of the arithmetic (tol{} : the embedding gather and
//     scatter-add), else within the bound that the float32 tolerance implies. The backend's
//     float32 value v′ and the reference's v each lie within t(w) = atol + rtol·|w| of the exact
//     value w (what the float32 suite checks), so |v′ − v| ≤ e = 2·(atol + rtol·|v|)/(1 − rtol);
//     rounding to bfloat16 is monotone, so the bfloat16 output must lie between the roundings of
//     v − e and v + e (at most one bfloat16 step more than the float32 tolerance allows).

// tol is a float32 tolerance against the exact value: |v − w| ≤ atol + rtol·|w|; zero means the
// order of the arithmetic is fixed and the results are bit for bit.
type tol struct{ rtol, atol float64 }

// bf16s rounds every value to bfloat16, in place, and returns v.
func bf16s(v []float32) []float32 {
	for i, x := range v {
		v[i] = tensor.BF16FromFloat32(x).Float32()
	}
	return v
}

// zerosOf returns a zero tensor of dtype dt on the backend.
func (e env) zerosOf(dt tensor.DType, shape ...int) *tensor.Tensor {
	e.t.Helper()
	d, err := tensor.New(e.b, dt, shape...)
	e.ok(err)
	return d
}

// dtype is BFloat16 when bf16, else Float32.
func dtype(bf16 bool) tensor.DType {
	if bf16 {
		return tensor.BFloat16
	}
	return tensor.Float32
}

// values returns a float32 or bfloat16 tensor's values as float32 (widened exactly).
func (e env) values(d *tensor.Tensor) []float32 {
	e.t.Helper()
	h, err := tensor.To(tensor.CPU(), d)
	e.ok(err)
	if h.DType() == tensor.Float32 {
		v, err := h.Float32s()
		e.ok(err)
		return v
	}
	b, err := h.BF16s()
	e.ok(err)
	v := make([]float32, len(b))
	for i, x := range b {
		v[i] = x.Float32()
	}
	return v
}

// checkBF16 compares outputs (names; is16[i]: output i is bfloat16) of a run with bfloat16
// activations, got, with the float32 run on the same values, f32, and the unrounded pure-Go
// float32 reference, ref, as the comment above says.
func checkBF16(t *testing.T, names []string, is16 []bool, got, f32, ref [][]float32, tols []tol) {
	t.Helper()
	round := func(i int, x float64) float32 {
		if is16[i] {
			return tensor.BF16FromFloat32(float32(x)).Float32()
		}
		return float32(x)
	}
	for i, name := range names {
		bad := 0
		for j, g := range got[i] {
			if want := round(i, float64(f32[i][j])); math.Float32bits(g) != math.Float32bits(want) {
				if bad < 3 {
					t.Errorf("%s[%d] = %v, want %v: the float32 run's %v (rounded if bfloat16)", name, j, g, want, f32[i][j])
				}
				bad++
				continue
			}
			v, tl := float64(ref[i][j]), tols[i]
			e := 2 * (tl.atol + tl.rtol*math.Abs(v)) / (1 - tl.rtol)
			if lo, hi := round(i, v-e), round(i, v+e); !(g >= lo && g <= hi) {
				if bad < 3 {
					t.Errorf("%s[%d] = %v, outside [%v, %v]: the reference's %v ± %.3g, rounded", name, j, g, lo, hi, v, e)
				}
				bad++
			}
		}
		if bad > 0 {
			t.Fatalf("%s: %d of %d values wrong", name, bad, len(got[i]))
		}
	}
}
