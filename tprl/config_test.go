package tprl

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/stretchr/testify/require"
)

func TestUnionMask(t *testing.T) {
	a := f32(t, []float32{1, 0, 0, 0, 0, 0}, 2, 3)
	b := f32(t, []float32{0, 1, 0, 0, 0, 0}, 2, 3)
	ent := f32(t, []float32{1, 2, 3, 4, 5, 6}, 2, 3)
	score := f32(t, []float32{10, 20, 30, 40, 50, 60}, 2, 3)
	mask := f32(t, []float32{1, 1, 1, 0, 0, 0}, 2, 3)
	dst := zeros(t, 2, 3)
	s, err := UnionMask(dst, a, b, ent, score, mask)
	require.NoError(t, err)
	require.Equal(t, []float32{1, 1, 0, 0, 0, 0}, host(t, dst))
	require.Equal(t, CombinedStats{Valid: 3, Selected: 2, EntropySelectedMean: 1.5, EntropyRejectedMean: 3,
		PerceptionSelectedMean: 15, PerceptionRejectedMean: 30}, s)
	require.InDelta(t, 2.0/3, s.Metrics()["actor/combined_token_fraction"], 1e-7)

	// dst may alias an input; empty sets give NaN, always logged.
	all := f32(t, []float32{1, 1, 1, 0, 0, 0}, 2, 3)
	s, err = UnionMask(a, a, all, ent, score, mask)
	require.NoError(t, err)
	require.Equal(t, []float32{1, 1, 1, 0, 0, 0}, host(t, a))
	m := s.Metrics()
	require.Len(t, m, 5)
	require.True(t, math.IsNaN(m["actor/combined_entropy_mean_rejected"]))
	require.True(t, math.IsNaN(m["actor/combined_perception_mean_rejected"]))

	none := zeros(t, 2, 3)
	s, err = UnionMask(dst, none, none, ent, score, zeros(t, 2, 3))
	require.NoError(t, err)
	require.True(t, math.IsNaN(float64(s.TokenFraction())))
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, Config{}.Validate())
	require.NoError(t, DefaultConfig().Validate())
	for _, tc := range []struct {
		key string
		c   Config
	}{
		{"top_p_entropy_tokens", Config{TopPEntropyTokens: 1.5}},
		{"top_p_entropy_tokens", Config{TopPEntropyTokens: math.NaN()}},
		{"top_p_perception_tokens", Config{TopPPerceptionTokens: -0.1}},
		{"trajectory_scaling_min", Config{TrajectoryScalingMin: 2}},
		{"trajectory_shaping_scope", Config{TrajectoryShapingScope: 7}},
	} {
		err := tc.c.Validate()
		require.ErrorIs(t, err, tensor.ErrParam)
		require.Contains(t, err.Error(), tc.key)
	}
}

func TestEnumsRoundTrip(t *testing.T) {
	for _, f := range []Filter{EntropyFilter, PerceptionFilter} {
		g, err := ParseFilter(f.String())
		require.NoError(t, err)
		require.Equal(t, f, g)
	}
	for _, s := range []ShapingScope{GlobalScope, PerMicroBatchScope} {
		g, err := ParseShapingScope(s.String())
		require.NoError(t, err)
		require.Equal(t, s, g)
	}
	_, err := ParseFilter("Entropy")
	require.ErrorIs(t, err, tensor.ErrParam)
	_, err = ParseShapingScope("device")
	require.ErrorIs(t, err, tensor.ErrParam)
	require.Equal(t, "Filter(9)", Filter(9).String())
	require.Equal(t, "ShapingScope(-1)", ShapingScope(-1).String())

	// Text (un)marshalling, e.g. through JSON/YAML.
	c := DefaultConfig()
	c.TrajectoryShapingScope = PerMicroBatchScope
	b, err := json.Marshal(c)
	require.NoError(t, err)
	require.Contains(t, string(b), `"trajectory_shaping_scope":"per_micro_batch"`)
	var d Config
	require.NoError(t, json.Unmarshal(b, &d))
	require.Equal(t, c, d)
	require.Error(t, json.Unmarshal([]byte(`{"trajectory_shaping_scope":"nope"}`), &d))
}

