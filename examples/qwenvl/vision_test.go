package qwenvl

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/tensor"
)

// TestVisionFiniteDifferences checks the tower's backward against central differences of its
// forward: for L = Σ r·features (r fixed), each weight tensor moved along its own gradient
// g/|g| changes L at the rate |g|. The forward is float32 and L is summed in float64, so the
// step is 1e-2 and the tolerance 1% of |g| (measured ≤ 0.35%); the golden test compares the
// gradients with the float64 twin to 1e-4. The gated MLP with another activation than SiLU
// (its own path: the activation, then the product) is checked too.
func TestVisionFiniteDifferences(t *testing.T) {
	for _, c := range []struct {
		cfg string
		act tensor.Activation // 0: the config's
	}{{"qwen2-vl.json", 0}, {"qwen2.5-vl.json", 0}, {"qwen2.5-vl.json", tensor.GELU}} {
		name := c.cfg
		if c.act != 0 {
			name += "/" + c.act.String()
		}
		t.Run(name, func(t *testing.T) {
			m := loadCase(t, filepath.Join("testdata", "models", c.cfg), 11, "float32", "legacy")
			v := m.Vision
			if c.act != 0 {
				v.cfg.Act = c.act
			}
			p := testPatches([][3]int{{1, 4, 6}, {2, 4, 4}}, v.cfg.PatchDim())
			out, a, err := v.Forward(p.Values, p.Grids, true)
			require.NoError(t, err)
			r := make([]float32, out.Len())
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range r {
				r[i] = float32(rng.NormFloat64())
			}
			dOut, _ := f32(out.Shape()...)
			copy(host(dOut), r)
			require.NoError(t, v.Backward(a, dOut))
			loss := func() float64 {
				o, _, err := v.Forward(p.Values, p.Grids, false)
				require.NoError(t, err)
				l := 0.0
				for i, x := range host(o) {
					l += float64(r[i]) * float64(x)
				}
				return l
			}
			const eps = 1e-2
			worst := 0.0
			for _, prm := range v.params {
				g, w := host(prm.grad), host(prm.value)
				norm := 0.0
				for _, x := range g {
					norm += float64(x) * float64(x)
				}
				norm = math.Sqrt(norm)
				require.Positive(t, norm, prm.name)
				orig := slices.Clone(w)
				step := func(s float64) float64 {
					for j := range w {
						w[j] = orig[j] + float32(s*float64(g[j])/norm)
					}
					require.NoError(t, v.Repack())
					return loss()
				}
				fd := (step(eps) - step(-eps)) / (2 * eps)
				copy(w, orig)
				require.NoError(t, v.Repack())
				require.InDelta(t, norm, fd, 0.01*norm, "%s: |g| = %g, central difference %g", prm.name, norm, fd)
				worst = max(worst, math.Abs(fd-norm)/norm)
			}
			t.Logf("largest relative difference %.2g over %d weights", worst, len(v.params))
		})
	}
}

// TestGenerateMatchesFullForward checks cached generation with M-RoPE decoding positions
// (each prompt's rope delta) against greedy decoding by full forwards, for a batch of a
// multimodal prompt and a text-only one of another length.
func TestGenerateMatchesFullForward(t *testing.T) {
	g := readModelGolden(t)
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			m := loadCase(t, filepath.Join("testdata", c.Config), c.Seed, c.DType, c.Layout)
			// Sharpen the attention so that the rotary positions decide the greedy tokens.
			for l := range m.Config.Text.NumHiddenLayers {
				for _, proj := range []string{"q_proj", "k_proj"} {
					w := host(m.LM.Weight(fmt.Sprintf("model.layers.%d.self_attn.%s.weight", l, proj)))
					for j := range w {
						w[j] *= 12
					}
				}
			}
			require.NoError(t, m.LM.Repack())
			samples := []Sample{goldenSample(g, m, c.IDs[:len(c.IDs)-g.Completion]), {IDs: []int32{1, 9, 33, 4}}}
			const n = 8
			got, err := m.Generate(samples, hflm.Sampling{MaxNewTokens: n, TopP: 1}, nil)
			require.NoError(t, err)
			for i, s := range samples {
				var want []int32
				for range n {
					lg, err := m.Logits(s)
					require.NoError(t, err)
					v := m.Config.Text.VocabSize
					row := host(lg)[(len(s.IDs)-1)*v : len(s.IDs)*v]
					best := 0
					for j, z := range row {
						if z > row[best] {
							best = j
						}
					}
					want = append(want, int32(best))
					s.IDs = append(slices.Clone(s.IDs), int32(best))
				}
				require.Equal(t, want, got[i], "sample %d", i)
			}
		})
	}
}

// TestTextOnlyIsPlainRoPE: on text alone every M-RoPE axis has the same position, so the VL
// model's logits are those of its language model loaded as a plain Qwen2 (bit for bit).
func TestTextOnlyIsPlainRoPE(t *testing.T) {
	cfg, err := LoadConfigFile(filepath.Join("testdata", "models", "qwen2-vl.json"))
	require.NoError(t, err)
	ck := RandomCheckpoint(cfg, 6)
	m, err := Load(ck)
	require.NoError(t, err)
	var text []*hfmodel.Tensor
	for _, s := range hfmodel.ExpectedTensors(cfg.Text) {
		tt, err := hfmodel.NewTensor(s.Name, s.Shape, ck.Weights[s.Name], hfmodel.Float32)
		require.NoError(t, err)
		text = append(text, tt)
	}
	tck, err := hfmodel.NewCheckpoint(cfg.Text, nil, text)
	require.NoError(t, err)
	lm, err := hflm.Load(tck)
	require.NoError(t, err)
	ids := []int32{1, 9, 33, 4, 70, 2}
	got, err := m.Logits(Sample{IDs: ids})
	require.NoError(t, err)
	want, err := lm.Logits(ids)
	require.NoError(t, err)
	require.Equal(t, host(want), host(got))
}
