package loop_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// setup is the Example's task and policy with a configuration the tests vary.
type setup struct {
	cfg     loop.Config
	model   *tiny
	rewards []loop.Reward[prompt]
	data    *loop.Epochs[prompt]
}

func newSetup(tokenOpts ...func(*tprl.Config)) *setup {
	var data []prompt
	for i := range 64 {
		a := int32(i % 4)
		data = append(data, prompt{pixel: uint8(64*int(a) + 10 + i%40), answer: a})
	}
	m := &tiny{w: tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 4*respLen, vocab))}
	m.g = tensor.Must(tensor.NewLike(m.w, tensor.Float32))
	tokens := tprl.DefaultConfig()
	tokens.EnablePerceptionFiltering, tokens.EnableTrajectoryReweighting = true, true
	for _, o := range tokenOpts {
		o(&tokens)
	}
	return &setup{
		cfg: loop.Config{
			Steps: 4, Prompts: 8, Sampling: loop.Sampling{N: 4, MaxTokens: respLen, Temperature: 1, TopP: 1},
			Advantage: advantage.DefaultConfig(),
			Update:    tprl.UpdateConfig{Tokens: tokens, Policy: ppo.DefaultPolicyConfig(ppo.Vanilla)},
			Perturb:   perturb.Masking{}, MiniBatchPrompts: 4, PPOEpochs: 2, UpdateRows: 4, ScoreRows: 8,
			MaxGradNorm: 1, LR: loop.Schedule{LR: 0.05, Kind: loop.Cosine, WarmupSteps: 2}, Seed: 7,
		},
		model: m,
		rewards: []loop.Reward[prompt]{{Name: "accuracy", Weight: 1, Func: func(in loop.RewardInputs[prompt]) ([]float64, error) {
			out := make([]float64, len(in.Prompts))
			for i, c := range in.Completions {
				if c.Tokens[0] == in.Prompts[i].answer {
					out[i] = 1
				}
			}
			return out, nil
		}}},
		data: loop.NewEpochs(data, true, 3),
	}
}

func (s *setup) parts(comm collective.Comm) loop.Parts[prompt] {
	return loop.Parts[prompt]{Policy: loop.FromLogits[prompt](s.model), Rewards: s.rewards, Data: s.data, Comm: comm}
}

// steps runs n steps and returns their metrics without the timings.
func steps(t *testing.T, l *loop.Loop[prompt], n int) []map[string]float64 {
	t.Helper()
	var out []map[string]float64
	for range n {
		res, err := l.Step(context.Background())
		require.NoError(t, err)
		m := map[string]float64{}
		for k, v := range res.Metrics {
			if !strings.HasPrefix(k, "perf/") && !strings.HasPrefix(k, "timing_s/") {
				m[k] = v
			}
		}
		out = append(out, m)
		res.Release()
	}
	return out
}

func weights(m *tiny) []float32 {
	w, _ := m.w.Float32s()
	return append([]float32(nil), w...)
}

// TestRanksEqualOneRank: two data-parallel ranks take the steps of one, bit for bit: the same
// metrics and the same weights on every replica.
func TestRanksEqualOneRank(t *testing.T) {
	// The VPPO setup, and the random token mask, whose rows are keyed by their index in the
	// step's batch and so do not depend on which rank holds them.
	random := func(c *tprl.Config) {
		c.EnablePerceptionFiltering, c.EnableRandomFiltering, c.TopPRandomTokens = false, true, 0.5
	}
	for name, opts := range map[string][]func(*tprl.Config){"vppo": nil, "random": {random}} {
		t.Run(name, func(t *testing.T) {
			one := newSetup(opts...)
			l, err := loop.New(one.cfg, one.parts(nil))
			require.NoError(t, err)
			want := steps(t, l, 3)
			if name == "random" {
				require.InDelta(t, 0.5, want[0]["actor/random_token_fraction"], 0.1)
			}

			var got [2][]map[string]float64
			var ws [2][]float32
			err = collective.Run(context.Background(), 2, func(ctx context.Context, c collective.Comm) error {
				s := newSetup(opts...)
				l, err := loop.New(s.cfg, s.parts(c))
				if err != nil {
					return err
				}
				got[c.Rank()] = steps(t, l, 3)
				ws[c.Rank()] = weights(s.model)
				return nil
			})
			require.NoError(t, err)
			for r := range 2 {
				require.Equal(t, weights(one.model), ws[r], "rank %d", r)
				for i := range want {
					assert.Equal(t, want[i], got[r][i], "rank %d step %d", r, i+1)
				}
			}
		})
	}
}

