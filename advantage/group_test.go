package advantage

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/tensor"
)

type groupFn func(adv, ret, r, m, ids *tensor.Tensor) error

var groupFns = map[string]groupFn{
	"grpo": func(a, rt, r, m, ids *tensor.Tensor) error { return grpo(a, rt, r, m, ids, GRPOOptions{}) },
	"grpo_passk": func(a, rt, r, m, ids *tensor.Tensor) error {
		return grpoPassK(a, rt, r, m, ids, GRPOOptions{})
	},
	"rloo": func(a, rt, r, m, ids *tensor.Tensor) error { return rloo(a, rt, r, m, ids) },
	"grpo_floor_nostd": func(a, rt, r, m, ids *tensor.Tensor) error {
		return grpo(a, rt, r, m, ids, GRPOOptions{StdFloor: 0.5, NoStdNorm: true})
	},
}

func TestGRPOHandComputed(t *testing.T) {
	// Scores 1, 2, 3 (group 7) and 0, 4 (group -2, interleaved), one reward on a padded position.
	r := t32(t, []float32{
		1, 0,
		0, 0,
		1, 1,
		3, 1, // padded second position still counts: score 4
		2, 1,
	}, 5, 2)
	m := t32(t, []float32{1, 1, 1, 0, 1, 1, 1, 0, 1, 1}, 5, 2)
	ids := i32(t, []int32{7, -2, 7, -2, 7})
	// group 7 scores 1, 2, 3: mean 2, std 1. group -2 scores 0, 4: mean 2, std 2.828427.
	adv, ret := zeros(t, 5, 2), zeros(t, 5, 2)
	require.NoError(t, grpo(adv, ret, r, m, ids, GRPOOptions{}))
	s2 := float32(math.Sqrt(8))
	want := []float32{
		-1 / (1 + 1e-6), -1 / (1 + 1e-6),
		-2 / (s2 + 1e-6), 0,
		0, 0,
		2 / (s2 + 1e-6), 0,
		1 / (1 + 1e-6), 1 / (1 + 1e-6),
	}
	assert.InDeltaSlice(t, want, data(t, adv), 1e-6)
	assert.Equal(t, data(t, adv), data(t, ret))

	// Dr.GRPO: no std division; a std floor of 2 only changes group 7.
	require.NoError(t, grpo(adv, nil, r, m, ids, GRPOOptions{NoStdNorm: true}))
	assert.InDeltaSlice(t, []float32{-1, -1, -2, 0, 0, 0, 2, 0, 1, 1}, data(t, adv), 1e-6)
	require.NoError(t, grpo(adv, nil, r, m, ids, GRPOOptions{StdFloor: 2, Eps: 1e-3}))
	want = []float32{
		-1 / 2.001, -1 / 2.001,
		-2 / (s2 + 1e-3), 0,
		0, 0,
		2 / (s2 + 1e-3), 0,
		1 / 2.001, 1 / 2.001,
	}
	assert.InDeltaSlice(t, want, data(t, adv), 1e-6)

	// Pass@k: only the arg-max row of each group: group 7 row 4: (3-2)/1, group -2 row 3: (4-0)/s2.
	require.NoError(t, grpoPassK(adv, ret, r, m, ids, GRPOOptions{}))
	assert.InDeltaSlice(t, []float32{0, 0, 0, 0, 0, 0, 4 / (s2 + 1e-6), 0, 1 / (1 + 1e-6), 1 / (1 + 1e-6)}, data(t, adv), 1e-6)
	// RLOO: group 7 row 0: 1 - (2+3)/2 = -1.5; group -2 row 1: 0 - 4 = -4.
	require.NoError(t, rloo(adv, ret, r, m, ids))
	assert.InDeltaSlice(t, []float32{-1.5, -1.5, -4, 0, 0, 0, 4, 0, 1.5, 1.5}, data(t, adv), 1e-6)
}

func TestPassKTiesAndNaN(t *testing.T) {
	// A tie at the maximum: r_max - r_2nd = 0, so the whole group is 0.
	r := t32(t, []float32{2, 5, 5, 1}, 4, 1)
	m := t32(t, []float32{1, 1, 1, 1}, 4, 1)
	adv := zeros(t, 4, 1)
	require.NoError(t, grpoPassK(adv, nil, r, m, i32(t, []int32{0, 0, 0, 0}), GRPOOptions{}))
	assert.Equal(t, []float32{0, 0, 0, 0}, data(t, adv))
	// NaN is the largest score (torch.topk): its row gets NaN, the others 0.
	nan := float32(math.NaN())
	adv = zeros(t, 3, 1)
	require.NoError(t, grpoPassK(adv, nil, t32(t, []float32{2, nan, 5}, 3, 1), t32(t, []float32{1, 1, 1}, 3, 1),
		i32(t, []int32{4, 4, 4}), GRPOOptions{}))
	got := data(t, adv)
	assert.Equal(t, float32(0), got[0])
	assert.True(t, math.IsNaN(float64(got[1])))
	assert.Equal(t, float32(0), got[2])
}

