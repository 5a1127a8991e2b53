package divergence

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/internal/gradcheck"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var allKinds = []Kind{KL, Abs, MSE, LowVarKL, Full}

func randLogProbs(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(-3 * r.Float64())
	}
	return v
}

// logSoftmaxRows returns random log-distributions of shape [rows, v].
func logSoftmaxRows(r *rand.Rand, rows, v int) []float32 {
	out := make([]float32, rows*v)
	for i := range rows {
		row := out[i*v : (i+1)*v]
		var m float64 = math.Inf(-1)
		z := make([]float64, v)
		for j := range z {
			z[j] = 2 * r.NormFloat64()
			m = math.Max(m, z[j])
		}
		var s float64
		for _, x := range z {
			s += math.Exp(x - m)
		}
		for j, x := range z {
			row[j] = float32(x - m - math.Log(s))
		}
	}
	return out
}

func mustT(t testing.TB, data []float32, shape ...int) *tensor.Tensor {
	t.Helper()
	x, err := tensor.FromFloat32(data, shape...)
	require.NoError(t, err)
	return x
}

func TestParseKindRoundTrip(t *testing.T) {
	for _, k := range allKinds {
		got, err := ParseKind(k.String())
		require.NoError(t, err)
		assert.Equal(t, k, got)
	}
	for s, want := range map[string]Kind{"k1": KL, "k2": MSE, "k3": LowVarKL} {
		got, err := ParseKind(s)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	for _, s := range []string{"", "kl2", "KL", "low-var-kl", "k4"} {
		_, err := ParseKind(s)
		assert.ErrorIs(t, err, tensor.ErrParam, s)
	}
	assert.Equal(t, "Kind(9)", Kind(9).String())
	assert.Equal(t, "Kind(-1)", Kind(-1).String())
}

func TestPenaltyValues(t *testing.T) {
	lp := []float32{-1, -2, -0.5, -30}
	ref := []float32{-1.5, -1, -0.5, -1}
	cases := map[Kind][]float32{
		KL:       {0.5, -1, 0, -29},
		Abs:      {0.5, 1, 0, 29},
		MSE:      {0.125, 0.5, 0, 420.5},
		LowVarKL: {float32(math.Exp(-0.5) + 0.5 - 1), float32(math.Exp(1) - 2), 0, 10},
	}
	for k, want := range cases {
		dst := make([]float32, 4)
		require.NoError(t, Penalty(mustT(t, dst, 2, 2), mustT(t, lp, 2, 2), mustT(t, ref, 2, 2), k))
		assert.InDeltaSlice(t, want, dst, 1e-6, k.String())
	}
	// low_var_kl lower clamp: x = -20 → exp(-20)+19 → clamped to 10 as well; and x clamped.
	dst := make([]float32, 1)
	require.NoError(t, Penalty(mustT(t, dst), mustT(t, []float32{0}), mustT(t, []float32{-50}), LowVarKL))
	assert.Equal(t, float32(10), dst[0])
}

func TestPenaltyFull(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	lp := logSoftmaxRows(r, 6, 7)
	ref := logSoftmaxRows(r, 6, 7)
	dst := make([]float32, 6)
	require.NoError(t, Penalty(mustT(t, dst, 2, 3), mustT(t, lp, 2, 3, 7), mustT(t, ref, 2, 3, 7), Full))
	for i := range 6 {
		var want float64
		for j := range 7 {
			p := float64(lp[i*7+j])
			want += math.Exp(p) * (p - float64(ref[i*7+j]))
		}
		assert.InDelta(t, want, dst[i], 1e-6)
		assert.GreaterOrEqual(t, dst[i], float32(-1e-6), "KL of distributions is >= 0")
	}
}

// KL(p‖p) = 0 for every kind.
func TestPenaltySelfIsZero(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, k := range allKinds {
		shape, dshape := []int{3, 5}, []int{3, 5}
		n := 15
		if k == Full {
			shape, n = []int{3, 5, 11}, 165
		}
		var lp []float32
		if k == Full {
			lp = logSoftmaxRows(r, 15, 11)
		} else {
			lp = randLogProbs(r, n)
		}
		dst := make([]float32, 15)
		for i := range dst {
			dst[i] = 42
		}
		require.NoError(t, Penalty(mustT(t, dst, dshape...), mustT(t, lp, shape...), mustT(t, slices.Clone(lp), shape...), k))
		for _, v := range dst {
			assert.Zero(t, v, k.String())
		}
	}
}

func TestLowVarKLNonNegative(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	n := 4096
	lp, ref := make([]float32, n), make([]float32, n)
	for i := range n {
		lp[i] = float32(60 * (r.Float64() - 0.5))
		ref[i] = float32(60 * (r.Float64() - 0.5))
	}
	lp[0], ref[0] = 0, 1e-7 // tiny differences, where exp(x)-x-1 cancels
	lp[1], ref[1] = 0, -1e-7
	dst := make([]float32, n)
	require.NoError(t, Penalty(mustT(t, dst), mustT(t, lp), mustT(t, ref), LowVarKL))
	for i, v := range dst {
		require.True(t, v >= 0 && v <= 10, "element %d = %v", i, v)
	}
	score := make([]float32, n)
	require.NoError(t, PerceptionScore(mustT(t, score), mustT(t, lp), mustT(t, ref)))
	for i, v := range score {
		require.True(t, v >= 0 && v <= 10, "score %d = %v", i, v)
	}
}

func TestPerceptionScore(t *testing.T) {
	old := []float32{-1, -1, -1, -1, 0, 0}
	aug := []float32{-1, -2, 0, -40, 30, -5}
	dst := make([]float32, 6)
	require.NoError(t, PerceptionScore(mustT(t, dst, 2, 3), mustT(t, old, 2, 3), mustT(t, aug, 2, 3)))
	want := []float32{0, float32(math.Exp(-1)), float32(math.E - 2), 10, 10, float32(math.Exp(-5) + 4)}
	assert.InDeltaSlice(t, want, dst, 1e-6)
	// NaN propagates.
	require.NoError(t, PerceptionScore(mustT(t, dst[:1]), mustT(t, []float32{float32(math.NaN())}), mustT(t, []float32{0})))
	assert.True(t, math.IsNaN(float64(dst[0])))
}

// penaltyF64 evaluates the generic kernel in float64, for finite differences.
func penaltyF64(lp, ref []float64, kind Kind, v int) []float64 {
	if kind == Full {
		dst := make([]float64, len(lp)/v)
		fullKL(dst, lp, ref, v)
		return dst
	}
	dst := make([]float64, len(lp))
	penaltyKernel(dst, lp, ref, kind)
	return dst
}

func TestPenaltyBackwardFiniteDifferences(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const rows, v = 4, 5
	for _, k := range allKinds {
		n := rows
		if k == Full {
			n = rows * v
		}
		w := make([]float64, rows)
		for i := range w {
			w[i] = r.NormFloat64()
		}
		lp, ref := make([]float64, n), make([]float64, n)
		for i := range n {
			lp[i] = -3 * r.Float64()
			ref[i] = lp[i] + (r.Float64()*3 - 1.5)
		}
		if k == LowVarKL {
			// Two points deep inside clamp regions (gradient 0): x clamped at 20, y clamped at 10.
			ref[0] = lp[0] + 25
			ref[1] = lp[1] + 5
		}
		f := func(x []float64) float64 {
			out := penaltyF64(x, ref, k, v)
			var s float64
			for i, o := range out {
				s += w[i] * o
			}
			return s
		}
		g := make([]float64, n)
		penaltyGradKernel(g, lp, ref, k)
		for i := range g {
			if k == Full {
				g[i] *= w[i/v]
			} else {
				g[i] *= w[i]
			}
		}
		gradcheck.Check(t, k.String(), f, lp, g, 1e-6, 1e-6, 1e-7)

		// The float32 public API agrees with the float64 kernel.
		lp32, ref32 := make([]float32, n), make([]float32, n)
		for i := range n {
			lp32[i], ref32[i] = float32(lp[i]), float32(ref[i])
		}
		shape := []int{rows}
		if k == Full {
			shape = []int{rows, v}
		}
		// PenaltyBackward with DPenalty = w gives w ⊙ d penalty / d lp, the gradient of f.
		w32 := make([]float32, len(w))
		for i, x := range w {
			w32[i] = float32(x)
		}
		w32[2] = 0 // a masked token: exactly 0 whatever the derivative
		g32 := make([]float32, n)
		in := PenaltyGrad{LogProbs: mustT(t, lp32, shape...), Ref: mustT(t, ref32, shape...), DPenalty: mustT(t, w32, rows), Kind: k}
		require.NoError(t, PenaltyBackward(mustT(t, g32, shape...), in))
		for i := range n {
			j := i
			if k == Full {
				j = i / v
			}
			want := g[i]
			if j == 2 {
				want = 0
			}
			assert.InDelta(t, want, g32[i], 1e-5*(1+math.Abs(want)), "%v[%d]", k, i)
		}
	}
}

// derivative is PenaltyBackward with d loss / d penalty = 1: the elementwise derivative itself.
func derivative(dst, lp, ref *tensor.Tensor, k Kind) error {
	ones, err := tensor.New(lp.Backend(), tensor.Float32, penaltyShape(lp, k)...)
	if err != nil {
		return err
	}
	o, _ := ones.Float32s()
	for i := range o {
		o[i] = 1
	}
	return PenaltyBackward(dst, PenaltyGrad{LogProbs: lp, Ref: ref, DPenalty: ones, Kind: k})
}

func TestPenaltyBackwardClampEnds(t *testing.T) {
	// ref - lp exactly 20: the x clamp is inclusive, but y = exp(20)-21 > 10 clamps → 0.
	// y exactly at the clamp cannot be hit in float32; check the x clamp alone via values.
	lp := []float32{0, 0, 0, 0}
	ref := []float32{20, -20, -21, 1}
	g := make([]float32, 4)
	require.NoError(t, derivative(mustT(t, g), mustT(t, lp), mustT(t, ref), LowVarKL))
	assert.Equal(t, float32(0), g[0]) // y clamped
	// x = -20: y = exp(-20)+19 > 10 → 0 as well.
	assert.Equal(t, float32(0), g[1])
	assert.Equal(t, float32(0), g[2])
	assert.InDelta(t, 1-math.E, g[3], 1e-6)
	// abs at 0 has gradient 0.
	require.NoError(t, derivative(mustT(t, g[:1]), mustT(t, []float32{1}), mustT(t, []float32{1}), Abs))
	assert.Equal(t, float32(0), g[0])
}

func TestInputsUnchanged(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	lp := logSoftmaxRows(r, 6, 4)
	ref := logSoftmaxRows(r, 6, 4)
	lp0, ref0 := slices.Clone(lp), slices.Clone(ref)
	for _, k := range allKinds {
		shape, dshape := []int{6, 4}, []int{6, 4}
		if k == Full {
			shape, dshape = []int{2, 3, 4}, []int{2, 3}
		}
		dst := make([]float32, 24)
		require.NoError(t, Penalty(mustT(t, dst[:tensor.Shape(dshape).NumElements()], dshape...), mustT(t, lp, shape...), mustT(t, ref, shape...), k))
		require.NoError(t, derivative(mustT(t, dst, shape...), mustT(t, lp, shape...), mustT(t, ref, shape...), k))
		assert.Equal(t, lp0, lp)
		assert.Equal(t, ref0, ref)
	}
	dst := make([]float32, 24)
	require.NoError(t, PerceptionScore(mustT(t, dst), mustT(t, lp), mustT(t, ref)))
	assert.Equal(t, lp0, lp)
	assert.Equal(t, ref0, ref)
}

func TestPenaltyAliasing(t *testing.T) {
	lp := []float32{-1, -2, -3}
	ref := []float32{-2, -2, -1}
	require.NoError(t, Penalty(mustT(t, lp), mustT(t, lp), mustT(t, ref), MSE))
	assert.Equal(t, []float32{0.5, 0, 2}, lp)
}

func TestPenaltyBadInputs(t *testing.T) {
	f := func(shape ...int) *tensor.Tensor {
		return mustT(t, make([]float32, tensor.Shape(shape).NumElements()), shape...)
	}
	i32 := tensor.Must(tensor.FromInt32(make([]int32, 6), 2, 3))
	cases := []struct {
		name, arg string
		err       error
		call      func() error
	}{
		{"unknown kind", "kind", tensor.ErrParam, func() error { return Penalty(f(2, 3), f(2, 3), f(2, 3), Kind(7)) }},
		{"ref shape", "ref", tensor.ErrShape, func() error { return Penalty(f(2, 3), f(2, 3), f(3, 2), KL) }},
		{"dst shape", "dst", tensor.ErrShape, func() error { return Penalty(f(2, 2), f(2, 3), f(2, 3), KL) }},
		{"nil dst", "dst", tensor.ErrShape, func() error { return Penalty(nil, f(2, 3), f(2, 3), KL) }},
		{"nil logp", "logp", tensor.ErrShape, func() error { return Penalty(f(2, 3), nil, f(2, 3), KL) }},
		{"dtype", "logp", tensor.ErrDType, func() error { return Penalty(f(2, 3), i32, f(2, 3), KL) }},
		{"full dst", "dst", tensor.ErrShape, func() error { return Penalty(f(2, 3), f(2, 3), f(2, 3), Full) }},
		{"full V=0", "logp", tensor.ErrShape, func() error { return Penalty(f(2, 3), f(2, 3, 0), f(2, 3, 0), Full) }},
		{"backward dlogp", "dlogp", tensor.ErrShape, func() error {
			return PenaltyBackward(f(2, 3), PenaltyGrad{LogProbs: f(2, 3, 4), Ref: f(2, 3, 4), DPenalty: f(2, 3), Kind: Full})
		}},
		{"backward kind", "kind", tensor.ErrParam, func() error {
			return PenaltyBackward(f(2), PenaltyGrad{LogProbs: f(2), Ref: f(2), DPenalty: f(2), Kind: Kind(-1)})
		}},
		{"backward nil DPenalty", "DPenalty", tensor.ErrShape, func() error {
			return PenaltyBackward(f(2), PenaltyGrad{LogProbs: f(2), Ref: f(2)})
		}},
		{"backward DPenalty shape", "DPenalty", tensor.ErrShape, func() error {
			return PenaltyBackward(f(2, 3, 4), PenaltyGrad{LogProbs: f(2, 3, 4), Ref: f(2, 3, 4), DPenalty: f(2, 3, 4), Kind: Full})
		}},
		{"score shape", "aug", tensor.ErrShape, func() error { return PerceptionScore(f(2, 3), f(2, 3), f(2, 4)) }},
		{"score dst", "dst", tensor.ErrShape, func() error { return PerceptionScore(f(3), f(2, 3), f(2, 3)) }},
		{"score dtype", "old", tensor.ErrDType, func() error { return PerceptionScore(f(2, 3), i32, i32) }},
	}
	for _, c := range cases {
		err := c.call()
		require.Error(t, err, c.name)
		assert.True(t, errors.Is(err, c.err), "%s: %v", c.name, err)
		assert.True(t, strings.HasPrefix(err.Error(), "divergence."), "%s: %v", c.name, err)
		var te *tensor.Error
		require.True(t, errors.As(err, &te), c.name)
		assert.Equal(t, c.arg, te.Arg, c.name)
	}
}

func TestPenaltyEmpty(t *testing.T) {
	e := mustT(t, []float32{}, 0, 5)
	require.NoError(t, Penalty(e, e, e, LowVarKL))
	require.NoError(t, PerceptionScore(e, e, e))
	require.NoError(t, Penalty(mustT(t, []float32{}, 0), e, e, Full))
}
