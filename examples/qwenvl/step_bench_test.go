package qwenvl

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/internal/cputime"
	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// timedPolicy is a Policy that adds up the wall and CPU time of its scoring passes, the
// original ones (loop.Input without Perturb) and the perturbed ones apart: loop.Step's
// timing_s/* metrics time the rollout and the update only.
type timedPolicy struct {
	*Policy[Prompt]
	orig, pert [2]time.Duration // wall, CPU
}

func (p *timedPolicy) LogProbs(b *loop.Batch[Prompt], lo, hi int, in loop.Input, logp, ent *tensor.Tensor) error {
	t0, c0 := time.Now(), cpuNow()
	err := p.Policy.LogProbs(b, lo, hi, in, logp, ent)
	d := &p.orig
	if in.Perturb != nil {
		d = &p.pert
	}
	d[0] += time.Since(t0)
	d[1] += cpuNow() - c0
	return err
}

func cpuNow() time.Duration {
	c, _ := cputime.Process()
	return c
}

// stepBenchConfig is a small Qwen2.5-VL, random weights: a 4-layer decoder of width 512 (8
// heads, 2 key/value heads, MLP 1376, vocabulary 16384) and a 4-block tower of width 256 (4
// heads, MLP 512, window 112, the last block full), 32M parameters.
func stepBenchConfig(b *testing.B) *Config {
	data, err := os.ReadFile(filepath.Join("testdata", "models", "qwen2.5-vl.json"))
	if err != nil {
		b.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(data, &c); err != nil {
		b.Fatal(err)
	}
	text := c["text_config"].(map[string]any)
	text["vocab_size"], text["hidden_size"], text["intermediate_size"] = 16384, 512, 1376
	text["num_hidden_layers"], text["num_attention_heads"], text["num_key_value_heads"] = 4, 8, 2
	text["max_position_embeddings"], text["initializer_range"] = 4096, 0.02
	text["rope_scaling"].(map[string]any)["mrope_section"] = []int{8, 12, 12}
	vis := c["vision_config"].(map[string]any)
	vis["depth"], vis["hidden_size"], vis["intermediate_size"], vis["num_heads"] = 4, 256, 512, 4
	vis["out_hidden_size"], vis["window_size"], vis["fullatt_block_indexes"] = 512, 112, []int{3}
	out, err := json.Marshal(c)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := ParseConfig(out)
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

// BenchmarkVPPOStep times one VPPO step of tprl/loop (GRPO advantages, the perturbed scoring
// pass, perception filtering at top-p 0.4 and trajectory reweighting) over stepBenchConfig's
// model, its tower trained: 4 prompts of one 224×224 image (64 image tokens) and 16 text
// tokens, 4 samples each, up to 32 new tokens at temperature 1, one PPO epoch in one
// mini-batch. It reports each phase's seconds per step (wall, and CPU of the process):
// rollout (timing_s/gen: generation and rewards), the original and the perturbed scoring
// passes, and the update (timing_s/update_actor: forward, backward, AdamW); float32, bf16
// mixed precision (tower and language model), and bf16 with the backward's gradients rounded
// to bfloat16 (bf16-grad: Model.SetBF16Backward).
func BenchmarkVPPOStep(b *testing.B) {
	for _, mode := range []struct {
		name string
		dt   tensor.DType
		grad bool
	}{{"float32", tensor.Float32, false}, {"bf16", tensor.BFloat16, false}, {"bf16-grad", tensor.BFloat16, true}} {
		dt := mode.dt
		b.Run(mode.name, func(b *testing.B) {
			cfg := stepBenchConfig(b)
			m, err := Load(RandomCheckpoint(cfg, 1))
			if err != nil {
				b.Fatal(err)
			}
			if err := m.SetMixedPrecision(dt); err != nil {
				b.Fatal(err)
			}
			m.SetBF16Backward(mode.grad)
			pc := DefaultProcessorConfig()
			proc, err := NewProcessor(pc)
			if err != nil {
				b.Fatal(err)
			}
			pol := &timedPolicy{Policy: &Policy[Prompt]{Model: m, Processor: proc, Prompt: func(p Prompt) Prompt { return p }, Stop: []int32{2}}}
			var data []Prompt
			tok := cfg.Tokens
			for i := range 16 {
				ids := []int32{1, 5, 6, 7, int32(tok.VisionStartID), int32(tok.ImageID), int32(cfg.VisionEndID)}
				for j := range 12 {
					ids = append(ids, int32(200+17*i+j))
				}
				data = append(data, Prompt{IDs: ids, Images: []*RGB{testImage(224, 224, i)}})
			}
			opt, grads, err := m.Training(0)
			if err != nil {
				b.Fatal(err)
			}
			tokens := tprl.DefaultConfig()
			tokens.EnablePerceptionFiltering, tokens.TopPPerceptionTokens = true, 0.4
			tokens.EnableTrajectoryReweighting = true
			l, err := loop.New(loop.Config{
				Steps: 1 << 20, Prompts: 4, Sampling: loop.Sampling{N: 4, MaxTokens: 32, Temperature: 1, TopP: 1},
				Advantage: advantage.DefaultConfig(),
				Update:    tprl.UpdateConfig{Tokens: tokens, Policy: ppo.DefaultPolicyConfig(ppo.Vanilla)},
				Perturb:   perturb.DefaultBlackening(), MiniBatchPrompts: 4, PPOEpochs: 1, UpdateRows: 16, ScoreRows: 16,
				LR: loop.Schedule{LR: 1e-5}, Seed: 3,
			}, loop.Parts[Prompt]{
				Policy: pol, Optimizer: opt, Gradients: grads,
				Rewards: []loop.Reward[Prompt]{{Name: "short", Weight: 1, Func: func(in loop.RewardInputs[Prompt]) ([]float64, error) {
					out := make([]float64, len(in.Completions))
					for i, c := range in.Completions {
						out[i] = float64(len(c.Tokens)%3) / 2
					}
					return out, nil
				}}},
				Data: loop.NewEpochs(data, true, 1),
			})
			if err != nil {
				b.Fatal(err)
			}
			sum := map[string]float64{}
			var cpuRollout, cpuUpdate time.Duration
			for b.Loop() {
				o, p := pol.orig, pol.pert
				c0 := cpuNow()
				res, err := l.Step(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				c1 := cpuNow()
				for _, k := range []string{"timing_s/gen", "timing_s/update_actor", "perf/time_per_step", "response_length/mean"} {
					sum[k] += res.Metrics[k]
				}
				// The CPU time of the rollout and the update: the step's less the scoring passes',
				// split in the ratio of their wall times.
				rest := (c1 - c0) - (pol.orig[1] - o[1]) - (pol.pert[1] - p[1])
				g, u := res.Metrics["timing_s/gen"], res.Metrics["timing_s/update_actor"]
				cpuRollout += time.Duration(float64(rest) * g / (g + u))
				cpuUpdate += time.Duration(float64(rest) * u / (g + u))
				res.Release()
			}
			n := float64(b.N)
			b.ReportMetric(sum["timing_s/gen"]/n, "rollout-s")
			b.ReportMetric(pol.orig[0].Seconds()/n, "score-s")
			b.ReportMetric(pol.pert[0].Seconds()/n, "perturbed-s")
			b.ReportMetric(sum["timing_s/update_actor"]/n, "update-s")
			b.ReportMetric(sum["perf/time_per_step"]/n, "step-s")
			b.ReportMetric(cpuRollout.Seconds()/n, "rollout-cpu-s")
			b.ReportMetric(pol.orig[1].Seconds()/n, "score-cpu-s")
			b.ReportMetric(pol.pert[1].Seconds()/n, "perturbed-cpu-s")
			b.ReportMetric(cpuUpdate.Seconds()/n, "update-cpu-s")
			b.ReportMetric(sum["response_length/mean"]/n, "resp-tokens")
		})
	}
}
