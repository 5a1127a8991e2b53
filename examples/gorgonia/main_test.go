//go:build !cuda

// gorgonia.org/gorgonia switches to its cuDNN bindings under the cuda tag (see
// examples/internal/vlm/gorgonia_test.go), so this example is built and tested without it.

package main

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// TestStepsRunAndLearn runs three loop steps: every loss and gradient norm is finite, the first
// step has responses of mixed reward (so a non-zero gradient), the perception mask keeps half
// the tokens, and the weights move; run prints one line per step.
func TestStepsRunAndLearn(t *testing.T) {
	l, m, err := newLoop(3, 1)
	require.NoError(t, err)
	defer m.close()
	before := snapshot(m)
	for s := range 3 {
		res, err := l.Step(context.Background())
		require.NoError(t, err)
		x := res.Metrics
		for _, k := range []string{"actor/pg_loss", "actor/grad_norm", "actor/ppo_kl", "actor/clipfrac"} {
			v, ok := x[k]
			require.True(t, ok && !math.IsNaN(v) && !math.IsInf(v, 0), "step %d %s = %v (present %v)", s+1, k, v, ok)
		}
		if s == 0 {
			require.Greater(t, x["actor/grad_norm"], 0.0, "step 1 has groups of mixed reward")
			require.InDelta(t, 0.5, x["actor/perception_token_fraction"], 1e-9, "top_p_perception_tokens 0.5 of T=4 tokens keeps 2 per response")
		}
		res.Release()
	}
	after := snapshot(m)
	moved := false
	for i := range before {
		for j := range before[i] {
			moved = moved || before[i][j] != after[i][j]
		}
	}
	require.True(t, moved, "the solver did not change any weight")

	var out bytes.Buffer
	require.NoError(t, run(&out, 2, 1))
	steps := 0
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "step ") {
			steps++
		}
	}
	require.Equal(t, 2, steps, out.String())
}

