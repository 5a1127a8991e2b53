package tprl

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/stretchr/testify/require"
)

func TestRandomMaskKeepsThePerceptionCount(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const rows, cols = 12, 37
	mask := f32(t, randMask(r, rows, cols), rows, cols)
	score := f32(t, randValues(r, rows*cols, true), rows, cols)
	m := host(t, mask)
	for _, p := range []float32{0, 0.05, 0.2, 0.4, 0.5, 0.99, 1} {
		rm, pm := zeros(t, rows, cols), zeros(t, rows, cols)
		rs, err := RandomMask(rm, mask, p, RandomKey{Seed: 1, Step: 2})
		require.NoError(t, err)
		ps, err := PerceptionMask(pm, score, mask, p)
		require.NoError(t, err)
		require.Equal(t, ps.Valid, rs.Valid)
		require.Equal(t, ps.Selected, rs.Selected, "p=%v", p)
		rh, ph := host(t, rm), host(t, pm)
		for i := range rows {
			var kr, kp int
			for j := range cols {
				if rh[i*cols+j] != 0 {
					require.Equal(t, float32(1), rh[i*cols+j])
					require.NotZero(t, m[i*cols+j], "row %d: padding selected", i)
					kr++
				}
				if ph[i*cols+j] != 0 {
					kp++
				}
			}
			require.Equal(t, kp, kr, "p=%v row %d", p, i)
		}
		if rs.Valid > 0 {
			require.Equal(t, map[string]float64{"actor/random_token_fraction": float64(rs.TokenFraction())}, rs.Metrics())
		}
	}
}

func TestRandomMaskSeeding(t *testing.T) {
	const rows, cols = 6, 40
	ones := make([]float32, rows*cols)
	for i := range ones {
		ones[i] = 1
	}
	mask := f32(t, ones, rows, cols)
	run := func(key RandomKey, m *tensor.Tensor) []float32 {
		dst := zeros(t, m.Dim(0), cols)
		_, err := RandomMask(dst, m, 0.25, key)
		require.NoError(t, err)
		return host(t, dst)
	}
	key := RandomKey{Seed: 7, Step: 3, FirstRow: 0}
	a := run(key, mask)
	require.Equal(t, a, run(key, mask), "not deterministic")
	// Rows with the same mask differ from each other, and from another step or seed.
	row := func(x []float32, i int) []float32 { return x[i*cols : (i+1)*cols] }
	for i := 1; i < rows; i++ {
		require.NotEqual(t, row(a, 0), row(a, i), "rows 0 and %d", i)
	}
	require.NotEqual(t, a, run(RandomKey{Seed: 7, Step: 4}, mask))
	require.NotEqual(t, a, run(RandomKey{Seed: 8, Step: 3}, mask))
	// A row's selection depends on its index in the step's batch, not on the split.
	tail := tensor.Must(mask.Rows(2, rows))
	require.Equal(t, a[2*cols:], run(RandomKey{Seed: 7, Step: 3, FirstRow: 2}, tail))
	// Over many rows every position is kept about equally often (p = 0.25: 10 of 40).
	const many = 4000
	big := make([]float32, many*cols)
	for i := range big {
		big[i] = 1
	}
	counts := make([]int, cols)
	b := run(RandomKey{Seed: 1}, f32(t, big, many, cols))
	for i, v := range b {
		if v != 0 {
			counts[i%cols]++
		}
	}
	for j, c := range counts { // expected 1000, s.d. ~27
		require.InDelta(t, many/4, c, 150, "position %d kept %d times", j, c)
	}
}

func TestRandomMaskErrors(t *testing.T) {
	mask, dst := zeros(t, 2, 3), zeros(t, 2, 3)
	_, err := RandomMask(dst, mask, 1.5, RandomKey{})
	require.True(t, errors.Is(err, tensor.ErrParam), "%v", err)
	_, err = RandomMask(dst, mask, 0.5, RandomKey{Step: -1})
	require.True(t, errors.Is(err, tensor.ErrParam), "%v", err)
	_, err = RandomMask(zeros(t, 3, 3), mask, 0.5, RandomKey{})
	require.True(t, errors.Is(err, tensor.ErrShape), "%v", err)
}

func TestConfigRandomFiltering(t *testing.T) {
	c := DefaultConfig()
	require.Equal(t, c.TopPPerceptionTokens, c.TopPRandomTokens)
	c.EnableRandomFiltering = true
	require.NoError(t, c.Validate())
	c.TopPRandomTokens = -0.1
	require.ErrorIs(t, c.Validate(), tensor.ErrParam)
	c.TopPRandomTokens = 0.3
	for _, other := range []func(*Config){
		func(c *Config) { c.EnablePerceptionFiltering = true },
		func(c *Config) { c.EnableEntropyFiltering = true },
	} {
		d := c
		other(&d)
		err := d.Validate()
		require.ErrorIs(t, err, tensor.ErrParam)
		require.Contains(t, err.Error(), "enable_random_filtering")
	}

	// Apply: the loss mask is the random mask, the same for any micro-batch split.
	r := rand.New(rand.NewPCG(5, 6))
	const rows, cols = 8, 20
	mask := f32(t, randMask(r, rows, cols), rows, cols)
	key := RandomKey{Seed: 2, Step: 9}
	whole, err := c.Apply(Batch{ResponseMask: mask, Random: key})
	require.NoError(t, err)
	require.Same(t, whole.RandomMask, whole.LossTokenMask)
	require.Len(t, whole.Metrics["actor/random_token_fraction"], 1)
	split, err := c.Apply(Batch{ResponseMask: mask, Random: key, MicroBatchSize: 3})
	require.NoError(t, err)
	require.Equal(t, host(t, whole.LossTokenMask), host(t, split.LossTokenMask))
	require.Len(t, split.Metrics["actor/random_token_fraction"], 3)
	want := zeros(t, rows, cols)
	_, err = RandomMask(want, mask, 0.3, key)
	require.NoError(t, err)
	require.Equal(t, host(t, want), host(t, whole.LossTokenMask))
}
