//go:build cuda

package qwenvl

import (
	"fmt"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/tprl/loop"
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

// downloaded is a tensor's values on the host.
var downloaded = devicetest.Downloaded

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
// (Checkpoint, tower adapters merged) matches; Training is refused on the device.
func TestCUDAVisionTraining(t *testing.T) {
	b := device(t)
	g := readModelGolden(t)
	cfg := vlCases[1]
	cpu, dev := loadPair(t, b, cfg, 13, nil)
	lc := hflm.LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"all-linear"}, Seed: 8}
	require.NoError(t, cpu.AddLoRA(lc))
	require.NoError(t, dev.AddLoRA(lc))
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

// requireCopiesRounded checks that the tower's bfloat16 copies on the device are its float32
// masters rounded to nearest even, bit for bit (the CPU's BF16FromFloat32), and returns them.
func requireCopiesRounded(t *testing.T, v *Vision) (mats map[string][]tensor.BF16, vecs map[string][]float32) {
	t.Helper()
	require.NotEmpty(t, v.mp.Mats)
	mats, vecs = map[string][]tensor.BF16{}, map[string][]float32{}
	for name, w := range v.mp.Mats {
		require.Equal(t, v.onHost(), w.Weight().IsHost(), name)
		h, err := tensor.To(tensor.CPU(), w.Weight())
		require.NoError(t, err)
		got, err := h.BF16s()
		require.NoError(t, err)
		for i, x := range downloaded(t, v.byName[name].value) {
			require.Equal(t, tensor.BF16FromFloat32(x), got[i], "%s[%d]", name, i)
		}
		mats[name] = got
	}
	for name, w := range v.mp.Vecs {
		got := downloaded(t, w)
		for i, x := range downloaded(t, v.byName[name].value) {
			require.Equal(t, tensor.BF16FromFloat32(x).Float32(), got[i], "%s[%d]", name, i)
		}
		vecs[name] = got
	}
	return mats, vecs
}

