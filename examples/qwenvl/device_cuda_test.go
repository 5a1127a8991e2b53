//go:build cuda

package qwenvl

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/internal/devicetest"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/stretchr/testify/require"
)

// The vision-language model on the CUDA backend (under scripts/cuda-emu, the CPU emulation of
// the driver) against the same model on the CPU, for both tiny checkpoints (Qwen2-VL: LayerNorm,
// QuickGELU; Qwen2.5-VL: RMSNorm, SiLU-gated MLP, window attention with a full-attention block
// and a partial window). The device's GEMMs and attention sum in other orders than the host's
// kernels, so results agree to float32 rounding, not bit for bit: the tolerances are those of
// hflm's device tests, a few hundred ulp of the values compared, far below any real defect (a
// wrong position, window, segment or scattered row moves them by 1e-2 or more).

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

// vlCases are the golden cases' configurations (the twin's checkpoints).
var vlCases = []string{"qwen2-vl.json", "qwen2.5-vl.json"}

// loadPair loads the tiny random checkpoint of cfgFile (seed; edit, when set, changes its
// weights first) on the CPU and on b.
func loadPair(t *testing.T, b tensor.Backend, cfgFile string, seed uint64, edit func(*Checkpoint)) (cpu, dev *Model) {
	t.Helper()
	cfg, err := LoadConfigFile(filepath.Join("testdata", "models", cfgFile))
	require.NoError(t, err)
	ck := RandomCheckpoint(cfg, seed)
	if edit != nil {
		edit(ck)
	}
	cpu, err = Load(ck)
	require.NoError(t, err)
	dev, err = LoadOn(ck, b)
	require.NoError(t, err)
	require.Equal(t, tensor.Backend(b), dev.Backend())
	return cpu, dev
}

// closeTo is the examples' shared device-against-CPU comparison.
var closeTo = devicetest.CloseTo

func downloaded(t *testing.T, x *tensor.Tensor) []float32 {
	t.Helper()
	v, err := download(x)
	require.NoError(t, err)
	return v
}

// TestCUDAVisionLogits: the tower's image and video features and the whole model's logits
// (two images and a two-frame video in one sequence) on the device equal the CPU's within
// 1e-5 of their scale.
func TestCUDAVisionLogits(t *testing.T) {
	b := device(t)
	g := readModelGolden(t)
	for i, cfg := range vlCases {
		t.Run(cfg, func(t *testing.T) {
			cpu, dev := loadPair(t, b, cfg, 7, nil)
			s := goldenSample(g, cpu, g.Cases[i].IDs)
			worst := 0.0
			for _, p := range []Patches{s.Images, s.Videos} {
				want, _, err := cpu.Vision.Forward(p.Values, p.Grids, false)
				require.NoError(t, err)
				got, _, err := dev.Vision.Forward(p.Values, p.Grids, false)
				require.NoError(t, err)
				require.False(t, got.IsHost())
				worst = max(worst, closeTo(t, "features", downloaded(t, got), host(want), 1e-5))
			}
			want, err := cpu.Logits(s)
			require.NoError(t, err)
			got, err := dev.Logits(s)
			require.NoError(t, err)
			require.False(t, got.IsHost())
			t.Logf("largest relative difference: features %.3g, logits %.3g", worst, closeTo(t, "logits", downloaded(t, got), host(want), 1e-5))
		})
	}
}

// setAdapterB gives every adapter (the language model's and the tower's) the same nonzero B
// on either backend: PEFT's zero B would hide the adapters from the forward and zero A's
// gradient.
func setAdapterB(t *testing.T, m *Model) {
	ps, err := m.peftTensors()
	require.NoError(t, err)
	for i, p := range ps {
		if strings.HasSuffix(p.name, ".lora_B.weight") {
			v := make([]float32, p.value.Len())
			for j := range v {
				v[j] = float32(0.05 * math.Sin(float64(7*i+j)))
			}
			require.NoError(t, tensor.CopyInto(p.value, tensor.Must(tensor.FromFloat32(v, p.value.Shape()...))))
		}
	}
	require.NoError(t, m.repackAdapters())
}

