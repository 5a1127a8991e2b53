package hflm

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// plain hides the policy's loop.FinalGradients: the loop reduces after the backward.
type plain struct{ loop.Policy[testPrompt] }

// overlapRun takes 2 GRPO steps on size in-process ranks with bucketed gradients of 8 KiB
// buckets (a few per decoder layer) and returns every rank's weights and metrics and the
// buckets rank 0 reduced during the backward.
func overlapRun(t *testing.T, cfgFile string, size int, ckpt, zero2, overlap bool) (weights [][]float32, metrics [][]map[string]float64, early int) {
	weights, metrics = make([][]float32, size), make([][]map[string]float64, size)
	var data []testPrompt
	for i := range 16 {
		data = append(data, testPrompt{1, int32(10 + i), int32(40 + i%5)})
	}
	reward := func(in loop.RewardInputs[testPrompt]) ([]float64, error) {
		out := make([]float64, len(in.Completions))
		for i, c := range in.Completions {
			if len(c.Tokens) > 0 && c.Tokens[0] == 7 {
				out[i] = 1
			}
		}
		return out, nil
	}
	cfg := loop.Config{
		Steps: 2, Prompts: 4, Sampling: loop.Sampling{N: 4, MaxTokens: 3, Temperature: 1, TopP: 1},
		Advantage: advantage.DefaultConfig(),
		Update:    tprl.UpdateConfig{Tokens: tprl.DefaultConfig(), Policy: ppo.DefaultPolicyConfig(ppo.Vanilla)},
		// 16 rows: 2 micro-batches of 4 per rank at N = 2 (accumulated), one at N = 4.
		MiniBatchPrompts: 4, PPOEpochs: 1, UpdateRows: 4, ScoreRows: 16,
		LR: loop.Schedule{LR: 3e-2}, Seed: 3,
	}
	rc := loop.ReduceConfig{BucketBytes: 8 << 10}
	err := collective.Run(context.Background(), size, func(ctx context.Context, c collective.Comm) error {
		m := loadCheckpoint(t, cfgFile, 21, "float32", 1)
		m.SetCheckpointing(ckpt)
		ps, err := m.Params()
		if err != nil {
			return err
		}
		var opt loop.Optimizer
		var g *loop.BucketedGradients
		if zero2 {
			var z *loop.ShardedAdamW
			if z, g, err = loop.NewShardedAdamW(ps, loop.ShardGradients, rc, c.Rank(), size, 0.9, 0.999, 1e-8, 0); err != nil {
				return err
			}
			opt = repacked{z, m.Repack}
		} else {
			if opt, _, err = m.Training(0); err != nil {
				return err
			}
			if g, err = loop.NewBucketedGradients(ps, rc, c.Rank(), size); err != nil {
				return err
			}
		}
		var policy loop.Policy[testPrompt] = &Policy[testPrompt]{Model: m, Prompt: func(p testPrompt) []int32 { return p }, Stop: []int32{2, 3}}
		if !overlap {
			policy = plain{policy}
		}
		l, err := loop.New(cfg, loop.Parts[testPrompt]{Policy: policy, Optimizer: opt, Gradients: g, Comm: c,
			Rewards: []loop.Reward[testPrompt]{{Name: "seven", Weight: 1, Func: reward}}, Data: loop.NewEpochs(data, true, 1)})
		if err != nil {
			return err
		}
		for range cfg.Steps {
			res, err := l.Step(ctx)
			if err != nil {
				return err
			}
			met := map[string]float64{}
			for k, v := range res.Metrics {
				if k[:5] != "perf/" && k[:min(len(k), 7)] != "timing_" {
					met[k] = v
				}
			}
			metrics[c.Rank()] = append(metrics[c.Rank()], met)
			res.Release()
		}
		for _, p := range ps {
			v, err := p.Value.Float32s()
			if err != nil {
				return err
			}
			weights[c.Rank()] = append(weights[c.Rank()], v...)
		}
		if c.Rank() == 0 {
			early = g.OverlappedBuckets()
			t.Logf("%d of %d buckets reduced during the backward", early, g.Buckets())
		}
		return nil
	})
	require.NoError(t, err)
	return weights, metrics, early
}

// repacked is ShardedAdamW that repacks the model after each step (the trainer's).
type repacked struct {
	*loop.ShardedAdamW
	repack func() error
}

func (o repacked) StepGroup(ctx context.Context, c collective.Comm, lr, maxNorm float64) (float64, int64, error) {
	norm, recv, err := o.ShardedAdamW.StepGroup(ctx, c, lr, maxNorm)
	if err == nil {
		err = o.repack()
	}
	return norm, recv, err
}

