package hflm

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/tensor"
)

// bench05B is Qwen2.5-0.5B-Instruct's shapes with random weights (hidden 896, 24 layers, 14
// heads, 2 KV heads, intermediate 4864, vocabulary 151936, tied), built once per test binary;
// HFLM_BENCH_LAYERS overrides the number of layers. scripts/hf_torch_twin.py bench measures
// the same two things with PyTorch.
var bench05B = sync.OnceValues(func() (*Model, error) {
	data, err := os.ReadFile(filepath.Join("..", "hfmodel", "testdata", "qwen2.5-0.5b-instruct-config.json"))
	if err != nil {
		return nil, err
	}
	cfg, err := hfmodel.ParseConfig(data)
	if err != nil {
		return nil, err
	}
	if s := os.Getenv("HFLM_BENCH_LAYERS"); s != "" {
		if cfg.NumHiddenLayers, err = strconv.Atoi(s); err != nil {
			return nil, err
		}
	}
	ck, err := hfmodel.RandomCheckpoint(cfg, 1)
	if err != nil {
		return nil, err
	}
	return Load(ck)
})

func benchTokens(n int, vocab int) []int32 {
	r := rand.New(rand.NewPCG(1, 2))
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(r.IntN(vocab))
	}
	return ids
}

// BenchmarkForward05B is the full forward of one sequence of 256 tokens, logits included.
func BenchmarkForward05B(b *testing.B) {
	m, err := bench05B()
	require.NoError(b, err)
	ids := benchTokens(256, m.Config.VocabSize)
	b.ResetTimer()
	for range b.N {
		if _, err := m.Logits(ids); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(ids))/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkDecode05B is batched greedy decoding with the cache: 8 rows after 32-token prompts,
// 16 steps timed (the prefill is not), the LM head and the argmax included.
func BenchmarkDecode05B(b *testing.B) {
	m, err := bench05B()
	require.NoError(b, err)
	const rows, prompt, steps = 8, 32, 16
	ids := benchTokens(rows*prompt, m.Config.VocabSize)
	prompts := make([][]int32, rows)
	for i := range prompts {
		prompts[i] = ids[i*prompt : (i+1)*prompt]
	}
	v := m.Config.VocabSize
	var decoded int
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		in, err := m.packSeqs(prompts)
		require.NoError(b, err)
		cache := m.newCache(rows, prompt+steps)
		a, err := m.forwardCached(in, cache)
		require.NoError(b, err)
		last := make([]int, rows)
		lens := make([]int32, rows)
		for i := range last {
			last[i], lens[i] = in.starts[i+1]-1, prompt
		}
		hidden := m.gatherRows(a.hidden, last)
		logits, lv := f32(rows, v)
		next := make([]int32, rows)
		sp := &sampler{}
		b.StartTimer()
		for range steps {
			if err := tensor.Linear(logits, hidden, m.head); err != nil {
				b.Fatal(err)
			}
			for i := range next {
				next[i] = sp.sample(lv[i*v:(i+1)*v], Sampling{}, nil)
			}
			if hidden, err = m.decodeStep(next, lens, nil, cache); err != nil {
				b.Fatal(err)
			}
			for i := range lens {
				lens[i]++
			}
			decoded += rows
		}
	}
	b.ReportMetric(float64(decoded)/b.Elapsed().Seconds(), "tokens/s")
}
