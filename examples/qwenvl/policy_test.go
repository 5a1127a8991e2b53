package qwenvl

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// testImage is a w×h RGB image with a pattern that depends on k.
func testImage(w, h, k int) *RGB {
	img := NewRGB(w, h)
	for i := range img.Pix {
		img.Pix[i] = uint8((i*37 + k*101 + i/(3*w)*13) % 256)
	}
	return img
}

func testPolicy(t *testing.T, m *Model) *Policy[Prompt] {
	pc := DefaultProcessorConfig()
	pc.PatchSize, pc.TemporalPatchSize, pc.MergeSize = m.Config.Vision.PatchSize, m.Config.Vision.TemporalPatchSize, m.Config.Vision.MergeSize
	proc, err := NewProcessor(pc)
	require.NoError(t, err)
	return &Policy[Prompt]{Model: m, Processor: proc, Prompt: func(p Prompt) Prompt { return p }, Stop: []int32{2}}
}

func testPrompts(m *Model, n int) []Prompt {
	tok := m.Config.Tokens
	var ps []Prompt
	for i := range n {
		ps = append(ps, Prompt{
			IDs:    []int32{1, int32(tok.VisionStartID), int32(tok.ImageID), int32(m.Config.VisionEndID), int32(10 + i)},
			Images: []*RGB{testImage(56+28*(i%2), 56, i)},
		})
	}
	return ps
}

// TestPolicyPerturbedLogProbs checks the perturbed scoring pass: the completion's log-probs
// with the images perturbed equal those of a Sample built from the perturbed images by hand,
// and differ from the unperturbed ones.
func TestPolicyPerturbedLogProbs(t *testing.T) {
	m := loadCase(t, filepath.Join("testdata", "models", "qwen2.5-vl.json"), 5, "float32", "legacy")
	pol := testPolicy(t, m)
	ps := testPrompts(m, 2)
	b := &loop.Batch[Prompt]{Prompts: ps, Completions: []loop.Completion{{Tokens: []int32{7, 8, 9}}, {Tokens: []int32{11}}}, IDs: []uint64{40, 41}, T: 4, Temperature: 1}
	pert := perturb.Blackening{PatchSize: 14, Prob: 0.5}
	logp := func(in loop.Input) []float32 {
		lp, v := f32(2, 4)
		require.NoError(t, pol.LogProbs(b, 0, 2, in, lp, nil))
		return v
	}
	for i, p := range ps { // RowTokens counts what the pass computes
		s, _, err := pol.sample(p, b.Completions[i].Tokens, loop.Input{}, 0)
		require.NoError(t, err)
		require.Equal(t, len(s.IDs), pol.RowTokens(b, i))
	}
	plain := logp(loop.Input{})
	perturbed := logp(loop.Input{Perturb: pert, Seed: 9})
	require.NotEqual(t, plain, perturbed)
	for i, p := range ps {
		src := tensor.Must(tensor.FromUint8(p.Images[0].Pix, p.Images[0].Height, p.Images[0].Width, 3))
		dst := tensor.Must(tensor.New(tensor.CPU(), tensor.Uint8, src.Shape()...))
		require.NoError(t, pert.Apply(dst, src, 9, b.IDs[i]))
		pix, _ := dst.Uint8s()
		img := &RGB{Width: p.Images[0].Width, Height: p.Images[0].Height, Pix: pix}
		patches, err := pol.Processor.Images([]*RGB{img})
		require.NoError(t, err)
		ids := []int32{p.IDs[0], p.IDs[1]}
		for range patches.Grids[0].Tokens(2) {
			ids = append(ids, p.IDs[2])
		}
		comp := b.Completions[i].Tokens
		ids = append(append(ids, p.IDs[3:]...), comp...)
		sc, err := m.Score([]Sample{{IDs: ids, Images: patches}}, []int{len(comp)}, 1, false)
		require.NoError(t, err)
		require.Equal(t, sc.LogProbs[0], perturbed[i*4:i*4+len(comp)], "row %d", i)
	}
}

