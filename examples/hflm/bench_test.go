package hflm

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/internal/cputime"
	"github.com/mtrl-go/mtrl/tensor"
)

// The benchmarks run Qwen2.5-0.5B-Instruct's shapes with random weights (hidden 896, 24
// layers, 14 heads, 2 KV heads, intermediate 4864, vocabulary 151936, tied);
// HFLM_BENCH_LAYERS overrides the number of layers. Each reports tokens/s (wall) and
// tokens/cpu-s (the process's CPU time); scripts/hflm-vs-torch runs them interleaved with
// scripts/hf_torch_twin.py compare, which measures the same rows with PyTorch.

var (
	benchMu    sync.Mutex
	benchModel *Model
)

// bench05B returns the model, built once per process: bfloat16 random weights (the
// checkpoint's dtype; loaded as float32) made one tensor at a time, so building holds no
// float32 copy of the whole checkpoint. BenchmarkLoRA05B adds adapters to it, so it runs last.
func bench05B(tb testing.TB) *Model {
	benchMu.Lock()
	defer benchMu.Unlock()
	if benchModel == nil {
		benchModel = build05B(tb)
	}
	return benchModel
}

func build05B(tb testing.TB) *Model {
	data, err := os.ReadFile(filepath.Join("..", "hfmodel", "testdata", "qwen2.5-0.5b-instruct-config.json"))
	require.NoError(tb, err)
	cfg, err := hfmodel.ParseConfig(data)
	require.NoError(tb, err)
	if s := os.Getenv("HFLM_BENCH_LAYERS"); s != "" {
		cfg.NumHiddenLayers, err = strconv.Atoi(s)
		require.NoError(tb, err)
	}
	var ts []*hfmodel.Tensor
	for _, s := range hfmodel.ExpectedTensors(cfg) {
		h := fnv.New64a()
		h.Write([]byte(s.Name))
		rng := rand.New(rand.NewPCG(1, h.Sum64()))
		n := 1
		for _, d := range s.Shape {
			n *= d
		}
		vals := make([]float32, n)
		offset := float32(0)
		if strings.HasSuffix(s.Name, "norm.weight") {
			offset = 1
		}
		for i := range vals {
			vals[i] = offset + float32(rng.NormFloat64()*cfg.InitializerRange)
		}
		t, err := hfmodel.NewTensor(s.Name, s.Shape, vals, hfmodel.BFloat16)
		require.NoError(tb, err)
		ts = append(ts, t)
	}
	ck, err := hfmodel.NewCheckpoint(cfg, hfmodel.NewGenerationConfig(cfg), ts)
	require.NoError(tb, err)
	m, err := Load(ck)
	require.NoError(tb, err)
	return m
}

// benchLoRA is the LoRA the RL benchmarks train: rank 16, alpha 32, dropout 0.05, every
// projection (PEFT's all-linear).
var benchLoRA = LoRAConfig{Rank: 16, Alpha: 32, Dropout: 0.05, TargetModules: []string{"all-linear"}, Seed: 1}

func benchTokens(n int, vocab int) []int32 {
	r := rand.New(rand.NewPCG(1, 2))
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(r.IntN(vocab))
	}
	return ids
}

// cpuClock measures the process's CPU time over the timed parts of a benchmark.
type cpuClock struct {
	total time.Duration
	t0    time.Duration
}

func (c *cpuClock) start() { c.t0, _ = cputime.Process() }
func (c *cpuClock) stop() {
	t1, _ := cputime.Process()
	c.total += t1 - c.t0
}

func reportTokens(b *testing.B, tokens int, cpu *cpuClock) {
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
	if cpu.total > 0 {
		b.ReportMetric(float64(tokens)/cpu.total.Seconds(), "tokens/cpu-s")
	}
}

