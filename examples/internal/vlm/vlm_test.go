package vlm

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/mtrl-go/mtrl/internal/gradcheck"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/stretchr/testify/require"
)

func tinyConfig() Config {
	return Config{ImageSize: 4, PatchSize: 2, Channels: 3, Vocab: 11, Dim: 8, Layers: 2, Heads: 2, MLPDim: 12, MaxLen: 6}
}

func randImages(rng *rand.Rand, c Config, b int) *tensor.Tensor {
	px := make([]uint8, b*c.ImageSize*c.ImageSize*c.Channels)
	for i := range px {
		px[i] = uint8(rng.IntN(256))
	}
	return tensor.Must(tensor.FromUint8(px, b, c.ImageSize, c.ImageSize, c.Channels))
}

func randTokens(rng *rand.Rand, c Config, b, l int) *tensor.Tensor {
	ids := make([]int32, b*l)
	for i := range ids {
		ids[i] = int32(rng.IntN(c.Vocab))
	}
	return tensor.Must(tensor.FromInt32(ids, b, l))
}

// weights64 copies the model's weights to float64.
func weights64(m *Model) weights {
	var vals [][]float64
	for _, p := range m.Params() {
		w, _ := p.W.Float32s()
		v := make([]float64, len(w))
		for i, x := range w {
			v[i] = float64(x)
		}
		vals = append(vals, v)
	}
	return bind(m.Config, vals)
}

func zeros64(c Config) weights {
	var vals [][]float64
	for _, p := range specs(c) {
		n := 1
		for _, d := range p.shape {
			n *= d
		}
		vals = append(vals, make([]float64, n))
	}
	return bind(c, vals)
}

// TestGradientsFiniteDifferences checks every parameter's analytic gradient in the float64
// reference against central differences of loss = Σ logits ⊙ R.
func TestGradientsFiniteDifferences(t *testing.T) {
	c := tinyConfig()
	m, err := New(c, 7)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	const b, l = 2, 5
	img := randImages(rng, c, b)
	tok := randTokens(rng, c, b, l)
	px, _ := img.Uint8s()
	ids, _ := tok.Int32s()
	pv := patchVectors64(c, px, b)
	r := make([]float64, b*l*c.Vocab)
	for i := range r {
		r[i] = rng.NormFloat64()
	}
	w := weights64(m)
	loss := func() float64 {
		lg, _ := forward(c, &w, pv, ids, b, l)
		s := 0.0
		for i, v := range lg {
			s += v * r[i]
		}
		return s
	}
	_, a := forward(c, &w, pv, ids, b, l)
	g := zeros64(c)
	backward(c, &w, &g, a, r)
	sp := specs(c)
	gs := g.slots()
	for i, p := range w.slots() {
		x := *p
		gradcheck.Check(t, sp[i].name, func([]float64) float64 { return loss() }, x, *gs[i], 1e-6, 1e-5, 1e-7)
	}
}

// TestFloat32MatchesFloat64 checks Model.Forward/Backward (float32, the SDK's ops) against the
// float64 reference. The second size has rows and widths past the CPU GEMM's vector blocks.
func TestFloat32MatchesFloat64(t *testing.T) {
	wide := Config{ImageSize: 8, PatchSize: 2, Channels: 3, Vocab: 37, Dim: 32, Layers: 2, Heads: 2, MLPDim: 64, MaxLen: 6}
	for _, tc := range []struct {
		c Config
		b int
	}{{tinyConfig(), 3}, {wide, 8}} {
		checkFloat32MatchesFloat64(t, tc.c, tc.b)
	}
}

func checkFloat32MatchesFloat64(t *testing.T, c Config, b int) {
	m, err := New(c, 3)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(3, 4))
	const l = 6
	img := randImages(rng, c, b)
	tok := randTokens(rng, c, b, l)
	logits, act, err := m.Forward(img, tok)
	require.NoError(t, err)
	require.Equal(t, tensor.Shape{b, l, c.Vocab}, logits.Shape())
	r := make([]float32, b*l*c.Vocab)
	r64 := make([]float64, len(r))
	for i := range r {
		r[i] = float32(rng.NormFloat64())
		r64[i] = float64(r[i])
	}
	m.ZeroGrad()
	require.NoError(t, m.Backward(act, tensor.Must(tensor.FromFloat32(r, b, l, c.Vocab))))

	px, _ := img.Uint8s()
	ids, _ := tok.Int32s()
	w := weights64(m)
	lg64, a := forward(c, &w, patchVectors64(c, px, b), ids, b, l)
	lg32, _ := logits.Float32s()
	for i := range lg64 {
		require.InDelta(t, lg64[i], float64(lg32[i]), 1e-4*(1+math.Abs(lg64[i])))
	}
	g := zeros64(c)
	backward(c, &w, &g, a, r64)
	gs := g.slots()
	for i, p := range m.Params() {
		g32, _ := p.G.Float32s()
		for j, v := range *gs[i] {
			require.InDelta(t, v, float64(g32[j]), 1e-3*(1+math.Abs(v)), "%s[%d]", p.Name, j)
		}
	}
}

