package vlm

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/stretchr/testify/require"
)

// TestOpsModelHostMatchesModel: the op-by-op driver on HostOps gives Model's logits and
// gradients bit for bit (same kernels, same order), so any device op set checked per layer
// against HostOps is checked against the model.
func TestOpsModelHostMatchesModel(t *testing.T) {
	useReferenceKernels(t) // HostOps is the pure-Go reference; Model's SIMD kernels differ in the last bits
	c := tinyConfig()
	m, err := New(c, 5)
	require.NoError(t, err)
	om, err := NewOpsModel(m, HostOps{Config: c})
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	b, l := 3, 5
	img, tok := randImages(rng, c, b), randTokens(rng, c, b, l)
	want, act, err := m.Forward(img, tok)
	require.NoError(t, err)
	got, oact, err := om.Forward(img, tok)
	require.NoError(t, err)
	require.Equal(t, want.Shape(), got.Shape())
	wv, _ := want.Float32s()
	gv, _ := got.Float32s()
	require.Equal(t, wv, gv)
	dl := make([]float32, b*l*c.Vocab)
	for i := range dl {
		dl[i] = float32(rng.NormFloat64())
	}
	dlt := tensor.Must(tensor.FromFloat32(dl, b, l, c.Vocab))
	m.ZeroGrad()
	require.NoError(t, m.Backward(act, dlt))
	require.NoError(t, om.Backward(oact, dlt))
	for i, p := range m.Params() {
		a, _ := p.G.Float32s()
		o, _ := om.Params()[i].G.Float32s()
		for j := range a {
			if math.Float32bits(a[j]) != math.Float32bits(o[j]) {
				t.Fatalf("%s[%d]: ops %v, model %v", p.Name, j, o[j], a[j])
			}
		}
	}
}