// BenchmarkForward05B is the full forward of one sequence of 256 tokens, logits included.
func BenchmarkForward05B(b *testing.B) {
	m := bench05B(b)
	ids := benchTokens(256, m.Config.VocabSize)
	var cpu cpuClock
	b.ResetTimer()
	cpu.start()
	for range b.N {
		if _, err := m.Logits(ids); err != nil {
			b.Fatal(err)
		}
	}
	cpu.stop()
	reportTokens(b, b.N*len(ids), &cpu)
}

// BenchmarkDecode05B is batched greedy decoding with the cache: 8 rows after 32-token prompts,
// 16 steps timed (the prefill is not), the LM head and the argmax included.
func BenchmarkDecode05B(b *testing.B) {
	m := bench05B(b)
	const rows, prompt, steps = 8, 32, 16
	ids := benchTokens(rows*prompt, m.Config.VocabSize)
	prompts := make([][]int32, rows)
	for i := range prompts {
		prompts[i] = ids[i*prompt : (i+1)*prompt]
	}
	v := m.Config.VocabSize
	var decoded int
	var cpu cpuClock
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		in, err := m.packSeqs(prompts)
		require.NoError(b, err)
		cache, err := m.newCache(rows, prompt+steps)
		require.NoError(b, err)
		a, err := m.forwardCached(in, cache)
		require.NoError(b, err)
		lens := make([]int32, rows)
		for i := range lens {
			lens[i] = prompt
		}
		hidden, err := m.lastHidden(a, in)
		require.NoError(b, err)
		logits, lv := f32(rows, v)
		next := make([]int32, rows)
		sp := &sampler{}
		b.StartTimer()
		cpu.start()
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
		cpu.stop()
	}
	reportTokens(b, decoded, &cpu)
}

// BenchmarkLoRA05B is a LoRA training pass over one sequence of 256 tokens: the forward keeping
// the activations, the log-probs of tokens 1…255 through the fused LM head, and the backward
// of their sum into the adapters' gradients.
func BenchmarkLoRA05B(b *testing.B) {
	m := bench05B(b)
	if m.lora == nil {
		require.NoError(b, m.AddLoRA(benchLoRA))
	}
	ids := benchTokens(256, m.Config.VocabSize)
	dlp := make([]float32, len(ids)-1)
	for i := range dlp {
		dlp[i] = 1
	}
	var cpu cpuClock
	b.ResetTimer()
	cpu.start()
	for range b.N {
		s, err := m.Score([][]int32{ids[:1]}, [][]int32{ids[1:]}, 1, true)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Backward([][]float32{dlp}, nil); err != nil {
			b.Fatal(err)
		}
	}
	cpu.stop()
	reportTokens(b, b.N*len(ids), &cpu)
}

// BenchmarkLoRA05BMixed is BenchmarkLoRA05B in bf16 mode (SetMixedPrecision(BFloat16)), with
// the backward's gradients float32 ("bf16") and rounded to bfloat16 ("bf16-grad",
// SetBF16Backward: the frozen base's dx and the head's products on VDPBF16PS). It leaves the
// shared model in bf16 mode, so it runs last.
func BenchmarkLoRA05BMixed(b *testing.B) {
	m := bench05B(b)
	if m.lora == nil {
		require.NoError(b, m.AddLoRA(benchLoRA))
	}
	require.NoError(b, m.SetMixedPrecision(tensor.BFloat16))
	for _, grad := range []bool{false, true} {
		b.Run(map[bool]string{false: "bf16", true: "bf16-grad"}[grad], func(b *testing.B) {
			m.SetBF16Backward(grad)
			BenchmarkLoRA05B(b)
		})
	}
}

// The RL step of TestRLStepPeak: rollout.n = 4 completions of 64 new tokens for each of 2
// prompts of 64 tokens, sampled at temperature 1; the reference (the adapters off) scores
// them; the policy trains in micro-batches of 2 rows; one AdamW step on the adapters.
const (
	rlPrompts, rlN, rlPromptLen, rlNew, rlMicro = 2, 4, 64, 64, 2
)