// TestCUDAVisionGradients: a training pass over two samples with images (different
// completions) scores the same log-probs and entropies on the device and gives the same
// gradients within 1e-5 of their scale: every weight with the tower trained in full; every
// adapter with LoRA on every module of both parts (dropout 0.25: the masks are drawn on the
// host from one stream); the language model's alone with the tower frozen.
func TestCUDAVisionGradients(t *testing.T) {
	b := device(t)
	g := readModelGolden(t)
	for i, cfg := range vlCases {
		for _, mode := range []string{"full", "lora", "frozen"} {
			t.Run(cfg+"/"+mode, func(t *testing.T) {
				cpu, dev := loadPair(t, b, cfg, 11, nil)
				for _, m := range []*Model{cpu, dev} {
					switch mode {
					case "lora":
						require.NoError(t, m.AddLoRA(hflm.LoRAConfig{Rank: 2, Alpha: 4, Dropout: 0.25, TargetModules: append(towerTargets(m), "q_proj", "o_proj"), Seed: 5}))
						setAdapterB(t, m)
					case "frozen":
						m.Vision.Frozen = true
					}
				}
				s := goldenSample(g, cpu, g.Cases[i].IDs)
				lens := []int{4, 6}
				dl := [][]float32{{0.1, -0.2, 0.3, 0.05}, {-0.4, 0.2, 0.1, 0, 0.3, -0.1}}
				de := [][]float32{{0.01, 0.02, -0.03, 0.05}, {0.04, -0.2, 0, 0.1, 0.2, 0}}
				pass := func(m *Model) (lp, ent []float32, grads map[string][]float32) {
					sc, err := m.Score([]Sample{s, s}, lens, 0.9, true)
					require.NoError(t, err)
					for i := range sc.LogProbs {
						lp, ent = append(lp, sc.LogProbs[i]...), append(ent, sc.Entropy[i]...)
					}
					require.NoError(t, sc.Backward(dl, de))
					ps, err := m.Params()
					require.NoError(t, err)
					grads = map[string][]float32{}
					for _, p := range ps {
						grads[p.Name] = downloaded(t, p.Grad)
					}
					return lp, ent, grads
				}
				lpC, entC, gC := pass(cpu)
				lpD, entD, gD := pass(dev)
				closeTo(t, "logprobs", lpD, lpC, 1e-5)
				closeTo(t, "entropy", entD, entC, 1e-5)
				worst, tower := 0.0, 0
				for name, gc := range gC {
					worst = max(worst, closeTo(t, name, gD[name], gc, 1e-5))
					if strings.Contains(name, "visual.") {
						tower++
					}
				}
				require.Equal(t, mode != "frozen", tower > 0, "tower gradients")
				t.Logf("%d gradients (%d of the tower); largest relative difference %.3g", len(gC), tower, worst)
			})
		}
	}
}

