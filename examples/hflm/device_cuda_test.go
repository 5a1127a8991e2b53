//go:build cuda

package hflm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/examples/internal/devicetest"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/stretchr/testify/require"
)

// The model on the CUDA backend (under scripts/cuda-emu, the CPU emulation of the driver)
// against the same model on the CPU. The device's GEMMs (cuBLAS) and attention sum in other
// orders than the host's kernels, so results agree to float32 rounding, not bit for bit: the
// tolerances below are a few hundred ulp of the values compared, far below any real defect
// (a wrong weight, mask or position moves them by 1e-2 or more).

// device opens CUDA device 0, or skips (fails under MTRL_REQUIRE_CUDA=1).
func device(t testing.TB) *cuda.Backend {
	t.Helper()
	b, err := cuda.New(0)
	if err != nil {
		if os.Getenv("MTRL_REQUIRE_CUDA") == "1" {
			t.Fatalf("MTRL_REQUIRE_CUDA=1 and cuda.New(0): %v", err)
		}
		t.Skipf("SKIP: no CUDA device: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// loadPair loads the tiny random checkpoint of cfgFile (seed) on the CPU and on b.
func loadPair(t *testing.T, b tensor.Backend, cfgFile string, seed uint64) (cpu, dev *Model) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", cfgFile))
	require.NoError(t, err)
	cfg, err := hfmodel.ParseConfig(data)
	require.NoError(t, err)
	ck, err := hfmodel.RandomCheckpoint(cfg, seed)
	require.NoError(t, err)
	cpu, err = Load(ck)
	require.NoError(t, err)
	dev, err = LoadOn(ck, b)
	require.NoError(t, err)
	require.Equal(t, b, dev.Backend())
	return cpu, dev
}

// closeTo is the examples' shared device-against-CPU comparison.
var closeTo = devicetest.CloseTo

// downloaded is a tensor's values on the host.
var downloaded = devicetest.Downloaded

// TestCUDALogits: the full forward's logits of every test configuration (untied and tied
// Qwen2, Llama with linear rope scaling, GQA) on the device equal the CPU's within 1e-5 of
// their scale (observed on the emulator: 2.5e-7).
func TestCUDALogits(t *testing.T) {
	b := device(t)
	for _, cfg := range []string{"qwen2-untied.json", "qwen2-tied.json", "llama-linear.json"} {
		t.Run(cfg, func(t *testing.T) {
			cpu, dev := loadPair(t, b, cfg, 5)
			toks := []int32{1, 17, 4, 90, 33, 2, 61, 8, 8, 40}
			want, err := cpu.Logits(toks)
			require.NoError(t, err)
			got, err := dev.Logits(toks)
			require.NoError(t, err)
			require.False(t, got.IsHost())
			t.Logf("largest relative difference %.3g", closeTo(t, "logits", downloaded(t, got), host(want), 1e-5))
		})
	}
}

// TestCUDALoRAGradients: a LoRA training pass (every projection, dropout 0.2 from the same
// seed: the masks are drawn on the host) scores the same log-probs and entropies on the
// device and gives the same adapter gradients within 1e-5 of their scale (observed on the
// emulator: 3e-7); with activation
// checkpointing the device's gradients are its own without, bit for bit. Full fine-tuning's
// gradients (every weight) too.
func TestCUDALoRAGradients(t *testing.T) {
	b := device(t)
	prompts := [][]int32{{1, 5, 9}, {4, 90, 2, 33}, {7}}
	comps := [][]int32{{3, 4, 5, 6}, {8, 9}, {11, 12, 13}}
	dl := [][]float32{{0.1, -0.2, 0.3, 0.05}, {-0.4, 0.2}, {0.3, 0.1, -0.1}}
	de := [][]float32{{0.01, 0.02, -0.03, 0.05}, {0.04, -0.2}, {0, 0.1, 0.2}}
	pass := func(m *Model) (lp, ent []float32, grads map[string][]float32) {
		s, err := m.Score(prompts, comps, 0.9, true)
		require.NoError(t, err)
		for i := range prompts {
			lp, ent = append(lp, s.LogProbs[i]...), append(ent, s.Entropy[i]...)
		}
		require.NoError(t, s.Backward(dl, de))
		ps, err := m.Params()
		require.NoError(t, err)
		grads = map[string][]float32{}
		for _, p := range ps {
			grads[p.Name] = append([]float32(nil), downloaded(t, p.Grad)...) // a copy: ZeroGrads follows
		}
		require.NoError(t, m.ZeroGrads())
		return lp, ent, grads
	}
	for _, lora := range []bool{true, false} {
		t.Run(map[bool]string{true: "lora", false: "full"}[lora], func(t *testing.T) {
			cpu, dev := loadPair(t, b, "qwen2-untied.json", 9)
			if lora {
				for _, m := range []*Model{cpu, dev} {
					require.NoError(t, m.AddLoRA(LoRAConfig{Rank: 3, Alpha: 6, Dropout: 0.2, TargetModules: []string{"all-linear"}, Seed: 4}))
					for i, ad := range m.adapters {
						bv := make([]float32, ad.b.Len())
						for j := range bv {
							bv[j] = float32(0.05 * math.Sin(float64(7*i+j)))
						}
						require.NoError(t, tensor.CopyInto(ad.b, tensor.Must(tensor.FromFloat32(bv, ad.b.Shape()...))))
					}
					require.NoError(t, m.Repack())
				}
			}
			lpC, entC, gC := pass(cpu)
			st, err := dev.DropoutState()
			require.NoError(t, err)
			lpD, entD, gD := pass(dev)
			closeTo(t, "logprobs", lpD, lpC, 1e-5)
			closeTo(t, "entropy", entD, entC, 1e-5)
			worst := 0.0
			for name, g := range gC {
				worst = max(worst, closeTo(t, name, gD[name], g, 1e-5))
			}
			t.Logf("%d gradients; largest relative difference %.3g", len(gC), worst)
			if lora {
				dev.SetCheckpointing(true)
				require.NoError(t, dev.SetDropoutState(st)) // the same masks
				_, _, gK := pass(dev)
				for name, g := range gD {
					require.Equal(t, g, gK[name], "checkpointing changed %s", name)
				}
			}
		})
	}
}

// TestCUDAGenerate: greedy decoding with the key/value cache gives the CPU's tokens on the
// device, rows of different lengths stopping at their own stop token; sampling with the same
// random sources too (the device's logits come to the host sampler, and these seeds draw no
// uniform within float32 rounding of a boundary).
func TestCUDAGenerate(t *testing.T) {
	b := device(t)
	for _, cfg := range []string{"qwen2-tied.json", "llama-linear.json"} {
		t.Run(cfg, func(t *testing.T) {
			cpu, dev := loadPair(t, b, cfg, 3)
			prompts := [][]int32{{1, 5, 9}, {4, 90, 2, 33, 17, 8, 3}, {7}}
			for _, s := range []Sampling{
				{MaxNewTokens: 8, Stop: []int32{2}},
				{MaxNewTokens: 8, Temperature: 0.9, TopP: 0.95, TopK: 30},
			} {
				rngs := func() []*rand.Rand {
					return []*rand.Rand{rand.New(rand.NewPCG(1, 1)), rand.New(rand.NewPCG(2, 2)), rand.New(rand.NewPCG(3, 3))}
				}
				want, err := cpu.Generate(prompts, s, rngs())
				require.NoError(t, err)
				got, err := dev.Generate(prompts, s, rngs())
				require.NoError(t, err)
				require.Equal(t, want, got, "temperature %v", s.Temperature)
			}
		})
	}
}

// TestCUDATrainAndExport: three AdamW steps of LoRA on the device (DeviceTraining) follow the
// CPU's (Training) within 1e-4 of the adapters' scale (the adapters' gradients are far from
// zero, unlike a full model's embedding rows: see TestCUDAFullTraining); SaveLoRA and Checkpoint download the
// device's adapters and merged weights, which a CPU load of the saved adapter reproduces.
// TestCUDAFullTraining: three full fine-tuning steps (tied embeddings): the device's log-probs
// and every weight's gradient are the CPU's within 1e-5 of their scale at each step, and
// DeviceAdamW (tensor.ClipGradNorm and tensor.AdamWStep on the device) given the CPU's
// gradients takes the host AdamW's step within 1e-6.
func TestCUDAFullTraining(t *testing.T) {
	b := device(t)
	cpu, dev := loadPair(t, b, "qwen2-tied.json", 13)
	hostOpt, _, err := cpu.Training(0.01)
	require.NoError(t, err)
	devOpt, _, err := dev.DeviceTraining(0.01)
	require.NoError(t, err)
	prompts := [][]int32{{1, 5, 9}, {4, 90, 2, 33}}
	comps := [][]int32{{3, 4, 5, 6}, {8, 9}}
	dl := [][]float32{{0.1, -0.2, 0.3, 0.05}, {-0.4, 0.2}}
	for step := range 3 {
		var lps [2][]float32
		for k, m := range []*Model{cpu, dev} {
			s, err := m.Score(prompts, comps, 1, true)
			require.NoError(t, err)
			lps[k] = append(s.LogProbs[0], s.LogProbs[1]...)
			require.NoError(t, s.Backward(dl, nil))
		}
		closeTo(t, fmt.Sprint("logprobs at step ", step), lps[1], lps[0], 1e-5)
		hps, _ := cpu.Params()
		dps, _ := dev.Params()
		for i := range hps {
			closeTo(t, fmt.Sprint("grad ", hps[i].Name, " at step ", step), downloaded(t, dps[i].Grad), host(hps[i].Grad), 1e-5)
		}
		// The optimizers from the same gradients: AdamW divides by √v + eps, so a gradient
		// within float32 rounding of zero (a sum that cancels) moves its weight by up to lr
		// either way; the step itself is checked on the host's gradients.
		for i := range hps {
			require.NoError(t, tensor.CopyInto(dps[i].Grad, hps[i].Grad))
		}
		nh, err := hostOpt.Step(1e-2, 1)
		require.NoError(t, err)
		nd, err := devOpt.Step(1e-2, 1)
		require.NoError(t, err)
		require.InDelta(t, nh, nd, 1e-6*(1+nh))
		for i := range hps {
			closeTo(t, fmt.Sprint(hps[i].Name, " after step ", step), downloaded(t, dps[i].Value), host(hps[i].Value), 1e-6)
			require.NoError(t, tensor.CopyInto(dps[i].Value, hps[i].Value)) // the same start for the next step
		}
		require.NoError(t, dev.Repack())
	}
}

func TestCUDATrainAndExport(t *testing.T) {
	b := device(t)
	cpu, dev := loadPair(t, b, "qwen2-untied.json", 13)
	lc := LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj", "v_proj", "down_proj"}, Seed: 8}
	require.NoError(t, cpu.AddLoRA(lc))
	require.NoError(t, dev.AddLoRA(lc))
	_, _, err := dev.Training(0.01)
	require.ErrorContains(t, err, "DeviceTraining")
	hostOpt, _, err := cpu.Training(0.01)
	require.NoError(t, err)
	devOpt, devGrads, err := dev.DeviceTraining(0.01)
	require.NoError(t, err)
	prompts := [][]int32{{1, 5, 9}, {4, 90, 2, 33}}
	comps := [][]int32{{3, 4, 5, 6}, {8, 9}}
	dl := [][]float32{{0.1, -0.2, 0.3, 0.05}, {-0.4, 0.2}}
	for range 3 {
		for _, m := range []*Model{cpu, dev} {
			s, err := m.Score(prompts, comps, 1, true)
			require.NoError(t, err)
			require.NoError(t, s.Backward(dl, nil))
		}
		_, err := devGrads.Reduce(t.Context(), nil, 0.5)
		require.NoError(t, err)
		hps, _ := cpu.Params()
		for _, p := range hps {
			g, _ := p.Grad.Float32s()
			for i := range g {
				g[i] *= 0.5
			}
		}
		nh, err := hostOpt.Step(1e-2, 1)
		require.NoError(t, err)
		nd, err := devOpt.Step(1e-2, 1)
		require.NoError(t, err)
		require.InDelta(t, nh, nd, 1e-4*(1+nh))
	}
	hps, _ := cpu.Params()
	dps, _ := dev.Params()
	for i := range hps {
		closeTo(t, hps[i].Name, downloaded(t, dps[i].Value), host(hps[i].Value), 1e-4)
		closeTo(t, "grad "+hps[i].Name, downloaded(t, dps[i].Grad), host(hps[i].Grad), 0) // zeroed
	}
	require.NoError(t, devOpt.SaveMoments())
	for i := range hps {
		closeTo(t, "exp_avg "+hps[i].Name, devOpt.M[i], hostOpt.M[i], 1e-3)
	}
	// The device's adapter, saved and loaded on the CPU, is the device's weights exactly.
	dir := t.TempDir()
	require.NoError(t, dev.SaveLoRA(dir, "base"))
	back, _ := loadPair(t, b, "qwen2-untied.json", 13)
	require.NoError(t, back.LoadLoRA(dir))
	bps, _ := back.Params()
	for i := range bps {
		require.Equal(t, downloaded(t, dps[i].Value), host(bps[i].Value), bps[i].Name)
	}
	ckD, err := dev.Checkpoint(nil)
	require.NoError(t, err)
	ckB, err := back.Checkpoint(nil)
	require.NoError(t, err)
	for _, name := range []string{"model.layers.0.self_attn.q_proj.weight", "model.layers.2.mlp.down_proj.weight", "model.norm.weight"} {
		closeTo(t, name, ckD.Tensor(name).Float32s(), ckB.Tensor(name).Float32s(), 1e-6)
	}
}
