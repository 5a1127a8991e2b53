package advantage

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

func t32(t testing.TB, data []float32, shape ...int) *tensor.Tensor {
	t.Helper()
	x, err := tensor.FromFloat32(data, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func i32(t testing.TB, data []int32) *tensor.Tensor {
	t.Helper()
	x, err := tensor.FromInt32(data, len(data))
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func zeros(t testing.TB, shape ...int) *tensor.Tensor {
	t.Helper()
	x, err := tensor.New(tensor.CPU(), tensor.Float32, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func data(t testing.TB, x *tensor.Tensor) []float32 {
	t.Helper()
	v, err := x.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// batch is a random problem: rewards, values and a right-padded mask with holes, plus group ids
// (groups of size g, contiguous) and baselines.
type batch struct {
	b, l          int
	r, v, m, base []float32
	ids           []int32
}

func randBatch(rng *rand.Rand, b, l, g int) batch {
	x := batch{b: b, l: l, r: make([]float32, b*l), v: make([]float32, b*l), m: make([]float32, b*l),
		base: make([]float32, b), ids: make([]int32, b)}
	for i := range b {
		n := rng.IntN(l + 1)
		for t := range l {
			x.r[i*l+t] = float32(rng.NormFloat64())
			x.v[i*l+t] = float32(rng.NormFloat64())
			if t < n && rng.IntN(10) != 0 {
				x.m[i*l+t] = 1
			}
		}
		x.base[i] = float32(rng.NormFloat64())
		x.ids[i] = int32(i / g)
	}
	return x
}

func (x batch) tensors(t testing.TB) (r, v, m, base, ids *tensor.Tensor) {
	return t32(t, x.r, x.b, x.l), t32(t, x.v, x.b, x.l), t32(t, x.m, x.b, x.l), t32(t, x.base, x.b), i32(t, x.ids)
}

func allFinite(v []float32) bool {
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return false
		}
	}
	return true
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

func nan64() float64 { return math.NaN() }
