package qwenvl

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/examples/hfmodel"
)

// modelGolden is testdata/model_golden.json, written by scripts/qwen2vl_torch_twin.py from the
// random checkpoints `hf init` makes (loadCase makes the same ones).
type modelGolden struct {
	ImageGrids [][3]int `json:"image_grids"`
	VideoGrids [][3]int `json:"video_grids"`
	Completion int      `json:"completion"`
	Cases      []struct {
		Name          string      `json:"name"`
		Config        string      `json:"config"`
		Seed          uint64      `json:"seed"`
		Layout        string      `json:"layout"`
		DType         string      `json:"dtype"`
		IDs           []int32     `json:"ids"`
		ImageFeatures [][]float64 `json:"image_features"`
		VideoFeatures [][]float64 `json:"video_features"`
		Positions     [][]int64   `json:"positions"`
		RopeDelta     int64       `json:"rope_delta"`
		Logits        [][]float64 `json:"logits"`
		LogP          []float64   `json:"logp"`
		Grads         map[string]struct {
			Norm  float64   `json:"norm"`
			Dot   float64   `json:"dot"`
			First []float64 `json:"first"`
		} `json:"grads"`
	} `json:"cases"`
}

func readModelGolden(t *testing.T) *modelGolden {
	data, err := os.ReadFile(filepath.Join("testdata", "model_golden.json"))
	require.NoError(t, err)
	var g modelGolden
	require.NoError(t, json.Unmarshal(data, &g))
	require.NotEmpty(t, g.Cases)
	return &g
}

// loadCase makes the checkpoint `hf init -config -seed -dtype -layout` writes, saves it and
// loads it back through LoadDir.
func loadCase(t testing.TB, cfgFile string, seed uint64, dtype, layout string) *Model {
	cfg, err := LoadConfigFile(cfgFile)
	require.NoError(t, err)
	dt, err := hfmodel.ParseDType(dtype)
	require.NoError(t, err)
	l := map[string]Layout{"legacy": LayoutLegacy, "nested": LayoutNested}[layout]
	dir := t.TempDir()
	require.NoError(t, RandomCheckpoint(cfg, seed).Save(dir, dt, l))
	m, err := LoadDir(dir)
	require.NoError(t, err)
	return m
}

// testPixels is the twin's pixel formula: ((7919 i + 13) mod 2001 − 1000) / 500 in float32.
func testPixels(rows, cols int) []float32 {
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = float32(float64((i*7919+13)%2001-1000) / 500)
	}
	return v
}

func testPatches(grids [][3]int, cols int) Patches {
	p := Patches{Cols: cols}
	for _, g := range grids {
		p.Grids = append(p.Grids, Grid{T: g[0], H: g[1], W: g[2]})
		p.Rows += g[0] * g[1] * g[2]
	}
	p.Values = testPixels(p.Rows, cols)
	return p
}

func goldenSample(g *modelGolden, m *Model, ids []int32) Sample {
	cols := m.Config.Vision.PatchDim()
	return Sample{IDs: ids, Images: testPatches(g.ImageGrids, cols), Videos: testPatches(g.VideoGrids, cols)}
}

func requireClose(t *testing.T, name string, want [][]float64, got []float32, tol float64) {
	t.Helper()
	worst, at := 0.0, 0
	k := 0
	for _, row := range want {
		for _, w := range row {
			if d := math.Abs(w - float64(got[k])); d > worst {
				worst, at = d, k
			}
			k++
		}
	}
	require.Equal(t, k, len(got), "%s: element count", name)
	require.LessOrEqual(t, worst, tol, "%s: largest difference at flat index %d", name, at)
	t.Logf("%s: max |Δ| = %.3g", name, worst)
}