func FuzzParseShapingScope(f *testing.F) {
	for _, s := range []string{"", "global", "per_micro_batch", "Global", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseShapingScope(s)
		if err != nil {
			require.ErrorIs(t, err, tensor.ErrParam)
			return
		}
		if s != "" {
			require.Equal(t, s, v.String())
		}
	})
}

func applyBatch(t *testing.T, r *rand.Rand, rows, cols int) Batch {
	ent := randValues(r, rows*cols, false)
	for i := range ent {
		ent[i] = float32(math.Abs(float64(ent[i])))
	}
	return Batch{
		ResponseMask: f32(t, randMask(r, rows, cols), rows, cols),
		Entropy:      f32(t, ent, rows, cols),
		OldLogProbs:  f32(t, randLogProbs(r, rows*cols), rows, cols),
		AugLogProbs:  f32(t, randLogProbs(r, rows*cols), rows, cols),
		Advantages:   f32(t, randValues(r, rows*cols, false), rows, cols),
	}
}

func TestApply(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	rows, cols := 12, 20
	b := applyBatch(t, r, rows, cols)

	// Nothing enabled: no mask, advantages untouched, no metrics.
	res, err := Config{}.Apply(b)
	require.NoError(t, err)
	require.Nil(t, res.LossTokenMask)
	require.Same(t, b.Advantages, res.Advantages)
	require.Empty(t, res.Metrics)

	// Everything on, 3 micro-batches: metrics appended per micro-batch; masks equal to the
	// single-call ops.
	c := DefaultConfig()
	c.EnableEntropyFiltering, c.EnablePerceptionFiltering, c.EnableTrajectoryReweighting = true, true, true
	b.MicroBatchSize = 4
	res, err = c.Apply(b)
	require.NoError(t, err)
	require.Len(t, res.Metrics["actor/scaling_factor_mean"], 3)
	require.Len(t, res.Metrics["actor/combined_token_fraction"], 3)
	require.Len(t, res.Shaping, 3)
	em, pm, ltm, score := zeros(t, rows, cols), zeros(t, rows, cols), zeros(t, rows, cols), zeros(t, rows, cols)
	_, err = EntropyMask(em, nil, b.Entropy, b.ResponseMask, 0.2)
	require.NoError(t, err)
	_, err = PerceptionMask(score, pm, nil, b.OldLogProbs, b.AugLogProbs, b.ResponseMask, 0.2)
	require.NoError(t, err)
	_, err = UnionMask(ltm, em, pm, b.Entropy, score, b.ResponseMask)
	require.NoError(t, err)
	require.Equal(t, host(t, em), host(t, res.EntropyMask))
	require.Equal(t, host(t, pm), host(t, res.PerceptionMask))
	require.Equal(t, host(t, ltm), host(t, res.LossTokenMask))
	require.Equal(t, host(t, score), host(t, res.PerceptionScore))

	// GlobalScope: shaped advantages independent of the micro-batch size.
	b.MicroBatchSize = 0
	res2, err := c.Apply(b)
	require.NoError(t, err)
	require.Equal(t, host(t, res.Advantages), host(t, res2.Advantages))
	require.Len(t, res2.Metrics["actor/scaling_factor_mean"], 1)

	// Shaping alone works by default; the reference quirk makes it a no-op.
	only := DefaultConfig()
	only.EnableTrajectoryReweighting = true
	res3, err := only.Apply(b)
	require.NoError(t, err)
	require.Nil(t, res3.LossTokenMask)
	require.Equal(t, host(t, res2.Advantages), host(t, res3.Advantages))
	require.Contains(t, res3.Metrics, "actor/scaling_factor_mean")
	only.ShapingRequiresPerception = true
	res4, err := only.Apply(b)
	require.NoError(t, err)
	require.Same(t, b.Advantages, res4.Advantages)
	require.Empty(t, res4.Metrics)

	// Precomputed statistics are used as given.
	st := EmptyShapingStats()
	b.ShapingStats = &st
	res5, err := only.Apply(Batch{ResponseMask: b.ResponseMask, OldLogProbs: b.OldLogProbs, AugLogProbs: b.AugLogProbs, Advantages: b.Advantages, ShapingStats: &st})
	require.NoError(t, err)
	require.Equal(t, host(t, b.Advantages), host(t, res5.Advantages))
	_ = res5
}

