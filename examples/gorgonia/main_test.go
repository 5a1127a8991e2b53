//go:build !cuda

// gorgonia.org/gorgonia switches to its cuDNN bindings under the cuda tag (see
// examples/internal/vlm/gorgonia_test.go), so this example is built and tested without it.

package main

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
)

// TestStepsRunAndLearn runs three VPPO steps: every loss and gradient norm is finite, the first
// step has responses of mixed reward (so a non-zero gradient), and the weights move.
func TestStepsRunAndLearn(t *testing.T) {
	tr, err := newTrainer(1)
	require.NoError(t, err)
	defer tr.pol.close()
	before := snapshot(tr.pol)
	for s := range 3 {
		st, err := tr.step()
		require.NoError(t, err)
		require.False(t, math.IsNaN(float64(st.loss)) || math.IsInf(float64(st.loss), 0), "step %d loss %v", s+1, st.loss)
		require.False(t, math.IsNaN(st.gradNorm) || math.IsInf(st.gradNorm, 0), "step %d |grad| %v", s+1, st.gradNorm)
		if s == 0 {
			require.Greater(t, st.gradNorm, 0.0, "step 1 has groups of mixed reward")
			require.InDelta(t, 0.5, st.keptFraction, 1e-9, "top_p_perception_tokens 0.5 of T=4 tokens keeps 2 per response")
		}
	}
	after := snapshot(tr.pol)
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
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "step ") {
			steps++
		}
	}
	require.Equal(t, 2, steps, out.String())
}

func snapshot(p *policy) [][]float32 {
	out := make([][]float32, len(p.params))
	for i, nd := range p.params {
		out[i] = append([]float32(nil), nd.Value().Data().([]float32)...)
	}
	return out
}

// TestGradientMatchesFiniteDifferences checks the whole chain — gorgonia's forward, mtrl's
// log-probs, masks, shaping, policy loss and d loss / d logits, the surrogate that feeds that
// into gorgonia, and gorgonia's backward — against central differences of the loss mtrl
// computes, for the largest gradient entry of every weight tensor. It does so at the rollout
// weights (ratio 1) and again after one optimizer step, where ratios differ from 1 and some
// tokens are clipped.
func TestGradientMatchesFiniteDifferences(t *testing.T) {
	tr, err := newTrainer(3)
	require.NoError(t, err)
	defer tr.pol.close()
	tr.nstep++
	r, err := tr.collect()
	require.NoError(t, err)
	for round := range 2 {
		_, upd, err := tr.lossAndGrad(r, true)
		require.NoError(t, err)
		if round == 1 {
			clipped := upd.Metrics["actor/pg_clipfrac_higher"][0] + upd.Metrics["actor/pg_clipfrac_lower"][0]
			require.Greater(t, clipped, 0.0, "after a step some tokens should be clipped: %v", upd.Metrics)
		}
		grads, err := tr.pol.paramGrads()
		require.NoError(t, err)
		grads = clone(grads) // the next runs of the graph overwrite them
		for i, nd := range tr.pol.params {
			w := nd.Value().Data().([]float32)
			j := 0
			for k, g := range grads[i] {
				if math.Abs(float64(g)) > math.Abs(float64(grads[i][j])) {
					j = k
				}
			}
			loss := func(delta float32) float64 {
				old := w[j]
				w[j] = old + delta
				defer func() { w[j] = old }()
				mr, _, err := tr.lossAndGrad(r, false)
				require.NoError(t, err)
				return float64(mr.Loss)
			}
			const h = 1e-2
			fd := (loss(h) - loss(-h)) / (2 * h)
			g := float64(grads[i][j])
			t.Logf("round %d %s[%d]: analytic %.6g, central difference %.6g", round, nd.Name(), j, g, fd)
			require.NotZero(t, g, "%s has an all-zero gradient", nd.Name())
			// The loss is float32: a rounding of ~1e-7 relative over 2h = 0.02 and the O(h²)
			// truncation stay far below 1e-3 of these gradients (observed: below 1e-4).
			require.InDelta(t, g, fd, 1e-3*math.Abs(g), "round %d %s[%d]", round, nd.Name(), j)
		}
		if round == 0 {
			_, _, err := tr.lossAndGrad(r, true)
			require.NoError(t, err)
			require.NoError(t, tr.solver.Step(G.NodesToValueGrads(tr.pol.params)))
		}
	}
}

func clone(gs [][]float32) [][]float32 {
	out := make([][]float32, len(gs))
	for i, g := range gs {
		out[i] = append([]float32(nil), g...)
	}
	return out
}