// TestModelGolden compares the tower's features, the M-RoPE positions and the logits with the
// PyTorch twin in float32 (≤ 1e-4; the tower's features and the logits are measured).
func TestModelGolden(t *testing.T) {
	g := readModelGolden(t)
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			m := loadCase(t, filepath.Join("testdata", c.Config), c.Seed, c.DType, c.Layout)
			s := goldenSample(g, m, c.IDs)
			img, _, err := m.Vision.Forward(s.Images.Values, s.Images.Grids, false)
			require.NoError(t, err)
			requireClose(t, "image features", c.ImageFeatures, host(img), 1e-4)
			vid, _, err := m.Vision.Forward(s.Videos.Values, s.Videos.Grids, false)
			require.NoError(t, err)
			requireClose(t, "video features", c.VideoFeatures, host(vid), 1e-4)
			b, err := m.prepare([]Sample{s}, nil, false)
			require.NoError(t, err)
			for a := range 3 {
				want := make([]int32, len(c.Positions[a]))
				for i, p := range c.Positions[a] {
					want[i] = int32(p)
				}
				require.True(t, slices.Equal(want, b.in.Positions[a]), "axis %d", a)
			}
			require.Equal(t, int32(c.RopeDelta), b.deltas[0])
			lg, err := m.Logits(s)
			require.NoError(t, err)
			requireClose(t, "logits", c.Logits, host(lg), 1e-4)
		})
	}
}

// paramNames lists every weight of the model in the legacy layout.
func paramNames(m *Model) []string {
	var names []string
	for _, s := range expectedTensors(m.Config) {
		names = append(names, s.name)
	}
	return names
}

// TestModelGradGolden compares the log-probs of the completion and the gradient of
// Σ cos(0.7 i)·logp_i for every weight with the float64 twin, with the tower trained and
// frozen (then the tower has no gradients and the language model's are unchanged).
func TestModelGradGolden(t *testing.T) {
	g := readModelGolden(t)
	for _, c := range g.Cases {
		for _, frozen := range []bool{false, true} {
			name := c.Name + "/trained"
			if frozen {
				name = c.Name + "/frozen"
			}
			t.Run(name, func(t *testing.T) {
				m := loadCase(t, filepath.Join("testdata", c.Config), c.Seed, c.DType, c.Layout)
				m.Vision.Frozen = frozen
				s := goldenSample(g, m, c.IDs)
				sc, err := m.Score([]Sample{s}, []int{g.Completion}, 1, true)
				require.NoError(t, err)
				d := make([]float32, g.Completion)
				for i := range d {
					d[i] = float32(math.Cos(0.7 * float64(i)))
					require.InDelta(t, c.LogP[i], sc.LogProbs[0][i], 1e-5, "logp %d", i)
				}
				require.NoError(t, sc.Backward([][]float32{d}, nil))
				names := paramNames(m)
				require.Len(t, c.Grads, len(names))
				worst := 0.0 // the largest norm error relative to the twin's
				for _, name := range names {
					want, ok := c.Grads[name]
					require.True(t, ok, name)
					grad := m.Grad(name)
					if frozen && m.Vision.byName[name] != nil {
						require.Nil(t, grad, "%s has a gradient with the tower frozen", name)
						continue
					}
					require.NotNil(t, grad, name)
					gv := host(grad)
					norm, dot := 0.0, 0.0
					for j, x := range gv {
						norm += float64(x) * float64(x)
						dot += float64(x) * math.Cos(0.37*float64(j)+0.1)
					}
					norm = math.Sqrt(norm)
					require.Positive(t, want.Norm, name)
					worst = max(worst, math.Abs(norm-want.Norm)/want.Norm)
					tol := 1e-4*want.Norm + 1e-8
					require.InDelta(t, want.Norm, norm, tol, "%s norm", name)
					require.InDelta(t, want.Dot, dot, tol*math.Sqrt(float64(len(gv))), "%s projection", name)
					for j, w := range want.First {
						require.InDelta(t, w, float64(gv[j]), tol, "%s[%d]", name, j)
					}
				}
				t.Logf("largest relative gradient-norm difference %.2g", worst)
			})
		}
	}
}
