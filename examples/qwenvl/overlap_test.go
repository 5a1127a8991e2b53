package qwenvl

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/tensor"
)

// TestReportFinal: with the tower trained, the policy's backward reports every language-model
// gradient once, each unchanged after its report (the tower's backward, which runs after the
// language model's, leaves them alone), and no tower gradient; the gradients, on a second
// micro-batch that accumulates, are those of a backward without the hook.
func TestReportFinal(t *testing.T) {
	g := readModelGolden(t)
	c := g.Cases[0]
	m := loadCase(t, filepath.Join("testdata", c.Config), c.Seed, c.DType, c.Layout)
	s := goldenSample(g, m, c.IDs)
	d := make([]float32, g.Completion)
	for i := range d {
		d[i] = float32(math.Cos(0.7 * float64(i)))
	}
	backward := func() {
		sc, err := m.Score([]Sample{s}, []int{g.Completion}, 1, true)
		require.NoError(t, err)
		require.NoError(t, sc.Backward([][]float32{d}, nil))
	}
	ps, err := m.Params()
	require.NoError(t, err)
	grads := func() [][]float32 {
		var out [][]float32
		for _, p := range ps {
			out = append(out, append([]float32(nil), host(p.Grad)...))
		}
		return out
	}
	zero := func() {
		for _, p := range ps {
			clear(host(p.Grad))
		}
	}
	zero()
	backward()
	backward()
	want := grads()
	zero()
	backward()
	seen := map[*tensor.Tensor][]float32{}
	policy := &Policy[Sample]{Model: m}
	require.True(t, policy.ReportFinal(func(gs ...*tensor.Tensor) {
		for _, g := range gs {
			_, dup := seen[g]
			require.False(t, dup, "reported twice")
			seen[g] = append([]float32(nil), host(g)...)
		}
	}))
	backward()
	policy.ReportFinal(nil)
	assert.Equal(t, want, grads())
	lm, err := m.LM.Params()
	require.NoError(t, err)
	require.Len(t, seen, len(lm))
	require.Greater(t, len(ps), len(lm), "the tower is trained")
	for i, p := range ps {
		v, ok := seen[p.Grad]
		if i >= len(lm) {
			require.False(t, ok, "tower gradient %s reported", p.Name)
			continue
		}
		require.True(t, ok, "%s not reported", p.Name)
		require.Equal(t, want[i], v, "%s changed after it was reported", p.Name)
	}
}