// TestDeterministicAcrossProcs checks that Forward and Backward give the same bits whatever
// GOMAXPROCS is.
func TestDeterministicAcrossProcs(t *testing.T) {
	c := Config{ImageSize: 8, PatchSize: 2, Channels: 3, Vocab: 37, Dim: 32, Layers: 2, Heads: 2, MLPDim: 64, MaxLen: 6}
	rng := rand.New(rand.NewPCG(5, 5))
	const b, l = 12, 6
	img, tok := randImages(rng, c, b), randTokens(rng, c, b, l)
	dl := make([]float32, b*l*c.Vocab)
	for i := range dl {
		dl[i] = float32(rng.NormFloat64())
	}
	run := func(procs int) ([]float32, [][]float32) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		m, err := New(c, 9)
		require.NoError(t, err)
		logits, act, err := m.Forward(img, tok)
		require.NoError(t, err)
		require.NoError(t, m.Backward(act, tensor.Must(tensor.FromFloat32(dl, b, l, c.Vocab))))
		lg, _ := logits.Float32s()
		var gs [][]float32
		for _, p := range m.Params() {
			g, _ := p.G.Float32s()
			gs = append(gs, g)
		}
		return lg, gs
	}
	l1, g1 := run(1)
	l4, g4 := run(4)
	require.Equal(t, l1, l4)
	require.Equal(t, g1, g4)
}

// TestAttentionSplit: the recorded attention of a text query splits into image and text mass
// that sum to 1, and a query attends text 0..t only.
func TestAttentionSplit(t *testing.T) {
	c := tinyConfig()
	m, err := New(c, 3)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 1))
	img := randImages(rng, c, 2)
	toks := tensor.Must(tensor.FromInt32([]int32{BOS, 4, 5, 6, BOS, 7, 8, 9}, 2, 4))
	_, act, err := m.Forward(img, toks)
	require.NoError(t, err)
	require.Equal(t, c.Layers, act.Layers())
	for l := range c.Layers {
		for r := range 2 {
			for q := range 4 {
				im, tx, ni, nt := act.Attention(l, r, q)
				require.InDelta(t, 1, im+tx, 1e-5)
				require.Equal(t, c.Patches(), ni)
				require.Equal(t, q+1, nt)
				require.Positive(t, im)
			}
		}
	}
}

// TestResponseAttention: ResponseAttention's sums (from log-sum-exp differences) match the
// float64 reference's, which sums its probability matrix's entries, overall and per group of
// blocks; they are Attention's masses divided by their keys added in block-then-query order;
// spans that do not fit the pass are refused.
func TestResponseAttention(t *testing.T) {
	c := tinyConfig()
	c.Layers = 4
	m, err := New(c, 3)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(2, 3))
	const b, l = 3, 6
	img := randImages(rng, c, b)
	toks := randTokens(rng, c, b, l)
	_, act, err := m.Forward(img, toks)
	require.NoError(t, err)
	plen, n := []int{1, 3, 2}, []int{6, 2, 0}
	const groups = 3
	got, err := act.ResponseAttention(plen, n, groups)
	require.NoError(t, err)

	px, _ := img.Uint8s()
	ids, _ := toks.Int32s()
	w := weights64(m)
	_, a := forward(c, &w, patchVectors64(c, px, b), ids, b, l)
	acc := make([]float64, b*(2+2*groups))
	for li := range c.Layers {
		attentionMassRef(c, b, c.Patches()+l, li*groups/c.Layers, groups, a.layers[li].p, plen, n, acc)
	}
	for r := range b {
		var text, vis float64
		gt, gv := make([]float64, groups), make([]float64, groups)
		for li := range c.Layers {
			g := li * groups / c.Layers
			for j := range n[r] {
				im, tx, ni, nt := act.Attention(li, r, plen[r]-1+j)
				pt, pv := tx/float64(nt), im/float64(ni)
				text, vis = text+pt, vis+pv
				gt[g], gv[g] = gt[g]+pt, gv[g]+pv
			}
		}
		want := AttentionSums{Text: text, Vision: vis, GroupText: gt, GroupVision: gv}
		require.Equal(t, want, got[r], "row %d", r) // float64 ==: the same bits
		ref := acc[r*(2+2*groups):][:2+2*groups]
		require.InDelta(t, ref[0], got[r].Text, 1e-5*(1+ref[0]), "row %d text", r)
		require.InDelta(t, ref[1], got[r].Vision, 1e-5*(1+ref[1]), "row %d vision", r)
		for g := range groups {
			require.InDelta(t, ref[2+2*g], got[r].GroupText[g], 1e-5, "row %d group %d text", r, g)
			require.InDelta(t, ref[3+2*g], got[r].GroupVision[g], 1e-5, "row %d group %d vision", r, g)
		}
		if n[r] > 0 {
			require.Positive(t, got[r].Text)
			require.Positive(t, got[r].Vision)
		}
	}
	_, err = act.ResponseAttention([]int{1, 3, 2}, []int{6, 5, 0}, groups) // 3−1+5 > 6
	require.Error(t, err)
	_, err = act.ResponseAttention([]int{0, 3, 2}, n, groups)
	require.Error(t, err)
	_, err = act.ResponseAttention(plen[:2], n[:2], groups)
	require.Error(t, err)
}
