package vlm

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/tensor"
)

// TestReportFinal: Backward reports every parameter's gradient exactly once, and each holds
// at the end of the backward the values it held when reported (the rest of the backward left
// it alone); the gradients equal those of a backward without the hook, and it is the
// accumulation of a second pass that is reported, not the first's.
func TestReportFinal(t *testing.T) {
	c := Config{ImageSize: 8, PatchSize: 2, Channels: 3, Vocab: 37, Dim: 32, Layers: 3, Heads: 2, MLPDim: 64, MaxLen: 6}
	m, err := New(c, 3)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(5, 6))
	const b, l = 3, 6
	img, tok := randImages(rng, c, b), randTokens(rng, c, b, l)
	dl := make([]float32, b*l*c.Vocab)
	for i := range dl {
		dl[i] = float32(rng.NormFloat64())
	}
	backward := func() {
		_, act, err := m.Forward(img, tok)
		require.NoError(t, err)
		require.NoError(t, m.Backward(act, tensor.Must(tensor.FromFloat32(dl, b, l, c.Vocab))))
	}
	grads := func() [][]float32 {
		var out [][]float32
		for _, p := range m.Params() {
			g, err := p.G.Float32s()
			require.NoError(t, err)
			out = append(out, append([]float32(nil), g...))
		}
		return out
	}
	m.ZeroGrad()
	backward()
	backward()
	want := grads()

	m.ZeroGrad()
	backward() // a first micro-batch, not reported
	seen := map[*tensor.Tensor][]float32{}
	var order []*tensor.Tensor
	require.True(t, m.ReportFinal(func(gs ...*tensor.Tensor) {
		for _, g := range gs {
			v, err := g.Float32s()
			require.NoError(t, err)
			_, dup := seen[g]
			require.False(t, dup, "reported twice")
			seen[g], order = append([]float32(nil), v...), append(order, g)
		}
	}))
	backward()
	require.True(t, m.ReportFinal(nil))
	assert.Equal(t, want, grads())
	require.Len(t, seen, len(m.Params()))
	for i, p := range m.Params() {
		v, ok := seen[p.G]
		require.True(t, ok, "%s not reported", p.Name)
		require.Equal(t, want[i], v, "%s changed after it was reported", p.Name)
	}
	// The last block's first, the embeddings last.
	assert.Same(t, m.host.g.headW, order[0])
	assert.Same(t, m.host.g.blocks[c.Layers-1].ln1G, order[4])
	assert.Same(t, m.host.g.tokPos, order[len(order)-1])
}