// TestOverlapBitIdentical: with the policy reporting each layer's gradients final, the
// bucketed reduction (and ZeRO-2's) runs during the backward of the mini-batch's last
// micro-batch, and the weights and metrics after 2 steps are those of the reduction after the
// backward bit for bit, at 2 ranks (2 micro-batches each) and 4, tied and untied embeddings,
// with activation checkpointing.
func TestOverlapBitIdentical(t *testing.T) {
	cases := []struct {
		cfg         string
		ckpt, zero2 bool
	}{{"qwen2-untied.json", false, false}, {"qwen2-tied.json", true, false}, {"qwen2-untied.json", false, true}}
	for _, tc := range cases {
		for _, size := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/ckpt=%v/zero2=%v/%d", tc.cfg, tc.ckpt, tc.zero2, size), func(t *testing.T) {
				cfgFile := filepath.Join("testdata", tc.cfg)
				wantW, wantM, none := overlapRun(t, cfgFile, size, tc.ckpt, tc.zero2, false)
				gotW, gotM, early := overlapRun(t, cfgFile, size, tc.ckpt, tc.zero2, true)
				assert.Zero(t, none)
				assert.Positive(t, early)
				for r := range size {
					require.Equal(t, wantW[r], gotW[r], "rank %d weights", r)
					assert.Equal(t, wantM[r], gotM[r], "rank %d metrics", r)
				}
				require.Equal(t, gotW[0], gotW[size-1], "replicas")
			})
		}
	}
}

// TestReportFinal: the backward reports every parameter's gradient (or, with LoRA, every
// adapter's) exactly once, each holding at the end the values it held when reported, and the
// gradients are those of a backward without the hook: tied and untied, with checkpointing,
// bf16 mixed precision and LoRA; on a second micro-batch, which accumulates.
func TestReportFinal(t *testing.T) {
	for _, tc := range []struct {
		cfg              string
		ckpt, lora, bf16 bool
	}{{"qwen2-untied.json", false, false, false}, {"qwen2-tied.json", true, false, false}, {"qwen2-tied.json", true, false, true},
		{"llama-linear.json", false, false, false}, {"qwen2-untied.json", false, true, false}} {
		t.Run(fmt.Sprintf("%s/ckpt=%v/lora=%v/bf16=%v", tc.cfg, tc.ckpt, tc.lora, tc.bf16), func(t *testing.T) {
			cfgFile := filepath.Join("testdata", tc.cfg)
			var m *Model
			if tc.lora {
				m = loraModel(t, tc.cfg, "all-linear")
			} else {
				m = loadCheckpoint(t, cfgFile, 21, "float32", 1)
			}
			m.SetCheckpointing(tc.ckpt)
			if tc.bf16 {
				require.NoError(t, m.SetMixedPrecision(tensor.BFloat16))
			}
			prompts, comps := [][]int32{{1, 5, 9, 4}, {1, 7}}, [][]int32{{3, 8, 2}, {6, 6}}
			dlp := [][]float32{{0.5, -1, 0.25}, {2, -0.75}}
			backward := func() {
				s, err := m.Score(prompts, comps, 1, true)
				require.NoError(t, err)
				require.NoError(t, s.Backward(dlp, dlp))
			}
			ps, err := m.Params()
			require.NoError(t, err)
			grads := func() [][]float32 {
				var out [][]float32
				for _, p := range ps {
					g, err := p.Grad.Float32s()
					require.NoError(t, err)
					out = append(out, append([]float32(nil), g...))
				}
				return out
			}
			m.ZeroGrads()
			backward()
			backward()
			want := grads()
			m.ZeroGrads()
			backward()
			seen := map[*tensor.Tensor][]float32{}
			policy := &Policy[testPrompt]{Model: m}
			require.True(t, policy.ReportFinal(func(gs ...*tensor.Tensor) {
				for _, g := range gs {
					v, err := g.Float32s()
					require.NoError(t, err)
					_, dup := seen[g]
					require.False(t, dup, "reported twice")
					seen[g] = append([]float32(nil), v...)
				}
			}))
			backward()
			policy.ReportFinal(nil)
			assert.Equal(t, want, grads())
			require.Len(t, seen, len(ps))
			for i, p := range ps {
				v, ok := seen[p.Grad]
				require.True(t, ok, "%s not reported", p.Name)
				require.Equal(t, want[i], v, "%s changed after it was reported", p.Name)
			}
		})
	}
}