// TestRLStepPeak measures the peak resident memory of one LoRA RL step at Qwen2.5-0.5B's
// shapes when HFLM_RLSTEP is set (a measurement of several GB, run alone: scripts/hflm-vs-torch
// rlstep). The peak is the kernel's VmHWM, reset after the model is built (the step's own peak)
// and over the whole process; it prints one JSON line.
func TestRLStepPeak(t *testing.T) {
	if os.Getenv("HFLM_RLSTEP") == "" {
		t.Skip("HFLM_RLSTEP not set: a measurement of several GB")
	}
	m := build05B(t)
	require.NoError(t, m.AddLoRA(benchLoRA))
	opt, _, err := m.Training(0.01)
	require.NoError(t, err)
	runtime.GC()
	debug.FreeOSMemory()
	built := vmKB(t, "VmHWM")
	resetHWM(t)
	cpu0, _ := cputime.Process()
	t0 := time.Now()
	ids := benchTokens(rlPrompts*rlPromptLen, m.Config.VocabSize)
	var prompts [][]int32
	var rngs []*rand.Rand
	for i := range rlPrompts * rlN {
		p := i / rlN
		prompts = append(prompts, ids[p*rlPromptLen:(p+1)*rlPromptLen])
		rngs = append(rngs, rand.New(rand.NewPCG(uint64(i), 5)))
	}
	comps, err := m.Generate(prompts, Sampling{MaxNewTokens: rlNew, Temperature: 1, TopP: 1}, rngs)
	require.NoError(t, err)
	ref, err := m.Base().Score(prompts, comps, 1, false)
	require.NoError(t, err)
	tokens := 0
	for _, c := range comps {
		tokens += len(c)
	}
	for lo := 0; lo < len(prompts); lo += rlMicro {
		s, err := m.Score(prompts[lo:lo+rlMicro], comps[lo:lo+rlMicro], 1, true)
		require.NoError(t, err)
		// GRPO's token-mean loss at ratio 1: d loss/d logp = -advantage / tokens, with the
		// divergence's gradient from the reference (k3: 1 - exp(ref - logp)) at coefficient 0.04.
		dlp := make([][]float32, rlMicro)
		for i := range dlp {
			adv := float32(1 - 2*float64((lo+i)%2))
			dlp[i] = make([]float32, len(s.LogProbs[i]))
			for j, lp := range s.LogProbs[i] {
				r := ref.LogProbs[lo+i][j] - lp
				dlp[i][j] = (-adv + 0.04*(1-exp32(r))) / float32(tokens)
			}
		}
		require.NoError(t, s.Backward(dlp, nil))
	}
	_, err = opt.Step(1e-5, 1)
	require.NoError(t, err)
	wall := time.Since(t0)
	cpu1, _ := cputime.Process()
	out, _ := json.Marshal(map[string]any{
		"side": "go", "row": "rlstep", "rows": len(prompts), "tokens": rlPromptLen*len(prompts) + tokens,
		"step_peak_bytes": vmKB(t, "VmHWM") * 1024, "process_peak_bytes": max(built, vmKB(t, "VmHWM")) * 1024,
		"step_s": wall.Seconds(), "step_cpu_s": (cpu1 - cpu0).Seconds(),
		"gomemlimit": os.Getenv("GOMEMLIMIT"),
	})
	fmt.Println(string(out))
}

func exp32(x float32) float32 {
	return float32(math.Exp(float64(x)))
}

// vmKB reads a field of /proc/self/status in kB.
func vmKB(t *testing.T, field string) int {
	data, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			require.NoError(t, err)
			return kb
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// resetHWM resets the kernel's peak resident set size (VmHWM) to the current one.
func resetHWM(t *testing.T) {
	require.NoError(t, os.WriteFile("/proc/self/clear_refs", []byte("5"), 0))
}