// TestResumeIsExact: a run stopped after two steps and rebuilt from the loop's State, the
// weights, the optimizer's moments and the data position takes the same third and fourth
// steps as the run that went on.
func TestResumeIsExact(t *testing.T) {
	a := newSetup()
	opt, err := loop.NewHostAdamW(a.model.Params(), 0.9, 0.999, 1e-8, 0.01)
	require.NoError(t, err)
	pa := a.parts(nil)
	pa.Optimizer = opt
	la, err := loop.New(a.cfg, pa)
	require.NoError(t, err)
	steps(t, la, 2)
	state, w := la.State(), weights(a.model)
	m, v, adamT := clone(opt.M), clone(opt.V), opt.T
	epoch, pos := a.data.Position()
	want := steps(t, la, 2)

	b := newSetup()
	bw, _ := b.model.w.Float32s()
	copy(bw, w)
	optB, err := loop.NewHostAdamW(b.model.Params(), 0.9, 0.999, 1e-8, 0.01)
	require.NoError(t, err)
	optB.M, optB.V, optB.T = m, v, adamT
	require.NoError(t, b.data.Seek(epoch, pos))
	pb := b.parts(nil)
	pb.Optimizer = optB
	lb, err := loop.New(b.cfg, pb)
	require.NoError(t, err)
	require.NoError(t, lb.Restore(state))
	assert.Equal(t, want, steps(t, lb, 2))
	assert.Equal(t, weights(a.model), weights(b.model))
}

func clone(x [][]float32) [][]float32 {
	out := make([][]float32, len(x))
	for i, v := range x {
		out[i] = append([]float32(nil), v...)
	}
	return out
}

// TestRewardsWeightedAndNoScore: a row's reward is the weighted sum of the functions that
// scored it (NaN: no score), and reward/<name> averages the scored rows only.
func TestRewardsWeightedAndNoScore(t *testing.T) {
	s := newSetup()
	s.rewards = append(s.rewards, loop.Reward[prompt]{Name: "even_rows", Weight: 0.5, Func: func(in loop.RewardInputs[prompt]) ([]float64, error) {
		out := make([]float64, len(in.Prompts))
		for i := range out {
			out[i] = math.NaN()
			if i%2 == 0 {
				out[i] = 1
			}
		}
		in.Metrics["even_rows/calls"] = 1
		return out, nil
	}})
	l, err := loop.New(s.cfg, s.parts(nil))
	require.NoError(t, err)
	res, err := l.Step(context.Background())
	require.NoError(t, err)
	defer res.Release()
	acc := res.RewardParts["accuracy"]
	var sum float64
	for i, r := range res.Rewards {
		want := acc[i]
		if i%2 == 0 {
			want += 0.5
		}
		assert.Equal(t, want, r, "row %d", i)
		sum += acc[i]
	}
	assert.Equal(t, 1.0, res.Metrics["reward/even_rows"], "the mean of the scored rows")
	assert.InDelta(t, sum/float64(len(acc)), res.Metrics["reward/accuracy"], 1e-15)
	assert.Equal(t, 1.0, res.Metrics["even_rows/calls"])
	// Each response's reward sits at its last token: the GRPO advantages of a group are not all 0.
	adv, _ := res.Advantages.Float32s()
	nonzero := false
	for _, a := range adv {
		nonzero = nonzero || a != 0
	}
	assert.True(t, nonzero)
}

// TestFilterFillsWhenNothingPasses: a band no group reaches gives a full batch after
// MaxRounds rounds, filled with rejected groups and counted.
func TestFilterFillsWhenNothingPasses(t *testing.T) {
	s := newSetup()
	s.cfg.Filter = &loop.Filter{Key: "accuracy", Low: 2, High: 3, MaxRounds: 3}
	l, err := loop.New(s.cfg, s.parts(nil))
	require.NoError(t, err)
	res, err := l.Step(context.Background())
	require.NoError(t, err)
	defer res.Release()
	assert.Equal(t, s.cfg.Prompts*s.cfg.Sampling.N, res.Batch.Len())
	assert.Equal(t, 0.0, res.Metrics["filter/kept_fraction"])
	assert.Equal(t, 3.0, res.Metrics["filter/rounds"])
	assert.Equal(t, float64(s.cfg.Prompts), res.Metrics["filter/filled_groups"])
	_, pos := s.data.Position()
	assert.Equal(t, 3*s.cfg.Prompts, pos, "every round drew new prompts")
}

