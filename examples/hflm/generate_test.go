package hflm

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/tensor"
)

var testConfigs = []string{"qwen2-untied.json", "../../hfmodel/testdata/tiny-llama-config.json", "llama-linear.json"}

// TestCacheEqualsFullForward decodes with the key/value cache (prefill of a packed batch of
// prompts of different lengths, then one token per row per step) and compares every step's
// logits with the full forward over the prompt and the tokens so far.
func TestCacheEqualsFullForward(t *testing.T) {
	for _, cfg := range testConfigs {
		t.Run(filepath.Base(cfg), func(t *testing.T) {
			m := loadCheckpoint(t, filepath.Join("testdata", cfg), 11, "float32", 1)
			prompts := [][]int32{{1, 5, 9}, {4, 90, 2, 33, 17, 8, 3}, {7}}
			steps := [][]int32{{12, 13, 14}, {20, 21, 22}, {30, 31, 32}, {40, 41, 42}, {50, 51, 52}}
			in, err := m.packSeqs(prompts)
			require.NoError(t, err)
			cache, err := m.newCache(len(prompts), 7+len(steps))
			require.NoError(t, err)
			a, err := m.forwardCached(in, cache)
			require.NoError(t, err)
			lens := make([]int32, len(prompts))
			for i, p := range prompts {
				lens[i] = int32(len(p))
			}
			hidden, err := m.lastHidden(a, in)
			require.NoError(t, err)
			seqs := prompts
			worst := 0.0
			for s := 0; ; s++ {
				logits, lv := f32(len(prompts), m.Config.VocabSize)
				require.NoError(t, tensor.Linear(logits, hidden, m.head))
				for i, seq := range seqs {
					full, err := m.Logits(seq)
					require.NoError(t, err)
					v := m.Config.VocabSize
					want := host(full)[(len(seq)-1)*v:]
					for j, w := range want {
						d := math.Abs(float64(lv[i*v+j] - w))
						worst = max(worst, d)
						require.LessOrEqual(t, d, 1e-5, "step %d row %d token %d", s, i, j)
					}
				}
				if s == len(steps) {
					break
				}
				hidden, err = m.decodeStep(steps[s], lens, nil, cache)
				require.NoError(t, err)
				for i := range seqs {
					seqs[i] = append(append([]int32(nil), seqs[i]...), steps[s][i])
					lens[i]++
				}
			}
			t.Logf("largest difference %.2g", worst)
		})
	}
}

// TestGenerateRows checks that a batch generates what each row generates alone (greedy and
// sampled from the row's own random source), that rows stop at their own stop tokens, and
// that greedy decoding follows the full forward's argmax.
func TestGenerateRows(t *testing.T) {
	m := loadCheckpoint(t, filepath.Join("testdata", "qwen2-untied.json"), 12, "bfloat16", 1)
	prompts := [][]int32{{1, 5, 9}, {4, 90, 2, 33, 17, 8, 3}, {7}, {60, 61}}
	for _, s := range []Sampling{
		{MaxNewTokens: 9, TopP: 1},
		{MaxNewTokens: 9, Temperature: 0.8, TopP: 0.9, TopK: 20},
		{MaxNewTokens: 9, Temperature: 1.3, TopP: 1},
	} {
		rngs := func() []*rand.Rand {
			var r []*rand.Rand
			for i := range prompts {
				r = append(r, rand.New(rand.NewPCG(uint64(i), 99)))
			}
			return r
		}
		batch, err := m.Generate(prompts, s, rngs())
		require.NoError(t, err)
		r := rngs()
		for i, p := range prompts {
			alone, err := m.Generate([][]int32{p}, s, r[i:i+1])
			require.NoError(t, err)
			require.Equal(t, alone[0], batch[i], "row %d, sampling %+v", i, s)
			require.Len(t, batch[i], s.MaxNewTokens)
		}
		if s.Temperature == 0 {
			for i, p := range prompts {
				full, err := m.Logits(append(append([]int32(nil), p...), batch[i][:len(batch[i])-1]...))
				require.NoError(t, err)
				v := m.Config.VocabSize
				for j, tok := range batch[i] {
					row := host(full)[(len(p)-1+j)*v : (len(p)+j)*v]
					best := 0
					for k, z := range row {
						if z > row[best] {
							best = k
						}
					}
					require.Equal(t, int32(best), tok, "row %d token %d", i, j)
				}
			}
			// each row stops at the first stop token it emits, which it keeps
			stop := []int32{batch[0][2], batch[1][4]}
			s.Stop = stop
			cut, err := m.Generate(prompts, s, nil)
			require.NoError(t, err)
			for i, row := range batch {
				n := len(row)
				for j, tok := range row {
					if tok == stop[0] || tok == stop[1] {
						n = j + 1
						break
					}
				}
				require.Equal(t, row[:n], cut[i], "row %d", i)
			}
		}
	}
}

func TestGenerateErrors(t *testing.T) {
	m := loadCheckpoint(t, filepath.Join("testdata", "qwen2-untied.json"), 12, "float32", 1)
	rng := []*rand.Rand{rand.New(rand.NewPCG(1, 1))}
	for _, c := range []struct {
		name    string
		prompts [][]int32
		s       Sampling
		rngs    []*rand.Rand
		kind    error
	}{
		{"no tokens", [][]int32{{1}}, Sampling{TopP: 1}, nil, tensor.ErrParam},
		{"top-p", [][]int32{{1}}, Sampling{MaxNewTokens: 1, Temperature: 1}, rng, tensor.ErrParam},
		{"temperature", [][]int32{{1}}, Sampling{MaxNewTokens: 1, TopP: 1, Temperature: math.NaN()}, nil, tensor.ErrParam},
		{"random sources", [][]int32{{1}, {2}}, Sampling{MaxNewTokens: 1, TopP: 1, Temperature: 1}, rng, tensor.ErrParam},
		{"empty prompt", [][]int32{{}}, Sampling{MaxNewTokens: 1, TopP: 1}, nil, tensor.ErrShape},
		{"id", [][]int32{{96}}, Sampling{MaxNewTokens: 1, TopP: 1}, nil, tensor.ErrParam},
		{"too long", [][]int32{{1}}, Sampling{MaxNewTokens: 128, TopP: 1}, nil, tensor.ErrParam},
	} {
		_, err := m.Generate(c.prompts, c.s, c.rngs)
		require.ErrorIs(t, err, c.kind, c.name)
	}
}