// TestGradientMatchesFiniteDifferences checks the whole chain — gorgonia's forward, the
// log-probs of loop.FromLogits, tprl's masks, shaping, policy loss and d loss / d log-probs, the
// adapter's d loss / d logits, the surrogate that feeds it into gorgonia, and gorgonia's
// backward — against central differences of the loss mtrl computes, for the largest gradient
// entry of every weight tensor. It does so at ratio 1 and again after one optimizer step, where
// ratios differ from 1 and some tokens are clipped.
func TestGradientMatchesFiniteDifferences(t *testing.T) {
	l, m, err := newLoop(1, 3)
	require.NoError(t, err)
	defer m.close()
	res, err := l.Step(context.Background()) // a batch with its mask, perception score, advantages
	require.NoError(t, err)
	defer res.Release()
	b, policy := res.Batch, loop.FromLogits[prompt](m)
	old := newBT()
	require.NoError(t, policy.LogProbs(b, 0, B, loop.Input{}, old, nil)) // ratio 1 at these weights
	upd, err := l.Config().Update.Prepare(tprl.MiniBatch{ResponseMask: res.ResponseMask, OldLogProbs: old,
		Advantages: res.Advantages, PerceptionScore: res.PerceptionScore})
	require.NoError(t, err)
	defer upd.Release()
	// loss is mtrl's loss of the current weights; with backward, gorgonia's gradients then hold
	// d loss / d weight (gorgonia adds to them: they are zero before).
	loss := func(backward bool) float64 {
		logp, grad := newBT(), newBT()
		var pass loop.Pass
		var err error
		if backward {
			pass, err = policy.Forward(b, 0, B, logp, nil)
		} else {
			err = policy.LogProbs(b, 0, B, loop.Input{}, logp, nil)
		}
		require.NoError(t, err)
		mr, err := upd.MicroBatch(grad, tprl.MicroInputs{LogProbs: logp}, 0, B)
		require.NoError(t, err)
		defer mr.Release()
		if pass != nil {
			require.NoError(t, pass.Backward(grad, nil))
			pass.Release()
		}
		return float64(mr.Loss)
	}
	opt := &adam{m: m, solver: G.NewAdamSolver()}
	for round := range 2 {
		gs, err := m.grads()
		require.NoError(t, err)
		for _, g := range gs {
			require.Equal(t, 0.0, norm(g), "the optimizer leaves the gradients zero")
		}
		loss(true)
		if round == 1 {
			last := func(k string) float64 { v := upd.Metrics[k]; return v[len(v)-1] }
			clipped := last("actor/pg_clipfrac_higher") + last("actor/pg_clipfrac_lower")
			require.Greater(t, clipped, 0.0, "after a step some tokens should be clipped: %v", upd.Metrics)
		}
		grads := clone(gs) // the loss evaluations below leave gorgonia's gradients alone; a copy anyway
		for i, nd := range m.params {
			w := nd.Value().Data().([]float32)
			j := 0
			for k, g := range grads[i] {
				if math.Abs(float64(g)) > math.Abs(float64(grads[i][j])) {
					j = k
				}
			}
			at := func(delta float32) float64 {
				saved := w[j]
				w[j] = saved + delta
				defer func() { w[j] = saved }()
				return loss(false)
			}
			// The clipped loss is piecewise smooth: where a token's ratio crosses a clip bound
			// within ±h the one-sided slopes disagree and the central difference averages two
			// pieces. Halve h (at most four times, from 1e-2) until they agree to 2%.
			l0 := loss(false)
			h := float32(1e-2)
			for ; h > 1e-3; h /= 2 {
				right, left := (at(h)-l0)/float64(h), (l0-at(-h))/float64(h)
				if math.Abs(right-left) <= 0.02*math.Max(math.Abs(right), math.Abs(left)) {
					break
				}
			}
			fd := (at(h) - at(-h)) / float64(2*h)
			g := float64(grads[i][j])
			t.Logf("round %d %s[%d]: analytic %.6g, central difference %.6g (h %.3g)", round, nd.Name(), j, g, fd, h)
			require.NotZero(t, g, "%s has an all-zero gradient", nd.Name())
			// The loss is float32: its rounding (2^-24 relative, one ulp at each end) over 2h,
			// plus 1e-3 of the gradient for the O(h²) truncation.
			tol := 1e-3*math.Abs(g) + 2*math.Abs(l0)*0x1p-24/float64(2*h)
			require.InDelta(t, g, fd, tol, "round %d %s[%d]", round, nd.Name(), j)
		}
		if round == 0 {
			_, err := opt.Step(0.03, 0)
			require.NoError(t, err)
		}
	}
}

