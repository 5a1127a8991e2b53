package advantage

import (
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/tensor"
)

func TestGAEHandComputed(t *testing.T) {
	// Row 0: a hole at t=1 carries (nv, lg) from t=2. Row 1: trailing padding at t=2.
	r := t32(t, []float32{1, 2, 3, 1, 2, 3}, 2, 3)
	v := t32(t, []float32{0.1, 0.2, 0.3, 0.1, 0.2, 0.3}, 2, 3)
	m := t32(t, []float32{1, 0, 1, 1, 1, 0}, 2, 3)
	adv, ret := zeros(t, 2, 3), zeros(t, 2, 3)
	require.NoError(t, gae(adv, ret, r, v, m, 1, 1))
	// Row 0 raw: t=2: 3-0.3 = 2.7; t=1 (hole): keeps 2.7; t=0: 1+0.3-0.1+2.7 = 3.9.
	// Row 1 raw: t=2: 0 (padding); t=1: 2-0.2 = 1.8; t=0: 1+0.2-0.1+1.8 = 2.9.
	raw := []float64{3.9, 2.7, 2.7, 2.9, 1.8, 0}
	want := []float64{4.0, 2.9, 3.0, 3.0, 2.0, 0.3}
	for i, g := range data(t, ret) {
		assert.InDelta(t, want[i], float64(g), 1e-5, "returns[%d]", i)
	}
	// Whitening over the 4 valid positions, applied everywhere.
	raw32 := make([]float32, len(raw))
	for i, x := range raw {
		raw32[i] = float32(x)
	}
	wantAdv := make([]float32, len(raw))
	hostops.MaskedWhiten(wantAdv, raw32, data(t, m))
	assert.InDeltaSlice(t, wantAdv, data(t, adv), 1e-4)
}

// With gamma = lam = 1 and no padding, raw GAE is the reward-to-go minus the values.
func TestGAEUndiscountedIsRewardToGo(t *testing.T) {
	x := randBatch(newRand(3), 6, 40, 1)
	for i := range x.m {
		x.m[i] = 1
	}
	r, v, m, _, _ := x.tensors(t)
	adv, ret := zeros(t, x.b, x.l), zeros(t, x.b, x.l)
	require.NoError(t, gae(adv, ret, r, v, m, 1, 1))
	raw := make([]float32, len(x.r))
	for i := range x.b {
		var rtg float64
		for s := x.l - 1; s >= 0; s-- {
			rtg += float64(x.r[i*x.l+s])
			assert.InDelta(t, rtg, float64(data(t, ret)[i*x.l+s]), 1e-4)
			raw[i*x.l+s] = float32(rtg - float64(x.v[i*x.l+s]))
		}
	}
	want := make([]float32, len(raw))
	hostops.MaskedWhiten(want, raw, x.m)
	assert.InDeltaSlice(t, want, data(t, adv), 1e-4)
}

// Returns are per row: a row's returns in a batch equal the returns of that row alone, bit for
// bit; padding after the last valid token gives returns = values; an empty row gives values.
func TestGAERowsIndependent(t *testing.T) {
	x := randBatch(newRand(4), 9, 17, 1)
	for t := range x.l { // row 0 empty
		x.m[t] = 0
	}
	r, v, m, _, _ := x.tensors(t)
	adv, ret := zeros(t, x.b, x.l), zeros(t, x.b, x.l)
	require.NoError(t, gae(adv, ret, r, v, m, 0.99, 0.95))
	for i := range x.b {
		lo, hi := i*x.l, (i+1)*x.l
		a1, r1 := zeros(t, 1, x.l), zeros(t, 1, x.l)
		require.NoError(t, gae(a1, r1, t32(t, x.r[lo:hi], 1, x.l), t32(t, x.v[lo:hi], 1, x.l), t32(t, x.m[lo:hi], 1, x.l), 0.99, 0.95))
		assert.Equal(t, data(t, r1), data(t, ret)[lo:hi], "row %d", i)
		last := -1
		for s := range x.l {
			if x.m[lo+s] != 0 {
				last = s
			}
		}
		for s := last + 1; s < x.l; s++ {
			assert.Equal(t, x.v[lo+s], data(t, ret)[lo+s], "row %d t %d after the last valid token", i, s)
		}
	}
}

func TestGAEDeterministicAndInputsUnchanged(t *testing.T) {
	x := randBatch(newRand(5), 96, 700, 1)
	r, v, m, _, _ := x.tensors(t)
	before := [][]float32{slices.Clone(x.r), slices.Clone(x.v), slices.Clone(x.m)}
	run := func(procs int) ([]float32, []float32) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		adv, ret := zeros(t, x.b, x.l), zeros(t, x.b, x.l)
		require.NoError(t, gae(adv, ret, r, v, m, 0.99, 0.95))
		return data(t, adv), data(t, ret)
	}
	a1, r1 := run(1)
	a4, r4 := run(4)
	assert.Equal(t, a1, a4)
	assert.Equal(t, r1, r4)
	assert.Equal(t, before, [][]float32{x.r, x.v, x.m})
	assert.True(t, allFinite(a1) && allFinite(r1))
}

func TestGAEEmptyBatch(t *testing.T) {
	for _, shape := range [][]int{{0, 5}, {3, 0}, {0, 0}} {
		e := zeros(t, shape...)
		require.NoError(t, gae(e, nil, e, e, e, 1, 1), "%v", shape)
		require.NoError(t, reinforcePlusPlus(e, e, e, e, 1), "%v", shape)
		require.NoError(t, reMax(e, e, e, e, zeros(t, shape[0])), "%v", shape)
	}
	e := zeros(t, 0, 5)
	require.NoError(t, grpo(e, e, e, e, i32(t, nil), GRPOOptions{}))
	require.NoError(t, Compute(e, Inputs{Rewards: e, ResponseMask: e, Index: i32(t, nil)}, Config{Estimator: EstimatorRLOO}))
	// T = 0 still checks the groups.
	e = zeros(t, 3, 0)
	require.ErrorIs(t, grpo(e, nil, e, e, i32(t, []int32{1, 1, 2}), GRPOOptions{}), tensor.ErrParam)
	require.NoError(t, grpo(e, nil, e, e, i32(t, []int32{1, 1, 1}), GRPOOptions{}))
}