// TestCUDAVisionGenerate: greedy decoding with the key/value cache gives the CPU's tokens on
// the device, a row with two images and a video batched with a text row; the q and k weights
// are scaled ×12 so that the M-RoPE positions (and the rope deltas) decide the tokens.
func TestCUDAVisionGenerate(t *testing.T) {
	b := device(t)
	g := readModelGolden(t)
	for i, cfg := range vlCases {
		t.Run(cfg, func(t *testing.T) {
			cpu, dev := loadPair(t, b, cfg, 7, func(ck *Checkpoint) {
				for l := range ck.Config.Text.NumHiddenLayers {
					for _, proj := range []string{"q_proj", "k_proj"} {
						for j := range ck.Weights[fmt.Sprintf("model.layers.%d.self_attn.%s.weight", l, proj)] {
							ck.Weights[fmt.Sprintf("model.layers.%d.self_attn.%s.weight", l, proj)][j] *= 12
						}
					}
				}
			})
			ids := g.Cases[i].IDs
			samples := []Sample{goldenSample(g, cpu, ids[:len(ids)-g.Completion]), {IDs: []int32{1, 9, 33, 4}}}
			want, err := cpu.Generate(samples, hflm.Sampling{MaxNewTokens: 8, TopP: 1}, nil)
			require.NoError(t, err)
			got, err := dev.Generate(samples, hflm.Sampling{MaxNewTokens: 8, TopP: 1}, nil)
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}
}

// TestCUDAVisionTraining: two AdamW steps of LoRA on both parts on the device
// (DeviceTraining) follow the CPU's (Training) within 1e-4 of the adapters' scale; the
// device's adapter saved and loaded on the CPU is its weights exactly, and the export
// (Checkpoint, tower adapters merged) matches; Training and bf16 are refused on the device.
func TestCUDAVisionTraining(t *testing.T) {
	b := device(t)
	g := readModelGolden(t)
	cfg := vlCases[1]
	cpu, dev := loadPair(t, b, cfg, 13, nil)
	lc := hflm.LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"all-linear"}, Seed: 8}
	require.NoError(t, cpu.AddLoRA(lc))
	require.NoError(t, dev.AddLoRA(lc))
	require.ErrorContains(t, dev.SetMixedPrecision(tensor.BFloat16), "bf16 mixed precision runs on the CPU backend only")
	require.ErrorContains(t, dev.Vision.SetMixedPrecision(tensor.BFloat16), "bf16 mixed precision runs on the CPU backend only")
	_, _, err := dev.Training(0.01)
	require.ErrorContains(t, err, "DeviceTraining")
	hostOpt, _, err := cpu.Training(0.01)
	require.NoError(t, err)
	devOpt, _, err := dev.DeviceTraining(0.01)
	require.NoError(t, err)
	s := goldenSample(g, cpu, g.Cases[1].IDs)
	dl := [][]float32{{0.1, -0.2, 0.3, 0.05}}
	for range 2 {
		for _, m := range []*Model{cpu, dev} {
			sc, err := m.Score([]Sample{s}, []int{4}, 1, true)
			require.NoError(t, err)
			require.NoError(t, sc.Backward(dl, nil))
		}
		nh, err := hostOpt.Step(1e-2, 1)
		require.NoError(t, err)
		nd, err := devOpt.Step(1e-2, 1)
		require.NoError(t, err)
		require.InDelta(t, nh, nd, 1e-4*(1+nh))
	}
	hps, _ := cpu.Params()
	dps, _ := dev.Params()
	require.Equal(t, len(hps), len(dps))
	tower := 0
	for i := range hps {
		closeTo(t, hps[i].Name, downloaded(t, dps[i].Value), host(hps[i].Value), 1e-4)
		if strings.Contains(hps[i].Name, "visual.") {
			tower++
		}
	}
	require.Positive(t, tower)
	dir := t.TempDir()
	require.NoError(t, dev.SaveLoRA(dir, "base"))
	back, _ := loadPair(t, b, cfg, 13, nil)
	require.NoError(t, back.LoadLoRA(dir))
	bps, _ := back.Params()
	for i := range bps {
		require.Equal(t, downloaded(t, dps[i].Value), host(bps[i].Value), bps[i].Name)
	}
	ckD, err := dev.Checkpoint()
	require.NoError(t, err)
	ckB, err := back.Checkpoint()
	require.NoError(t, err)
	for _, name := range []string{"visual.blocks.0.attn.qkv.weight", "visual.merger.mlp.2.weight", "model.layers.0.self_attn.q_proj.weight"} {
		closeTo(t, name, ckD.Weights[name], ckB.Weights[name], 1e-6)
	}
}

// TestCUDAMixedPrecisionRefusedWhole: bf16 mixed precision is refused on the device by the
// tower, and the refusal leaves the language model in float32 too (not half switched).
func TestCUDAMixedPrecisionRefusedWhole(t *testing.T) {
	b := device(t)
	_, dev := loadPair(t, b, vlCases[0], 3, nil)
	err := dev.SetMixedPrecision(tensor.BFloat16)
	require.ErrorIs(t, err, tensor.ErrBackend)
	require.Equal(t, tensor.Float32, dev.Vision.MixedPrecision())
	require.Equal(t, tensor.Float32, dev.LM.MixedPrecision())
}
