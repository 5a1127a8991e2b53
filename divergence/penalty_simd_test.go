package divergence

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/tensor"
)

// edgeSizes are lengths around the vector widths and the unrolled steps.
var edgeSizes = []int{0, 1, 15, 16, 17, 31, 32, 33, 1023, 1025}

// edgeInputs returns random log-prob pairs with NaN, ±Inf and differences on and around the
// clamp boundaries (±20 for the difference; y = ±10 for low_var_kl is near x = -11 and 2.53).
func edgeInputs(r *rand.Rand, n int) (a, b []float32) {
	a, b = make([]float32, n), make([]float32, n)
	special := []float32{0, 20, -20, 10, -10, -11, 2.5282, 19.999998, 20.000002, -20.000002,
		float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 1e-7, -1e-7}
	for i := range a {
		a[i] = float32(-5 * r.Float64())
		switch r.IntN(4) {
		case 0:
			b[i] = a[i] + special[r.IntN(len(special))]
			if r.IntN(8) == 0 {
				a[i] = special[r.IntN(len(special))]
			}
		default:
			b[i] = a[i] + float32(r.NormFloat64()*8)
		}
	}
	return a, b
}

// ulpDiff is the distance in float32 steps between x and y (0 for two NaNs, huge for one).
func ulpDiff(x, y float32) int64 {
	if x != x || y != y {
		if x != x && y != y {
			return 0
		}
		return math.MaxInt64
	}
	if x == y {
		return 0
	}
	ix, iy := int64(int32(math.Float32bits(x))), int64(int32(math.Float32bits(y)))
	if ix < 0 {
		ix = math.MinInt32 - ix
	}
	if iy < 0 {
		iy = math.MinInt32 - iy
	}
	if ix > iy {
		return ix - iy
	}
	return iy - ix
}

// TestPenaltySIMDVsGo compares every vector implementation with the pure-Go kernels on edge
// sizes, NaN, ±Inf and clamp boundaries: the same NaN positions and clamp decisions, values
// within a few ulp (the exp differs slightly), and bit-identical repeated runs.
func TestPenaltySIMDVsGo(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, im := range penaltyImpls.SIMD() {
		for _, n := range edgeSizes {
			a, b := edgeInputs(r, n)
			ta, tb := tensor.Must(tensor.FromFloat32(a, n)), tensor.Must(tensor.FromFloat32(b, n))
			for _, op := range []string{"low_var_kl", "grad", "perception"} {
				call := func(dst *tensor.Tensor) error {
					switch op {
					case "low_var_kl":
						return Penalty(dst, ta, tb, LowVarKL)
					case "grad":
						return derivative(dst, ta, tb, LowVarKL)
					}
					return PerceptionScore(dst, ta, tb)
				}
				want := make([]float32, n)
				restore := penaltyImpls.Use(dispatch.GoName)
				if err := call(tensor.Must(tensor.FromFloat32(want, n))); err != nil {
					t.Fatal(err)
				}
				restore()
				restore = penaltyImpls.Use(im.Name)
				got, again := make([]float32, n), make([]float32, n)
				if err := call(tensor.Must(tensor.FromFloat32(got, n))); err != nil {
					t.Fatal(err)
				}
				if err := call(tensor.Must(tensor.FromFloat32(again, n))); err != nil {
					t.Fatal(err)
				}
				restore()
				for j := range want {
					// Values near 0 (1 - exp(x) at tiny x) are compared absolutely.
					if d := ulpDiff(got[j], want[j]); d > 4 && math.Abs(float64(got[j]-want[j])) > 1e-6 {
						t.Fatalf("%s %s n=%d [%d]: a=%v b=%v: got %v, want %v (%d ulp)", im.Name, op, n, j, a[j], b[j], got[j], want[j], d)
					}
					if math.Float32bits(got[j]) != math.Float32bits(again[j]) {
						t.Fatalf("%s %s n=%d [%d]: not deterministic", im.Name, op, n, j)
					}
				}
			}
		}
	}
}

// TestPenaltySIMDGOMAXPROCS checks that a large input gives the same bits on one core and on all.
func TestPenaltySIMDGOMAXPROCS(t *testing.T) {
	n := 3*simdGrain + 5
	if testing.Short() {
		t.Skip("large input")
	}
	a, b := edgeInputs(rand.New(rand.NewPCG(7, 8)), n)
	ta, tb := tensor.Must(tensor.FromFloat32(a, n)), tensor.Must(tensor.FromFloat32(b, n))
	one, all := make([]float32, n), make([]float32, n)
	old := runtime.GOMAXPROCS(1)
	err := Penalty(tensor.Must(tensor.FromFloat32(one, n)), ta, tb, LowVarKL)
	runtime.GOMAXPROCS(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := Penalty(tensor.Must(tensor.FromFloat32(all, n)), ta, tb, LowVarKL); err != nil {
		t.Fatal(err)
	}
	for j := range one {
		if math.Float32bits(one[j]) != math.Float32bits(all[j]) {
			t.Fatalf("[%d]: %v with GOMAXPROCS=1, %v with %d", j, one[j], all[j], old)
		}
	}
}
