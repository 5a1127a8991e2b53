package main

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/examples/internal/vqa"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// TestCriticReducesValueLoss: on one fixed batch, repeated critic updates (each clipped around
// the values of the update before, as step to step) lower the value loss, and GAE then uses
// values that are not zero.
func TestCriticReducesValueLoss(t *testing.T) {
	tr, err := NewTrainer(tinyConfig(t, t.TempDir(), "optimization.advantage_estimator=gae", "optimization.lam=0.95",
		"worker.critic.optim.lr=3e-3"))
	require.NoError(t, err)
	require.NotNil(t, tr.critic)
	exs := tr.data.Next(16)
	rngs := make([]*rand.Rand, len(exs))
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(1, uint64(i)))
	}
	comps, err := tr.actor.Generate(exs, loop.Sampling{N: 1, MaxTokens: tr.respLen, Temperature: 1, TopP: 1}, rngs)
	require.NoError(t, err)
	lb := &loop.Batch[example]{Prompts: exs, Completions: comps, T: tr.respLen, Temperature: 1}
	b, err := tr.newBatch(exs, lb.Tokens(0, lb.Len()))
	require.NoError(t, err)
	B, T := b.rows, tr.respLen
	rw := make([]float32, B*T)
	for i := range B {
		// A reward that varies between rows, so the critic has something to fit.
		s := vqa.Score(comps[i].Text, exs[i].s.Answer, tr.reward)
		rw[i*T+len(b.resp[i])-1] = float32(s.Overall) + float32(i%3)
	}
	rewards := tensor.Must(tensor.FromFloat32(rw, B, T))
	f32 := func() *tensor.Tensor { return tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, B, T)) }
	var losses []float64
	for range 25 {
		values := f32()
		require.NoError(t, tr.Values(lb, values))
		adv, returns := f32(), f32()
		require.NoError(t, advantage.ComputeWithReturns(adv, returns, advantage.Inputs{Rewards: rewards, Values: values, ResponseMask: b.mask}, tr.adv))
		m, err := tr.Update(context.Background(), nil, lb, b.mask, values, returns)
		require.NoError(t, err)
		losses = append(losses, m["critic/vf_loss"])
	}
	t.Logf("value loss: first %.4f, last %.4f", losses[0], losses[len(losses)-1])
	assert.Less(t, losses[len(losses)-1], 0.5*losses[0], "value loss %v", losses)
	values := f32()
	require.NoError(t, tr.Values(lb, values))
	vm, err := tensor.MaskedMean(values, b.mask)
	require.NoError(t, err)
	assert.NotZero(t, vm)
}

// TestGAERunsAndResumes: the seeds' default estimator trains with the critic, logs its metrics,
// and resumes exactly (the critic and its optimizer are in the checkpoint).
func TestGAERunsAndResumes(t *testing.T) {
	extra := []string{"optimization.advantage_estimator=gae", "optimization.lam=0.95"}
	a, b := t.TempDir(), t.TempDir()
	run(t, tinyConfig(t, a, extra...))
	run(t, tinyConfig(t, b, append(extra, "training.steps=2")...))
	run(t, tinyConfig(t, b, append(extra, "training.find_last_checkpoint=true")...))
	sameRun(t, a, b, 4)
	lines, err := ReadMetrics(a + "/metrics.jsonl")
	require.NoError(t, err)
	for _, k := range []string{"critic/vf_loss", "critic/vf_clipfrac", "critic/values/mean", "critic/returns/mean"} {
		require.NotNil(t, lines[4].Metrics[k], k)
	}
}

// TestAdaptiveControllerMovesTowardTarget: with the divergence in the reward, the adaptive
// controller lowers the coefficient while the measured divergence is below the target and
// raises it once it is above.
func TestAdaptiveControllerMovesTowardTarget(t *testing.T) {
	coefs := func(target string) ([]float64, []float64) {
		// low_var_kl is never negative: the plain kl estimate of 8 sampled responses can be.
		tr, err := NewTrainer(tinyConfig(t, t.TempDir(), "optimization.divergence_type=adaptive", "optimization.divergence_coef=0.1", "optimization.divergence_penalty=low_var_kl",
			"optimization.divergence_target="+target, "optimization.divergence_horizon=10", "worker.actor.optim.lr=1e-2"))
		require.NoError(t, err)
		require.NoError(t, tr.FreezeReference())
		var cs, kls []float64
		for range 4 {
			res, err := tr.Step()
			require.NoError(t, err)
			cs, kls = append(cs, res.Metrics["actor/reward_kl_penalty_coeff"]), append(kls, res.Metrics["actor/reward_kl_penalty"])
		}
		return append(cs, tr.rlState().RewardKLCoef), kls
	}
	// Far above any divergence reached: the coefficient shrinks at every step.
	cs, kls := coefs("100")
	for i := 1; i < len(cs); i++ {
		assert.Less(t, cs[i], cs[i-1], "target 100: coefs %v, divergences %v", cs, kls)
	}
	// Far below: once the policy has moved (divergence > target) the coefficient grows.
	cs, kls = coefs("1e-9")
	assert.Zero(t, kls[0], "step 1 samples with the reference's own weights")
	for i := 2; i < len(cs); i++ {
		require.Greater(t, kls[i-1], 1e-9)
		assert.Greater(t, cs[i], cs[i-1], "target 1e-9: coefs %v, divergences %v", cs, kls)
	}
}