// TestMicroBatchesSum checks the model's Gradients and its padding: two micro-batches of B/2
// responses (each padded to the graph's B) collect and reduce to the gradient of one
// micro-batch of B.
func TestMicroBatchesSum(t *testing.T) {
	l, m, err := newLoop(1, 5)
	require.NoError(t, err)
	defer m.close()
	res, err := l.Step(context.Background())
	require.NoError(t, err)
	defer res.Release()
	b, policy := res.Batch, loop.FromLogits[prompt](m)
	grads, err := newGradients(m)
	require.NoError(t, err)
	upd, err := l.Config().Update.Prepare(tprl.MiniBatch{ResponseMask: res.ResponseMask, OldLogProbs: res.OldLogProbs,
		Advantages: res.Advantages, PerceptionScore: res.PerceptionScore})
	require.NoError(t, err)
	defer upd.Release()
	backward := func(lo, hi int) {
		logp, grad := newBT(), newBT()
		logp, grad = tensor.Must(logp.Rows(lo, hi)), tensor.Must(grad.Rows(lo, hi))
		pass, err := policy.Forward(b, lo, hi, logp, nil)
		require.NoError(t, err)
		defer pass.Release()
		mr, err := upd.MicroBatch(grad, tprl.MicroInputs{LogProbs: logp}, lo, hi)
		require.NoError(t, err)
		require.NoError(t, mr.Release())
		require.NoError(t, pass.Backward(grad, nil))
		require.NoError(t, grads.Collect())
	}
	reduce := func() [][]float32 {
		_, err := grads.Reduce(context.Background(), nil, 1)
		require.NoError(t, err)
		gs, err := m.grads()
		require.NoError(t, err)
		defer func() {
			for _, g := range gs {
				clear(g) // as the optimizer step does
			}
		}()
		return clone(gs)
	}
	backward(0, B)
	whole := reduce()
	backward(0, B/2)
	backward(B/2, B)
	halves := reduce()
	for i, g := range whole {
		require.Greater(t, norm(g), 0.0)
		for j := range g {
			require.InDelta(t, g[j], halves[i][j], 1e-6*norm(g), "%s[%d]", m.params[i].Name(), j)
		}
	}
	_, err = grads.Reduce(context.Background(), nil, 1)
	require.Error(t, err, "a reduce with nothing collected")
	greedy := l.Config().Sampling
	greedy.Temperature = 0
	_, err = m.Generate(make([]prompt, B+1), greedy, nil)
	require.ErrorContains(t, err, "more than the graph's")
}

// TestAdamFollowsTheSchedule checks the optimizer: the loop's learning rate, not the one the
// solver was built with, sets the step, and a non-finite gradient skips it.
func TestAdamFollowsTheSchedule(t *testing.T) {
	m, err := newModel(B, 7)
	require.NoError(t, err)
	defer m.close()
	fill := func() {
		ps := (&images{rng: rand.New(rand.NewPCG(7, 7))}).Next(B)
		imgs := make([][]uint8, B)
		d := make([]float32, B*T*V)
		for i := range imgs {
			imgs[i] = ps[i].image
		}
		for i := range d {
			d[i] = float32(i%5) - 2
		}
		require.NoError(t, m.backward(imgs, tensor.Must(tensor.FromFloat32(d, B, T, V))))
	}
	opt := &adam{m: m, solver: G.NewAdamSolver(G.WithLearnRate(1))}
	const lr = 0.01
	fill()
	before := snapshot(m)
	n, err := opt.Step(lr, 0)
	require.NoError(t, err)
	require.Greater(t, n, 0.0)
	after := snapshot(m)
	// Adam's first step moves a weight by lr·g/(|g| + eps): lr for every non-tiny gradient.
	var most float64
	for i := range before {
		for j := range before[i] {
			most = max(most, math.Abs(float64(after[i][j]-before[i][j])))
		}
	}
	require.InDelta(t, lr, most, 1e-5)
	require.Equal(t, 1, opt.Steps())

	fill()
	gs, err := m.grads()
	require.NoError(t, err)
	gs[0][0] = float32(math.NaN())
	n, err = opt.Step(lr, 1)
	require.NoError(t, err)
	require.True(t, math.IsNaN(n), "norm %v", n)
	require.Equal(t, after, snapshot(m), "a skipped step leaves the weights")
	require.Equal(t, 1, opt.Steps())
	for _, g := range gs {
		require.Equal(t, 0.0, norm(g), "a skipped step zeroes the gradients")
	}
}

func newBT() *tensor.Tensor { return tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, B, T)) }

func snapshot(m *model) [][]float32 {
	out := make([][]float32, len(m.params))
	for i, nd := range m.params {
		out[i] = append([]float32(nil), nd.Value().Data().([]float32)...)
	}
	return out
}

func clone(gs [][]float32) [][]float32 {
	out := make([][]float32, len(gs))
	for i, g := range gs {
		out[i] = append([]float32(nil), g...)
	}
	return out
}

func norm(g []float32) float64 {
	var s float64
	for _, x := range g {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}