// TestRewardKL: with a frozen copy of the policy as the reference, the divergence in the reward
// is 0 at the first step (same weights) and positive once the policy has moved.
func TestRewardKL(t *testing.T) {
	s := newSetup()
	ref := &tiny{w: tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 4*respLen, vocab))}
	s.cfg.RewardKL = &loop.RewardKL{Kind: divergence.LowVarKL, Controller: divergence.ControllerConfig{Coef: 0.1}}
	p := s.parts(nil)
	p.Reference = loop.FromLogits[prompt](ref)
	l, err := loop.New(s.cfg, p)
	require.NoError(t, err)
	m := steps(t, l, 3)
	assert.Equal(t, 0.0, m[0]["actor/reward_kl_penalty"])
	assert.Greater(t, m[2]["actor/reward_kl_penalty"], 0.0)
	assert.Equal(t, 0.1, m[2]["actor/reward_kl_penalty_coeff"])
	assert.Equal(t, 0.1, l.State().RewardKLCoef)
}

// TestNewRejects: every missing or inconsistent part is a clear error, not a panic at a step.
func TestNewRejects(t *testing.T) {
	for name, c := range map[string]struct {
		edit func(*loop.Config, *loop.Parts[prompt])
		want string
	}{
		"no policy":       {func(_ *loop.Config, p *loop.Parts[prompt]) { p.Policy = nil }, "Policy"},
		"no rewards":      {func(_ *loop.Config, p *loop.Parts[prompt]) { p.Rewards = nil }, "no reward"},
		"repeated reward": {func(_ *loop.Config, p *loop.Parts[prompt]) { p.Rewards = append(p.Rewards, p.Rewards[0]) }, "repeated"},
		"reserved name":   {func(_ *loop.Config, p *loop.Parts[prompt]) { p.Rewards[0].Name = "overall" }, "reserved"},
		"NaN weight":      {func(_ *loop.Config, p *loop.Parts[prompt]) { p.Rewards[0].Weight = math.NaN() }, "weight"},
		"KL without ref":  {func(c *loop.Config, _ *loop.Parts[prompt]) { c.Update.KLLoss = &ppo.KLConfig{Coef: 0.1} }, "Reference"},
		"GAE without critic": {func(c *loop.Config, _ *loop.Parts[prompt]) {
			c.Advantage.Estimator = advantage.EstimatorGAE
		}, "Critic"},
		"unknown filter key": {func(c *loop.Config, _ *loop.Parts[prompt]) { c.Filter = &loop.Filter{Key: "nope", Low: 0, High: 1} }, "nope"},
		"mini-batch":         {func(c *loop.Config, _ *loop.Parts[prompt]) { c.MiniBatchPrompts = 3 }, "MiniBatchPrompts"},
		"top-p":              {func(c *loop.Config, _ *loop.Parts[prompt]) { c.Sampling.TopP = 0 }, "TopP"},
		"full reward KL": {func(c *loop.Config, p *loop.Parts[prompt]) {
			c.RewardKL = &loop.RewardKL{Kind: divergence.Full}
			p.Reference = p.Policy
		}, "whole distribution"},
		"not trainable": {func(_ *loop.Config, p *loop.Parts[prompt]) { p.Policy = opaque{p.Policy} }, "Trainable"},
		"ranks > rows":  {func(c *loop.Config, _ *loop.Parts[prompt]) { c.Update.WorldSize = 17 }, "at least one row"},
	} {
		s := newSetup()
		p := s.parts(nil)
		c.edit(&s.cfg, &p)
		_, err := loop.New(s.cfg, p)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), c.want, name)
	}
}

// opaque hides a policy's Params.
type opaque struct{ loop.Policy[prompt] }

// TestPolicyErrorsNameTheStep: a policy that returns more tokens than MaxTokens is an error
// naming the step, not a silent cut.
func TestPolicyErrorsNameTheStep(t *testing.T) {
	s := newSetup()
	s.cfg.Sampling.MaxTokens = 1 // the tiny policy samples up to 2 tokens
	l, err := loop.New(s.cfg, s.parts(nil))
	require.NoError(t, err)
	_, err = l.Step(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "step 1")
	assert.Contains(t, err.Error(), "MaxTokens")
}

// short gives fewer prompts than asked.
type short struct{ items []prompt }

func (s short) Next(n int) []prompt { return s.items[:min(n, len(s.items))] }

// TestShortDataIsAnError: a data source that runs short is an error at the step, not a panic
// in the update.
func TestShortDataIsAnError(t *testing.T) {
	s := newSetup()
	p := s.parts(nil)
	p.Data = short{s.data.Items[:3]}
	l, err := loop.New(s.cfg, p)
	require.NoError(t, err)
	_, err = l.Step(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "3 prompts, want 8")
}
