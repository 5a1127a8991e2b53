package loop_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/tprl/loop"
)

func TestAdamW(t *testing.T) {
	w := []float32{1, -2}
	g := []float32{0.5, 0.5}
	o := loop.NewAdamW([]int{2}, 0.9, 0.999, 1e-8, 0.1)
	require.NoError(t, o.Update([][]float32{w}, [][]float32{g}, []bool{true}, 0.01))
	// First step: m̂ = g, v̂ = g², so the update is lr * sign(g) (+ decay).
	assert.InDelta(t, 1*(1-0.001)-0.01, w[0], 1e-6)
	assert.InDelta(t, -2*(1-0.001)-0.01, w[1], 1e-6)
	assert.Error(t, o.Update([][]float32{w}, nil, []bool{true}, 0.01))
}

func TestClipGradNorm(t *testing.T) {
	g := [][]float32{{3}, {4}}
	n := loop.ClipGradNorm(g, 1)
	assert.InDelta(t, 5, n, 1e-12)
	assert.InDelta(t, 0.6, g[0][0], 1e-5)
	assert.InDelta(t, 0.8, g[1][0], 1e-5)
	h := [][]float32{{float32(math.NaN())}, {1}}
	assert.True(t, math.IsNaN(loop.ClipGradNorm(h, 1)))
	assert.Equal(t, float32(1), h[1][0], "untouched")
}