// Groups of equal scores give exactly 0 (never NaN), for many values and group sizes.
func TestGroupConstantRewardsGiveZeros(t *testing.T) {
	for _, val := range []float32{0, 1, 0.1, 1.0 / 3, -7.7, 1e-7, 12345.678} {
		for n := 2; n <= 9; n++ {
			b, l := 2*n, 5
			r := make([]float32, b*l)
			m := make([]float32, b*l)
			ids := make([]int32, b)
			for i := range b {
				r[i*l+i%l] = val // same score, different token positions
				for s := range l {
					m[i*l+s] = 1
				}
				ids[i] = int32(i % 2) // two interleaved groups of n
			}
			for name, f := range map[string]groupFn{"grpo": groupFns["grpo"], "grpo_passk": groupFns["grpo_passk"], "grpo_floor_nostd": groupFns["grpo_floor_nostd"]} {
				adv := zeros(t, b, l)
				require.NoError(t, f(adv, nil, t32(t, r, b, l), t32(t, m, b, l), i32(t, ids)))
				for i, x := range data(t, adv) {
					if x != 0 {
						t.Fatalf("%s val=%v n=%d: adv[%d] = %v, want 0", name, val, n, i, x)
					}
				}
			}
			adv := zeros(t, b, l)
			require.NoError(t, rloo(adv, nil, t32(t, r, b, l), t32(t, m, b, l), i32(t, ids)))
			for i, x := range data(t, adv) {
				if math.Abs(float64(x)) > 4e-7*math.Abs(float64(val))+1e-30 {
					t.Fatalf("rloo val=%v n=%d: adv[%d] = %v, want ~0", val, n, i, x)
				}
			}
		}
	}
}

// Non-contiguous, arbitrary int32 group ids give the same result as the permuted batch with
// contiguous ids; masked positions are 0; outputs are finite; returns equal adv.
func TestGroupPermutationInvariance(t *testing.T) {
	rng := newRand(6)
	const groups, g, l = 7, 5, 13
	b := groups * g
	x := randBatch(rng, b, l, g) // contiguous ids 0..6
	perm := rng.Perm(b)
	labels := []int32{math.MinInt32, -1, 0, 3, 1 << 20, math.MaxInt32, 42}
	pr := make([]float32, b*l)
	pm := make([]float32, b*l)
	pids := make([]int32, b)
	for j, i := range perm { // row j of the permuted batch is row i of the original
		copy(pr[j*l:(j+1)*l], x.r[i*l:(i+1)*l])
		copy(pm[j*l:(j+1)*l], x.m[i*l:(i+1)*l])
		pids[j] = labels[x.ids[i]]
	}
	for name, f := range groupFns {
		t.Run(name, func(t *testing.T) {
			a1, r1 := zeros(t, b, l), zeros(t, b, l)
			require.NoError(t, f(a1, r1, t32(t, x.r, b, l), t32(t, x.m, b, l), i32(t, x.ids)))
			a2 := zeros(t, b, l)
			require.NoError(t, f(a2, nil, t32(t, pr, b, l), t32(t, pm, b, l), i32(t, pids)))
			d1, d2 := data(t, a1), data(t, a2)
			assert.Equal(t, d1, data(t, r1))
			assert.True(t, allFinite(d1))
			for j, i := range perm {
				for s := range l {
					assert.InDelta(t, d1[i*l+s], d2[j*l+s], 1e-6*(1+math.Abs(float64(d1[i*l+s]))))
				}
			}
			for k, w := range x.m {
				if w == 0 {
					assert.Equal(t, float32(0), d1[k], "masked position %d", k)
				}
			}
		})
	}
}

func TestGroupOfOne(t *testing.T) {
	x := randBatch(newRand(7), 5, 3, 2) // ids 0 0 1 1 2: group 2 has one response
	r, _, m, _, ids := x.tensors(t)
	for name, f := range groupFns {
		err := f(zeros(t, 5, 3), nil, r, m, ids)
		require.ErrorIs(t, err, tensor.ErrParam, name)
		assert.Contains(t, err.Error(), "index", name)
		assert.Contains(t, err.Error(), "group 2 ", name)
	}
	// An arbitrary id is named too.
	err := grpo(zeros(t, 3, 3), nil, t32(t, x.r[:9], 3, 3), t32(t, x.m[:9], 3, 3), i32(t, []int32{-9, 5, -9}), GRPOOptions{})
	require.ErrorIs(t, err, tensor.ErrParam)
	assert.Contains(t, err.Error(), "group 5 ")
}

// TestGroupRowAdvantages checks the shared host plan of the group estimators: RLOO's
// leave-one-out baseline on two groups given out of order, and its errors.
func TestGroupRowAdvantages(t *testing.T) {
	a, err := GroupRowAdvantages([]float32{1, 10, 3, 20}, []int32{7, 9, 7, 9}, EstimatorRLOO, GRPOOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{-2, -10, 2, 10} // x - (sum - x)/(n-1) within each group
	for i := range want {
		if a[i] != want[i] {
			t.Fatalf("RLOO row advantages %v, want %v", a, want)
		}
	}
	for _, c := range []struct {
		scores []float32
		index  []int32
		est    Estimator
		want   error
	}{
		{[]float32{1, 2}, []int32{0}, EstimatorGRPO, tensor.ErrShape},
		{[]float32{1, 2}, []int32{0, 0}, EstimatorGAE, tensor.ErrParam},
		{[]float32{1, 2}, []int32{0, 1}, EstimatorGRPO, tensor.ErrParam}, // groups of one
	} {
		if _, err := GroupRowAdvantages(c.scores, c.index, c.est, GRPOOptions{}); !errors.Is(err, c.want) {
			t.Errorf("%v %v %v: %v, want %v", c.scores, c.index, c.est, err, c.want)
		}
	}
}