// TestOnlineFilteringKeepsBatchSize: every step has rollout_batch_size groups; the groups kept
// have their mean reward inside the band; the kept fraction is logged.
func TestOnlineFilteringKeepsBatchSize(t *testing.T) {
	cfg := tinyConfig(t, t.TempDir(), "optimization.online_filtering=true", "optimization.filter_key=accuracy",
		"optimization.filter_low=0.2", "optimization.filter_high=1.1", "worker.rollout.n=4")
	tr, err := NewTrainer(cfg)
	require.NoError(t, err)
	// A short warm start so some groups answer right and some do not.
	_, err = tr.WarmStart(context.Background(), NewProgress(&bytes.Buffer{}, "", 0, false))
	require.NoError(t, err)
	require.NoError(t, tr.FreezeReference())
	n, want := cfg.Worker.Rollout.N, cfg.Dataset.RolloutBatchSize
	sawRejection := false
	for range 3 {
		res, err := tr.Step()
		require.NoError(t, err)
		require.Len(t, res.Rollouts, want*n, "batch size kept")
		kf, filled := res.Metrics["filter/kept_fraction"], int(res.Metrics["filter/filled_groups"])
		require.False(t, math.IsNaN(kf))
		if kf < 1 {
			sawRejection = true
		}
		for g := range want - filled {
			var m float64
			for _, r := range res.Rollouts[g*n : (g+1)*n] {
				m += r.Reward.Accuracy
			}
			m /= float64(n)
			assert.True(t, m > 0.2 && m < 1.1, "group %d mean accuracy %v outside the band", g, m)
		}
	}
	assert.True(t, sawRejection, "the band rejected no group: the test shows nothing")
}

func TestLRSchedules(t *testing.T) {
	o := OptimConfig{LR: 1, WarmupSteps: 4, LRSchedulerType: "cosine", MinLRRatio: 0.1}
	assert.Equal(t, 0.25, o.Schedule().At(0, 14))
	assert.Equal(t, 1.0, o.Schedule().At(3, 14))
	assert.InDelta(t, 1.0, o.Schedule().At(4, 14), 1e-12)
	assert.InDelta(t, 0.1+0.9*0.5, o.Schedule().At(9, 14), 1e-12) // halfway through the decay
	assert.InDelta(t, 0.1, o.Schedule().At(14, 14), 1e-12)
	o.LRSchedulerType = "linear"
	assert.InDelta(t, 0.1+0.9*0.5, o.Schedule().At(9, 14), 1e-12)
	o.LRSchedulerType = "constant_with_warmup"
	assert.Equal(t, 0.5, o.Schedule().At(1, 14))
	assert.Equal(t, 1.0, o.Schedule().At(13, 14))
	o = OptimConfig{LR: 2, LRWarmupRatio: 0.5, LRSchedulerType: "constant"}
	assert.Equal(t, 0.4, o.Schedule().At(0, 10)) // 5 warm-up steps
	assert.Equal(t, 2.0, o.Schedule().At(5, 10))
}

// TestScorePart: filter_key picks the reward part.
func TestScorePart(t *testing.T) {
	r := vqa.Reward{Overall: 0.8, Accuracy: 1, Format: 0}
	assert.Equal(t, 1.0, r.Part("accuracy"))
	assert.True(t, math.IsNaN(r.Part("speed")))
}

func TestMDIReward(t *testing.T) {
	assert.Equal(t, 1.0, mdiBalance(1, 2))
	assert.Equal(t, 0.0, mdiBalance(2, 2))
	assert.Equal(t, 0.0, mdiBalance(0.25, 2))
	assert.InDelta(t, 0.5, mdiBalance(math.Sqrt2, 2), 1e-12)
	assert.InDelta(t, 0.5, mdiBalance(1/math.Sqrt2, 2), 1e-12)
	assert.Equal(t, 0.0, mdiBalance(math.NaN(), 2))
	tr := &Trainer{reward: vqa.RewardWeights{Accuracy: 4, Format: 1}}
	tr.cfg.Worker.Reward.MDIWeight = 1
	// 4:1:1 as in TRL-MDI, over 6: right answer, no format, balance 0.75 → (4 + 0 + 0.5) / 6.
	got := tr.withMDI(vqa.Score("Answer: B", "B", tr.reward), 0.75)
	assert.InDelta(t, 4.5/6, got.Overall, 1e-12)
	assert.Equal(t, 1.0, got.Accuracy)
}

// TestOnlineFilteringFillsWhenNothingPasses: a band no group can reach still gives a full
// batch, after maxFilterRounds rounds, filled with rejected groups and counted as such.
func TestOnlineFilteringFillsWhenNothingPasses(t *testing.T) {
	cfg := tinyConfig(t, t.TempDir(), "optimization.online_filtering=true", "optimization.filter_key=accuracy",
		"optimization.filter_low=2", "optimization.filter_high=3", "worker.reward.mdi_weight=0")
	tr, err := NewTrainer(cfg)
	require.NoError(t, err)
	require.NoError(t, tr.FreezeReference())
	res, err := tr.Step()
	require.NoError(t, err)
	want := cfg.Dataset.RolloutBatchSize
	require.Len(t, res.Rollouts, want*cfg.Worker.Rollout.N)
	assert.Equal(t, 0.0, res.Metrics["filter/kept_fraction"])
	const maxFilterRounds = 8 // loop.Filter's default
	assert.Equal(t, float64(maxFilterRounds), res.Metrics["filter/rounds"])
	assert.Equal(t, float64(want), res.Metrics["filter/filled_groups"])
	_, ok := res.Metrics["mdi/balance_mean"]
	assert.False(t, ok, "mdi_weight 0: no MDI pass")
	require.Less(t, maxFilterRounds*want, len(tr.train))
	epoch, pos := tr.data.Position()
	assert.Equal(t, 0, epoch)
	assert.Equal(t, maxFilterRounds*want, pos, "every round drew new prompts")
}