// TestPolicyLearns trains Qwen2.5-VL (tower trained, or frozen) with GRPO and the perturbed
// pass through tprl/loop, a KL loss to a frozen copy: the reward is 1 for completions that
// start with a token below 8 (of 128). The mean probability of such a first token must grow
// threefold; the tower's weights move only when it is trained.
func TestPolicyLearns(t *testing.T) {
	for _, frozen := range []bool{false, true} {
		name := "trained"
		if frozen {
			name = "frozen"
		}
		t.Run(name, func(t *testing.T) {
			cfgFile := filepath.Join("testdata", "models", "qwen2.5-vl.json")
			m := loadCase(t, cfgFile, 21, "float32", "legacy")
			m.Vision.Frozen = frozen
			ref := loadCase(t, cfgFile, 21, "float32", "legacy")
			patch := slices.Clone(host(m.Weight("visual.patch_embed.proj.weight")))
			policy, reference := testPolicy(t, m), testPolicy(t, ref)
			data := testPrompts(m, 8)
			const low = 8
			reward := func(in loop.RewardInputs[Prompt]) ([]float64, error) {
				out := make([]float64, len(in.Completions))
				for i, c := range in.Completions {
					if len(c.Tokens) > 0 && c.Tokens[0] < low {
						out[i] = 1
					}
				}
				return out, nil
			}
			opt, grads, err := m.Training(0)
			require.NoError(t, err)
			cfg := loop.Config{
				Steps: 8, Prompts: 4, Sampling: loop.Sampling{N: 4, MaxTokens: 3, Temperature: 1, TopP: 1},
				Advantage:        advantage.DefaultConfig(),
				Update:           tprl.UpdateConfig{Tokens: tprl.DefaultConfig(), Policy: ppo.DefaultPolicyConfig(ppo.Vanilla), KLLoss: &ppo.KLConfig{Kind: divergence.LowVarKL, Coef: 0.01}},
				Perturb:          perturb.DefaultBlackening(),
				MiniBatchPrompts: 4, PPOEpochs: 1, UpdateRows: 8, ScoreRows: 16,
				LR: loop.Schedule{LR: 3e-2}, Seed: 3,
			}
			l, err := loop.New(cfg, loop.Parts[Prompt]{
				Policy: policy, Reference: reference, Optimizer: opt, Gradients: grads,
				Rewards: []loop.Reward[Prompt]{{Name: "seven", Weight: 1, Func: reward}},
				Data:    loop.NewEpochs(data, true, 1),
			})
			require.NoError(t, err)
			pLow := func() float64 { // mean probability of a rewarded first token
				p := 0.0
				for _, d := range data {
					for tok := range int32(low) {
						s, _, err := policy.sample(d, []int32{tok}, loop.Input{}, 0)
						require.NoError(t, err)
						sc, err := m.Score([]Sample{s}, []int{1}, 1, false)
						require.NoError(t, err)
						p += math.Exp(float64(sc.LogProbs[0][0])) / float64(len(data))
					}
				}
				return p
			}
			before := pLow()
			for range cfg.Steps {
				res, err := l.Step(context.Background())
				require.NoError(t, err)
				res.Release()
			}
			after := pLow()
			t.Logf("p(first token < %d) %.4f → %.4f", low, before, after)
			require.Greater(t, after, 3*before)
			moved := !slices.Equal(patch, host(m.Weight("visual.patch_embed.proj.weight")))
			require.Equal(t, !frozen, moved, "the tower's weights moved")

			// The export, saved in the nested layout and loaded afresh, computes the same logits
			// bit for bit: the optimizer repacked what it changed.
			ck, err := m.Checkpoint()
			require.NoError(t, err)
			dir := t.TempDir()
			require.NoError(t, ck.Save(dir, hfmodel.Float32, LayoutNested))
			saved, err := LoadDir(dir)
			require.NoError(t, err)
			s, _, err := policy.sample(data[1], nil, loop.Input{}, 0)
			require.NoError(t, err)
			want, err := m.Logits(s)
			require.NoError(t, err)
			got, err := saved.Logits(s)
			require.NoError(t, err)
			require.Equal(t, host(want), host(got))
		})
	}
}

// TestLoRAParams: with LoRA on the language model (hflm.Model.AddLoRA) and the tower frozen,
// Training holds only the adapters; an optimizer step after a backward moves them and leaves
// every base weight, the tower's included, as it was.
func TestLoRAParams(t *testing.T) {
	m := loadCase(t, filepath.Join("testdata", "models", "qwen2-vl.json"), 3, "float32", "legacy")
	require.NoError(t, m.LM.AddLoRA(hflm.LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj", "v_proj"}, Seed: 1}))
	m.Vision.Frozen = true
	opt, grads, err := m.Training(0)
	require.NoError(t, err)
	ps, err := m.Params()
	require.NoError(t, err)
	require.Len(t, ps, 2*2*m.Config.Text.NumHiddenLayers)
	before := map[string][]float32{}
	for _, name := range paramNames(m) {
		before[name] = slices.Clone(host(m.Weight(name)))
	}
	adapters := map[string][]float32{}
	for _, p := range ps {
		adapters[p.Name] = slices.Clone(host(p.Value))
	}
	g := readModelGolden(t)
	s := goldenSample(g, m, g.Cases[0].IDs)
	sc, err := m.Score([]Sample{s}, []int{2}, 1, true)
	require.NoError(t, err)
	require.NoError(t, sc.Backward([][]float32{{1, -1}}, nil))
	_ = grads // one micro-batch: its gradient is already the policy's
	_, err = opt.Step(1e-2, 0)
	require.NoError(t, err)
	for name, w := range before {
		require.Equal(t, w, host(m.Weight(name)), name)
	}
	moved := 0
	for _, p := range ps {
		if !slices.Equal(adapters[p.Name], host(p.Value)) {
			moved++
		}
	}
	require.Positive(t, moved)
}

var (
	_ loop.Policy[Prompt]       = (*Policy[Prompt])(nil)
	_ loop.TokenCounter[Prompt] = (*Policy[Prompt])(nil)
)