// Bad inputs: every error wraps a sentinel and names the op and the argument.
func TestBadInputs(t *testing.T) {
	m23 := f32(t, make([]float32, 6), 2, 3)
	v23 := f32(t, make([]float32, 6), 2, 3)
	v32 := f32(t, make([]float32, 6), 3, 2)
	v6 := f32(t, make([]float32, 6), 6)
	d23 := zeros(t, 2, 3)
	k2, k3 := int32s(t, 2), int32s(t, 3)
	f2 := zeros(t, 2)
	i23, _ := tensor.New(tensor.CPU(), tensor.Int32, 2, 3)
	opt := ShapingOptions{ScalingMin: 0.5}
	cases := []struct {
		name, op, arg string
		kind          error
		call          func() error
	}{
		{"entropy 1-D", "tprl.EntropyMask", "entropy", tensor.ErrShape, func() error { _, err := EntropyMask(v6, nil, v6, v6, 0.5); return err }},
		{"entropy nil", "tprl.EntropyMask", "entropy", tensor.ErrShape, func() error { _, err := EntropyMask(d23, nil, nil, m23, 0.5); return err }},
		{"mask shape", "tprl.EntropyMask", "mask", tensor.ErrShape, func() error { _, err := EntropyMask(d23, nil, v23, v32, 0.5); return err }},
		{"dst shape", "tprl.EntropyMask", "dst", tensor.ErrShape, func() error { _, err := EntropyMask(v32, nil, v23, m23, 0.5); return err }},
		{"mask dtype", "tprl.EntropyMask", "mask", tensor.ErrDType, func() error { _, err := EntropyMask(d23, nil, v23, i23, 0.5); return err }},
		{"k shape", "tprl.EntropyMask", "k", tensor.ErrShape, func() error { _, err := EntropyMask(d23, k3, v23, m23, 0.5); return err }},
		{"k dtype", "tprl.EntropyMask", "k", tensor.ErrDType, func() error { _, err := EntropyMask(d23, f2, v23, m23, 0.5); return err }},
		{"p > 1", "tprl.EntropyMask", "p", tensor.ErrParam, func() error { _, err := EntropyMask(d23, k2, v23, m23, 1.01); return err }},
		{"p < 0", "tprl.SelectTopP", "p", tensor.ErrParam, func() error { _, err := SelectTopP(d23, k2, v23, m23, -0.1, EntropyFilter); return err }},
		{"p NaN", "tprl.PerceptionMask", "p", tensor.ErrParam, func() error {
			_, err := PerceptionMask(nil, d23, nil, v23, v23, m23, float32(math.NaN()))
			return err
		}},
		{"filter", "tprl.SelectTopP", "f", tensor.ErrParam, func() error { _, err := SelectTopP(d23, k2, v23, m23, 0.5, 5); return err }},
		{"aug shape", "tprl.PerceptionMask", "aug", tensor.ErrShape, func() error { _, err := PerceptionMask(nil, d23, nil, v23, v32, m23, 0.5); return err }},
		{"score shape", "tprl.PerceptionMask", "score", tensor.ErrShape, func() error { _, err := PerceptionMask(v32, d23, nil, v23, v23, m23, 0.5); return err }},
		{"union b", "tprl.UnionMask", "b", tensor.ErrShape, func() error { _, err := UnionMask(d23, v23, v32, v23, v23, m23); return err }},
		{"union entropy dtype", "tprl.UnionMask", "entropy", tensor.ErrDType, func() error { _, err := UnionMask(d23, v23, v23, i23, v23, m23); return err }},
		{"sens dst", "tprl.SensitivityScores", "dst", tensor.ErrShape, func() error { return SensitivityScores(v6, v23, m23) }},
		{"stats sens", "tprl.ShapingStatsOf", "sensitivity", tensor.ErrShape, func() error { _, err := ShapingStatsOf(v6, m23); return err }},
		{"smin", "tprl.ShapeAdvantages", "ScalingMin", tensor.ErrParam, func() error {
			_, err := ShapeAdvantages(d23, nil, v23, f2, m23, ShapingStats{}, ShapingOptions{ScalingMin: 1.5})
			return err
		}},
		{"scope", "tprl.ShapeAdvantages", "Scope", tensor.ErrParam, func() error {
			_, err := ShapeAdvantages(d23, nil, v23, f2, m23, ShapingStats{}, ShapingOptions{Scope: 3})
			return err
		}},
		{"factors shape", "tprl.ShapeAdvantages", "factors", tensor.ErrShape, func() error {
			_, err := ShapeAdvantages(d23, v6, v23, f2, m23, ShapingStats{}, opt)
			return err
		}},
		{"sensitivity shape", "tprl.ShapeAdvantages", "sensitivity", tensor.ErrShape, func() error {
			_, err := ShapeAdvantages(d23, nil, v23, v6, m23, ShapingStats{}, opt)
			return err
		}},
		{"shaped shape", "tprl.ShapeBatch", "shaped", tensor.ErrShape, func() error {
			_, err := ShapeBatch(v32, nil, nil, v23, v23, m23, opt)
			return err
		}},
		{"perception shape", "tprl.ShapeBatch", "perception", tensor.ErrShape, func() error {
			_, err := ShapeBatch(d23, nil, nil, v23, v32, m23, opt)
			return err
		}},
		{"mini < 0", "tprl.ShapeBatch", "MiniBatchSize", tensor.ErrParam, func() error {
			_, err := ShapeBatch(d23, nil, nil, v23, v23, m23, ShapingOptions{MiniBatchSize: -1})
			return err
		}},
		{"micro < 0", "tprl.ShapeBatch", "MicroBatchSize", tensor.ErrParam, func() error {
			_, err := ShapeBatch(d23, nil, nil, v23, v23, m23, ShapingOptions{MicroBatchSize: -1})
			return err
		}},
		{"apply config", "tprl.Config.Validate", "top_p_perception_tokens", tensor.ErrParam, func() error {
			_, err := Config{TopPPerceptionTokens: 3}.Apply(Batch{ResponseMask: m23})
			return err
		}},
		{"apply nil mask", "tprl.Config.Apply", "ResponseMask", tensor.ErrShape, func() error { _, err := Config{}.Apply(Batch{}); return err }},
		{"apply missing entropy", "tprl.Config.Apply", "Entropy", tensor.ErrShape, func() error {
			_, err := Config{EnableEntropyFiltering: true}.Apply(Batch{ResponseMask: m23})
			return err
		}},
		{"apply missing advantages", "tprl.Config.Apply", "Advantages", tensor.ErrShape, func() error {
			_, err := Config{EnableTrajectoryReweighting: true}.Apply(Batch{ResponseMask: m23, OldLogProbs: v23, AugLogProbs: v23})
			return err
		}},
		{"apply aug shape", "tprl.Config.Apply", "AugLogProbs", tensor.ErrShape, func() error {
			_, err := Config{EnablePerceptionFiltering: true}.Apply(Batch{ResponseMask: m23, OldLogProbs: v23, AugLogProbs: v32})
			return err
		}},
		{"apply micro", "tprl.Config.Apply", "MicroBatchSize", tensor.ErrParam, func() error {
			_, err := Config{}.Apply(Batch{ResponseMask: m23, MicroBatchSize: -2})
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.Error(t, err)
			require.True(t, errors.Is(err, tc.kind), "%v is not %v", err, tc.kind)
			var te *tensor.Error
			require.True(t, errors.As(err, &te), "%T", err)
			require.Equal(t, tc.op, te.Op, "%v", err)
			require.True(t, strings.Contains(te.Arg, tc.arg), "arg %q, want %q (%v)", te.Arg, tc.arg, err)
		})
	}
}
