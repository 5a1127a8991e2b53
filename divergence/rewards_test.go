package divergence

import (
	"errors"
	"math"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRewards(t *testing.T) {
	s := []float32{1, 0, 0, 0.5}
	lp := []float32{-1, -2, -1, -1}
	ref := []float32{-1.5, -1, -1, -3}
	dst := make([]float32, 4)
	require.NoError(t, Rewards(mustT(t, dst, 2, 2), mustT(t, s, 2, 2), mustT(t, lp, 2, 2), mustT(t, ref, 2, 2), 0.1))
	want := []float32{1 - 0.5*float32(0.1), 0 + 1*float32(0.1), 0, 0.5 - 2*float32(0.1)}
	assert.Equal(t, want, dst)
	// klRatio 0 returns the scores; aliasing dst with scores works.
	require.NoError(t, Rewards(mustT(t, s), mustT(t, s), mustT(t, lp), mustT(t, ref), 0))
	assert.Equal(t, []float32{1, 0, 0, 0.5}, s)
	assert.Equal(t, []float32{-1, -2, -1, -1}, lp)
}

func TestRewardsBadInputs(t *testing.T) {
	f := func(n ...int) *tensor.Tensor { return mustT(t, make([]float32, tensor.Shape(n).NumElements()), n...) }
	cases := []struct {
		arg  string
		kind error
		err  error
	}{
		{"logp", tensor.ErrShape, Rewards(f(2, 3), f(2, 3), f(3, 2), f(2, 3), 1)},
		{"ref", tensor.ErrShape, Rewards(f(2, 3), f(2, 3), f(2, 3), f(6), 1)},
		{"dst", tensor.ErrShape, Rewards(f(2, 2), f(2, 3), f(2, 3), f(2, 3), 1)},
		{"scores", tensor.ErrDType, Rewards(f(2), tensor.Must(tensor.FromInt32([]int32{1, 2})), f(2), f(2), 1)},
		{"klRatio", tensor.ErrParam, Rewards(f(2), f(2), f(2), f(2), float32(math.NaN()))},
	}
	for _, c := range cases {
		require.Error(t, c.err, c.arg)
		assert.ErrorIs(t, c.err, c.kind)
		var te *tensor.Error
		require.True(t, errors.As(c.err, &te))
		assert.Equal(t, "divergence.Rewards", te.Op)
		assert.Equal(t, c.arg, te.Arg)
	}
}
