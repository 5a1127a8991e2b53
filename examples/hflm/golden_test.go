package hflm

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/internal/nnref"
)

// golden is testdata/golden.json, written by scripts/hf_torch_twin.py golden from the same
// random checkpoints (hf init) that loadCase makes.
type golden struct {
	Sequences   [][]int32 `json:"sequences"`
	Prompts     [][]int32 `json:"prompts"`
	Completions [][]int32 `json:"completions"`
	Temperature float32   `json:"temperature"`
	Cases       []struct {
		Name    string        `json:"name"`
		Config  string        `json:"config"`
		Seed    uint64        `json:"seed"`
		DType   string        `json:"dtype"`
		Shards  int           `json:"shards"`
		InvFreq []float64     `json:"inv_freq"`
		Logits  [][][]float64 `json:"logits"`
		LogP    []float64     `json:"logp"`
		Entropy []float64     `json:"entropy"`
		Grads   map[string]struct {
			Norm  float64   `json:"norm"`
			Dot   float64   `json:"dot"`
			First []float64 `json:"first"`
		} `json:"grads"`
	} `json:"cases"`
}

func readGolden(t *testing.T) *golden {
	data, err := os.ReadFile(filepath.Join("testdata", "golden.json"))
	require.NoError(t, err)
	var g golden
	require.NoError(t, json.Unmarshal(data, &g))
	require.NotEmpty(t, g.Cases)
	return &g
}

// loadCheckpoint makes the random checkpoint `hf init -config cfgFile -seed -dtype -shards`
// writes, saves it into a temporary directory and loads it back through hfmodel.Open.
func loadCheckpoint(t testing.TB, cfgFile string, seed uint64, dtype string, shards int) *Model {
	data, err := os.ReadFile(cfgFile)
	require.NoError(t, err)
	cfg, err := hfmodel.ParseConfig(data)
	require.NoError(t, err)
	ck, err := hfmodel.RandomCheckpoint(cfg, seed)
	require.NoError(t, err)
	dt, err := hfmodel.ParseDType(dtype)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, ck.Save(dir, hfmodel.SaveOptions{DType: dt, Shards: shards}))
	m, err := LoadDir(dir)
	require.NoError(t, err)
	return m
}

// TestGolden compares the model with the PyTorch twin of Hugging Face's modeling code: logits
// in float32 to 1e-4, and the float64 twin's log-probs, entropies and the gradient of every
// parameter of a loss of them (norm, projection on a fixed direction, first values).
func TestGolden(t *testing.T) {
	g := readGolden(t)
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			m := loadCheckpoint(t, filepath.Join("testdata", c.Config), c.Seed, c.DType, c.Shards)
			freq, err := RoPEFrequencies(m.Config)
			require.NoError(t, err)
			if freq == nil {
				for _, f := range nnref.DefaultRoPEFrequencies[float32](m.Config.HeadDim, m.Config.RopeTheta) {
					freq = append(freq, float64(f))
				}
			}
			require.Len(t, freq, len(c.InvFreq))
			for i := range freq {
				require.InDelta(t, c.InvFreq[i], freq[i], 1e-6*c.InvFreq[i], "inv_freq[%d]", i)
			}

			worst := 0.0
			for s, seq := range g.Sequences {
				lg, err := m.Logits(seq)
				require.NoError(t, err)
				v := host(lg)
				vocab := m.Config.VocabSize
				require.Len(t, c.Logits[s], len(seq))
				for p, row := range c.Logits[s] {
					require.Len(t, row, vocab)
					for j, want := range row {
						d := math.Abs(float64(v[p*vocab+j]) - want)
						worst = max(worst, d)
						require.LessOrEqual(t, d, 1e-4, "sequence %d position %d token %d: %v, twin %v", s, p, j, v[p*vocab+j], want)
					}
				}
			}
			t.Logf("largest logit difference %.2g", worst)

			sc, err := m.Score(g.Prompts, g.Completions, g.Temperature, true)
			require.NoError(t, err)
			var dlp, dent [][]float32
			k := 0
			for i, comp := range g.Completions {
				dlp, dent = append(dlp, make([]float32, len(comp))), append(dent, make([]float32, len(comp)))
				for j := range comp {
					dlp[i][j] = float32(math.Cos(0.7 * float64(k)))
					dent[i][j] = float32(math.Sin(0.3 * float64(k)))
					require.InDelta(t, c.LogP[k], sc.LogProbs[i][j], 1e-4, "logp %d", k)
					require.InDelta(t, c.Entropy[k], sc.Entropy[i][j], 1e-4, "entropy %d", k)
					k++
				}
			}
			require.NoError(t, sc.Backward(dlp, dent))
			require.Len(t, c.Grads, len(m.params))
			for _, p := range m.params {
				want, ok := c.Grads[p.name]
				require.True(t, ok, p.name)
				gv := host(p.grad)
				norm, dot := 0.0, 0.0
				for j, x := range gv {
					norm += float64(x) * float64(x)
					dot += float64(x) * math.Cos(0.37*float64(j)+0.1)
				}
				norm = math.Sqrt(norm)
				// float32 against float64 sums: a relative error of a few 1e-5 of the gradient's scale.
				tol := 1e-4*want.Norm + 1e-7
				require.InDelta(t, want.Norm, norm, tol, "%s norm", p.name)
				require.InDelta(t, want.Dot, dot, tol*math.Sqrt(float64(len(gv))), "%s projection", p.name)
				for j, w := range want.First {
					require.InDelta(t, w, float64(gv[j]), tol, "%s[%d]", p.name, j)
				}
			}
		})
	}
}