// TestCUDAVisionMixedPrecision: the whole model in bf16 mode on the device (every rounding,
// bfloat16 copy and kept activation made there) against bf16 mode on the CPU, both test
// checkpoints, the tower trained in full and LoRA on every module of both parts (dropout 0.25,
// the masks drawn on the host from one stream).
//
//   - The weights computed with are the same bits: the tower's copies are its masters rounded
//     to nearest even on both backends, at the switch and after a device AdamW step (the
//     language model's are hflm's TestCUDAMixedPrecision's).
//   - A training forward keeps bfloat16 device tensors, and an inference forward (reused
//     bfloat16 buffers) gives its features bit for bit (without LoRA's dropout); float32 ↔
//     bf16 switches on the device give each mode's features bit for bit.
//   - Features, log-probs, entropies and gradients: the device sums in other orders than the
//     CPU, so a value within float32 rounding of a bfloat16 rounding boundary rounds the other
//     way, and the two bf16 runs are not the same bits. The bound is derived, not chosen: each
//     bf16 run is within TestVisionMixedPrecision's random-walk bound of its own float32 run
//     (√R·u relative, 2√R·u for a gradient; R the roundings on a token's path, tower and
//     language model, u = 2⁻⁸), and the two float32 runs are within their measured
//     difference, so by the triangle inequality ‖Δf‖ ≤ 2√R_tower·u·‖f‖ + ‖Δ_f32 f‖,
//     |Δ log p| ≤ 2√R·u·max|log p| + max|Δ_f32 log p| (entropies alike) and
//     ‖Δg‖ ≤ 4√R·u·‖g_f32‖ + ‖Δ_f32 g‖ per parameter.
func TestCUDAVisionMixedPrecision(t *testing.T) {
	b := device(t)
	u := math.Ldexp(1, -8)
	g := readModelGolden(t)
	lens := []int{4, 6}
	dl := [][]float32{{0.1, -0.2, 0.3, 0.05}, {-0.4, 0.2, 0.1, 0, 0.3, -0.1}}
	de := [][]float32{{0.01, 0.02, -0.03, 0.05}, {0.04, -0.2, 0, 0.1, 0.2, 0}}
	for i, cfg := range vlCases {
		for _, mode := range []string{"full", "lora"} {
			t.Run(cfg+"/"+mode, func(t *testing.T) {
				type result struct {
					feats, lp, ent []float32
					grads          map[string][]float32
				}
				var res [2][2]result // [cpu, device][float32, bf16]
				var bf [2]*Model
				for k, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
					cpu, dev := loadPair(t, b, cfg, 11, nil)
					for j, m := range []*Model{cpu, dev} {
						require.NoError(t, m.SetMixedPrecision(dt))
						require.Equal(t, dt, m.Vision.MixedPrecision())
						require.Equal(t, dt, m.LM.MixedPrecision())
						if mode == "lora" {
							require.NoError(t, m.AddLoRA(hflm.LoRAConfig{Rank: 2, Alpha: 4, Dropout: 0.25, TargetModules: append(towerTargets(m), "q_proj", "o_proj"), Seed: 5}))
							setAdapterB(t, m)
						}
						s := goldenSample(g, cpu, g.Cases[i].IDs)
						f, a, err := m.Vision.Forward(s.Images.Values, s.Images.Grids, true)
						require.NoError(t, err)
						require.Equal(t, dt, a.blocks[0].h1.DType(), "kept activations")
						require.Equal(t, dt, a.blocks[0].xMid.DType(), "kept activations")
						require.Equal(t, dt, a.gelu.DType(), "kept activations")
						require.Equal(t, j == 0, a.blocks[0].h1.IsHost())
						inf, _, err := m.Vision.Forward(s.Images.Values, s.Images.Grids, false)
						require.NoError(t, err)
						r := result{feats: downloaded(t, f), grads: map[string][]float32{}}
						if dt == tensor.BFloat16 { // the merger's output is rounded where it is computed
							for i, x := range r.feats {
								require.Equal(t, tensor.BF16FromFloat32(x).Float32(), x, "feature %d is not a bfloat16 value", i)
							}
						}
						if mode == "full" { // (LoRA's dropout acts in training forwards only)
							require.Equal(t, r.feats, downloaded(t, inf), "inference forward = training forward")
						}
						sc, err := m.Score([]Sample{s, s}, lens, 0.9, true)
						require.NoError(t, err)
						for i := range sc.LogProbs {
							r.lp, r.ent = append(r.lp, sc.LogProbs[i]...), append(r.ent, sc.Entropy[i]...)
						}
						require.NoError(t, sc.Backward(dl, de))
						ps, err := m.Params()
						require.NoError(t, err)
						for _, p := range ps {
							r.grads[p.Name] = downloaded(t, p.Grad)
						}
						res[j][k] = r
						bf[j] = m
					}
				}
				// The bfloat16 copies: the masters rounded, the same bits on both.
				cm, cv := requireCopiesRounded(t, bf[0].Vision)
				dm, dv := requireCopiesRounded(t, bf[1].Vision)
				require.Equal(t, cm, dm)
				require.Equal(t, cv, dv)

				rt := float64(towerRoundings(bf[0].Config.Vision.Depth))
				sqrtR := math.Sqrt(rt + float64(lmRoundings(bf[0].Config.Text.NumHiddenLayers)))
				cpu, dev := res[0], res[1]
				fn, _ := relNorm(cpu[0].feats, dev[0].feats)
				var dn, fs float64 // ‖Δ_bf16 f‖², ‖f_f32‖²
				for i, w := range cpu[1].feats {
					d := float64(dev[1].feats[i]) - float64(w)
					dn, fs = dn+d*d, fs+float64(cpu[0].feats[i])*float64(cpu[0].feats[i])
				}
				fscale := math.Sqrt(fs)
				fb := 2*math.Sqrt(rt)*u + fn
				require.LessOrEqual(t, math.Sqrt(dn)/fscale, fb, "features")
				t.Logf("features: ‖Δ‖/‖f‖ device−cpu bf16 %.3g, float32 %.3g; bound %.3g", math.Sqrt(dn)/fscale, fn, fb)
				for _, q := range []struct {
					name               string
					f32c, f32d, bc, bd []float32
				}{{"log-probs", cpu[0].lp, dev[0].lp, cpu[1].lp, dev[1].lp}, {"entropies", cpu[0].ent, dev[0].ent, cpu[1].ent, dev[1].ent}} {
					top, f32d, bfd := 0.0, 0.0, 0.0
					for i, w := range q.f32c {
						top = max(top, math.Abs(float64(w)))
						f32d = max(f32d, math.Abs(float64(q.f32d[i]-w)))
						bfd = max(bfd, math.Abs(float64(q.bd[i]-q.bc[i])))
					}
					bound := 2*sqrtR*u*top + f32d
					require.LessOrEqual(t, bfd, bound, q.name)
					t.Logf("%s: max |Δ| device−cpu bf16 %.3g, float32 %.3g; bound %.3g", q.name, bfd, f32d, bound)
				}
				worst, tower := 0.0, 0
				for name, gc := range cpu[0].grads {
					var dn, fn, gn float64
					for i, v := range gc {
						d := float64(dev[1].grads[name][i]) - float64(cpu[1].grads[name][i])
						f := float64(dev[0].grads[name][i]) - float64(v)
						dn, fn, gn = dn+d*d, fn+f*f, gn+float64(v)*float64(v)
					}
					lim := 4*sqrtR*u*math.Sqrt(gn) + math.Sqrt(fn)
					require.LessOrEqual(t, math.Sqrt(dn), lim, name)
					if lim > 0 {
						worst = max(worst, math.Sqrt(dn)/lim)
					}
					if strings.Contains(name, "visual.") {
						tower++
					}
				}
				require.Positive(t, tower, "tower gradients")
				t.Logf("%d gradients (%d of the tower): largest ‖Δg‖ device−cpu in bf16 = %.3g of its bound", len(cpu[0].grads), tower, worst)

				dev1 := bf[1]
				if mode == "full" {
					// A device step moves the float32 masters; the copies follow their rounding.
					opt, _, err := dev1.DeviceTraining(0)
					require.NoError(t, err)
					p := dev1.Vision.byName["visual.blocks.0.attn.qkv.weight"]
					before := downloaded(t, p.value)
					_, err = opt.Step(1e-5, 0)
					require.NoError(t, err)
					moved := 0
					for i, x := range downloaded(t, p.value) {
						if x != before[i] {
							moved++
						}
					}
					require.Greater(t, moved, len(before)/2, "the float32 masters take the update")
					requireCopiesRounded(t, dev1.Vision)
					return
				}
				// Back to float32 and to bf16 again on the device: each mode's features exactly.
				v := dev1.Vision
				s := goldenSample(g, bf[0], g.Cases[i].IDs)
				var want [2][]float32
				for k, dt := range []tensor.DType{tensor.BFloat16, tensor.Float32, tensor.BFloat16} {
					require.NoError(t, v.SetMixedPrecision(dt))
					f, _, err := v.Forward(s.Images.Values, s.Images.Grids, false)
					require.NoError(t, err)
					if k < 2 {
						want[k] = downloaded(t, f)
					} else {
						require.Equal(t, want[0], downloaded(t, f))
					}
				}
				require.NotEqual(t, want[0], want[1], "bf16 mode rounds")
			})
		}
	}
}

// TestCUDAVisionPerturbedLogProbs: the policy's scoring passes on the device, with the images
// as given and perturbed (the trainer's perturbed pass: blackened patches, the default and a
// denser one), give the CPU's log-probs and entropies within the tolerance of
// TestCUDAVisionLogits, for images of several sizes in one batch; and as tprl/loop runs them
// (micro-batches of 2 rows written into row views of one [B, T] tensor, the perturbed pass
// without entropies), with the perception score computed on each backend. Written after a
// model_path trainer run on an H200 logged other perception scores on the device than on the
// CPU (docs/2026-11-gpu-h200.md): there the first part passed.
func TestCUDAVisionPerturbedLogProbs(t *testing.T) {
	b := device(t)
	for _, cfg := range []string{"qwen2-vl.json", "qwen2.5-vl.json"} {
		t.Run(cfg, func(t *testing.T) {
			cpu, dev := loadPair(t, b, cfg, 5, nil)
			hp, dp := testPolicy(t, cpu), testPolicy(t, dev)
			ps := testPrompts(cpu, 3)
			ps[2].Images = []*RGB{testImage(84, 112, 2)}
			batch := &loop.Batch[Prompt]{Prompts: ps, IDs: []uint64{40, 41, 42}, T: 4, Temperature: 1,
				Completions: []loop.Completion{{Tokens: []int32{7, 8, 9}}, {Tokens: []int32{11}}, {Tokens: []int32{3, 4, 5, 6}}}}
			for _, in := range []loop.Input{{}, {Perturb: perturb.DefaultBlackening(), Seed: 9}, {Perturb: perturb.Blackening{PatchSize: 14, Prob: 0.5}, Seed: 3}} {
				var want, wantEnt []float32
				for _, pol := range []*Policy[Prompt]{hp, dp} {
					lp, err := tensor.New(pol.Backend(), tensor.Float32, 3, 4)
					require.NoError(t, err)
					ent, err := tensor.New(pol.Backend(), tensor.Float32, 3, 4)
					require.NoError(t, err)
					require.NoError(t, pol.LogProbs(batch, 0, 3, in, lp, ent))
					if want == nil {
						want, wantEnt = downloaded(t, lp), downloaded(t, ent)
						continue
					}
					t.Logf("perturbed %v: log-probs largest relative difference %.3g, entropies %.3g", in.Perturb != nil,
						closeTo(t, "log-probs", downloaded(t, lp), want, 1e-5), closeTo(t, "entropies", downloaded(t, ent), wantEnt, 1e-5))
				}
			}
			// As the loop scores: row views, no entropies for the perturbed pass, the score.
			var wantScore []float32
			for _, pol := range []*Policy[Prompt]{hp, dp} {
				pass := func(in loop.Input, withEnt bool) *tensor.Tensor {
					lp, err := tensor.New(pol.Backend(), tensor.Float32, 3, 4)
					require.NoError(t, err)
					ent, err := tensor.New(pol.Backend(), tensor.Float32, 3, 4)
					require.NoError(t, err)
					for _, r := range [][2]int{{0, 2}, {2, 3}} {
						lr, err := lp.Rows(r[0], r[1])
						require.NoError(t, err)
						var er *tensor.Tensor
						if withEnt {
							er, err = ent.Rows(r[0], r[1])
							require.NoError(t, err)
						}
						require.NoError(t, pol.LogProbs(batch, r[0], r[1], in, lr, er))
					}
					return lp
				}
				old, aug := pass(loop.Input{}, true), pass(loop.Input{Perturb: perturb.DefaultBlackening(), Seed: 9}, false)
				score, err := tensor.New(pol.Backend(), tensor.Float32, 3, 4)
				require.NoError(t, err)
				require.NoError(t, divergence.PerceptionScore(score, old, aug))
				// Padding positions hold whatever the passes left there: compare the completions'.
				got := downloaded(t, score)
				var kept []float32
				for i, c := range batch.Completions {
					kept = append(kept, got[i*4:i*4+len(c.Tokens)]...)
				}
				if wantScore == nil {
					wantScore = kept
					continue
				}
				t.Logf("perception scores largest relative difference %.3g", closeTo(t, "perception scores", kept, wantScore, 1e-5))
			}
		})
	}
}
