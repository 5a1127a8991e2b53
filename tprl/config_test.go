package tprl

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/divergence"
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
	s, err := UnionMask(dst, UnionInputs{EntropyMask: a, PerceptionMask: b, Entropy: ent, PerceptionScore: score, ResponseMask: mask})
	require.NoError(t, err)
	require.Equal(t, []float32{1, 1, 0, 0, 0, 0}, host(t, dst))
	require.Equal(t, CombinedStats{Valid: 3, Selected: 2, EntropySelectedMean: 1.5, EntropyRejectedMean: 3,
		PerceptionSelectedMean: 15, PerceptionRejectedMean: 30}, s)
	require.InDelta(t, 2.0/3, s.Metrics()["actor/combined_token_fraction"], 1e-7)

	// dst may alias an input; empty sets give NaN, always logged.
	all := f32(t, []float32{1, 1, 1, 0, 0, 0}, 2, 3)
	s, err = UnionMask(a, UnionInputs{EntropyMask: a, PerceptionMask: all, Entropy: ent, PerceptionScore: score, ResponseMask: mask})
	require.NoError(t, err)
	require.Equal(t, []float32{1, 1, 1, 0, 0, 0}, host(t, a))
	m := s.Metrics()
	require.Len(t, m, 5)
	require.True(t, math.IsNaN(m["actor/combined_entropy_mean_rejected"]))
	require.True(t, math.IsNaN(m["actor/combined_perception_mean_rejected"]))

	none := zeros(t, 2, 3)
	s, err = UnionMask(dst, UnionInputs{EntropyMask: none, PerceptionMask: none, Entropy: ent, PerceptionScore: score, ResponseMask: zeros(t, 2, 3)})
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

	// Everything on, 3 micro-batches, the reference's tie rule: metrics appended per
	// micro-batch; masks equal to the single-call ops.
	c := DefaultConfig()
	c.EnableEntropyFiltering, c.EnablePerceptionFiltering, c.EnableTrajectoryReweighting = true, true, true
	c.TiesToLowerIndex = true
	b.MicroBatchSize = 4
	res, err = c.Apply(b)
	require.NoError(t, err)
	require.Len(t, res.Metrics["actor/scaling_factor_mean"], 3)
	require.Len(t, res.Metrics["actor/combined_token_fraction"], 3)
	require.Len(t, res.Shaping, 3)
	em, pm, ltm, score := zeros(t, rows, cols), zeros(t, rows, cols), zeros(t, rows, cols), zeros(t, rows, cols)
	_, err = EntropyMask(em, b.Entropy, b.ResponseMask, 0.2)
	require.NoError(t, err)
	_, err = percMask(score, pm, b.OldLogProbs, b.AugLogProbs, b.ResponseMask, 0.2)
	require.NoError(t, err)
	_, err = UnionMask(ltm, UnionInputs{EntropyMask: em, PerceptionMask: pm, Entropy: b.Entropy, PerceptionScore: score, ResponseMask: b.ResponseMask})
	require.NoError(t, err)
	require.Equal(t, host(t, em), host(t, res.EntropyMask))
	require.Equal(t, host(t, pm), host(t, res.PerceptionMask))
	require.Equal(t, host(t, ltm), host(t, res.LossTokenMask))
	require.Equal(t, host(t, score), host(t, res.PerceptionScore))

	// The default tie rule: masks equal to the RandomTies ops over the whole batch with the
	// batch's key, though Apply selects per micro-batch (the key's FirstRow moves with it).
	// Scores rounded to a few values, so most thresholds tie.
	tied := applyBatch(t, r, rows, cols)
	for _, x := range []*tensor.Tensor{tied.Entropy, tied.OldLogProbs} {
		v, _ := x.Float32s()
		for i := range v {
			v[i] = float32(math.Round(float64(v[i])))
		}
	}
	tied.MicroBatchSize, tied.Random = 4, RandomKey{Seed: 7, Step: 3}
	dc := c
	dc.TiesToLowerIndex = false
	tiedRes, err := dc.Apply(tied)
	require.NoError(t, err)
	em3, pm3, score3 := zeros(t, rows, cols), zeros(t, rows, cols), zeros(t, rows, cols)
	_, err = EntropyMaskRandomTies(em3, tied.Entropy, tied.ResponseMask, 0.2, tied.Random)
	require.NoError(t, err)
	require.NoError(t, divergence.PerceptionScore(score3, tied.OldLogProbs, tied.AugLogProbs))
	_, err = PerceptionMaskRandomTies(pm3, score3, tied.ResponseMask, 0.2, tied.Random)
	require.NoError(t, err)
	require.Equal(t, host(t, em3), host(t, tiedRes.EntropyMask))
	require.Equal(t, host(t, pm3), host(t, tiedRes.PerceptionMask))
	lower := zeros(t, rows, cols)
	_, err = EntropyMask(lower, tied.Entropy, tied.ResponseMask, 0.2)
	require.NoError(t, err)
	require.NotEqual(t, host(t, lower), host(t, em3), "the tie rules agree: the test data has no ties")

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
	f2 := zeros(t, 2)
	i23, _ := tensor.New(tensor.CPU(), tensor.Int32, 2, 3)
	opt := ShapingOptions{ScalingMin: 0.5}
	cases := []struct {
		name, op, arg string
		kind          error
		call          func() error
	}{
		{"entropy 1-D", "tprl.EntropyMask", "entropy", tensor.ErrShape, func() error { _, err := EntropyMask(v6, v6, v6, 0.5); return err }},
		{"entropy nil", "tprl.EntropyMask", "entropy", tensor.ErrShape, func() error { _, err := EntropyMask(d23, nil, m23, 0.5); return err }},
		{"mask shape", "tprl.EntropyMask", "mask", tensor.ErrShape, func() error { _, err := EntropyMask(d23, v23, v32, 0.5); return err }},
		{"dst shape", "tprl.EntropyMask", "dst", tensor.ErrShape, func() error { _, err := EntropyMask(v32, v23, m23, 0.5); return err }},
		{"mask dtype", "tprl.EntropyMask", "mask", tensor.ErrDType, func() error { _, err := EntropyMask(d23, v23, i23, 0.5); return err }},
		{"p > 1", "tprl.EntropyMask", "p", tensor.ErrParam, func() error { _, err := EntropyMask(d23, v23, m23, 1.01); return err }},
		{"p < 0", "tprl.EntropyMask", "p", tensor.ErrParam, func() error { _, err := EntropyMask(d23, v23, m23, -0.1); return err }},
		{"p NaN", "tprl.PerceptionMask", "p", tensor.ErrParam, func() error {
			_, err := percMask(nil, d23, v23, v23, m23, float32(math.NaN()))
			return err
		}},
		{"score shape", "tprl.PerceptionMask", "mask", tensor.ErrShape, func() error { _, err := PerceptionMask(d23, v32, m23, 0.5); return err }},
		{"union b", "tprl.UnionMask", "PerceptionMask", tensor.ErrShape, func() error {
			_, err := UnionMask(d23, UnionInputs{EntropyMask: v23, PerceptionMask: v32, Entropy: v23, PerceptionScore: v23, ResponseMask: m23})
			return err
		}},
		{"union entropy dtype", "tprl.UnionMask", "Entropy", tensor.ErrDType, func() error {
			_, err := UnionMask(d23, UnionInputs{EntropyMask: v23, PerceptionMask: v23, Entropy: i23, PerceptionScore: v23, ResponseMask: m23})
			return err
		}},
		{"sens dst", "tprl.SensitivityScores", "dst", tensor.ErrShape, func() error { return SensitivityScores(v6, v23, m23) }},
		{"stats sens", "tprl.ShapingStatsOf", "sensitivity", tensor.ErrShape, func() error { _, err := ShapingStatsOf(v6, m23); return err }},
		{"smin", "tprl.ShapeAdvantages", "ScalingMin", tensor.ErrParam, func() error {
			_, err := ShapeAdvantages(ShapingOutputs{Advantages: d23}, ShapingInputs{Advantages: v23, Sensitivity: f2, ResponseMask: m23}, ShapingStats{}, ShapingOptions{ScalingMin: 1.5})
			return err
		}},
		{"scope", "tprl.ShapeAdvantages", "Scope", tensor.ErrParam, func() error {
			_, err := ShapeAdvantages(ShapingOutputs{Advantages: d23}, ShapingInputs{Advantages: v23, Sensitivity: f2, ResponseMask: m23}, ShapingStats{}, ShapingOptions{Scope: 3})
			return err
		}},
		{"factors shape", "tprl.ShapeAdvantages", "Factors", tensor.ErrShape, func() error {
			_, err := ShapeAdvantages(ShapingOutputs{Advantages: d23, Factors: v6}, ShapingInputs{Advantages: v23, Sensitivity: f2, ResponseMask: m23}, ShapingStats{}, opt)
			return err
		}},
		{"sensitivity shape", "tprl.ShapeAdvantages", "Sensitivity", tensor.ErrShape, func() error {
			_, err := ShapeAdvantages(ShapingOutputs{Advantages: d23}, ShapingInputs{Advantages: v23, Sensitivity: v6, ResponseMask: m23}, ShapingStats{}, opt)
			return err
		}},
		{"shaped shape", "tprl.ShapeBatch", "out.Advantages", tensor.ErrShape, func() error {
			_, err := ShapeBatch(ShapingOutputs{Advantages: v32}, ShapingInputs{Advantages: v23, PerceptionScore: v23, ResponseMask: m23}, opt)
			return err
		}},
		{"perception shape", "tprl.ShapeBatch", "PerceptionScore", tensor.ErrShape, func() error {
			_, err := ShapeBatch(ShapingOutputs{Advantages: d23}, ShapingInputs{Advantages: v23, PerceptionScore: v32, ResponseMask: m23}, opt)
			return err
		}},
		{"mini < 0", "tprl.ShapeBatch", "MiniBatchSize", tensor.ErrParam, func() error {
			_, err := ShapeBatch(ShapingOutputs{Advantages: d23}, ShapingInputs{Advantages: v23, PerceptionScore: v23, ResponseMask: m23}, ShapingOptions{MiniBatchSize: -1})
			return err
		}},
		{"micro < 0", "tprl.ShapeBatch", "MicroBatchSize", tensor.ErrParam, func() error {
			_, err := ShapeBatch(ShapingOutputs{Advantages: d23}, ShapingInputs{Advantages: v23, PerceptionScore: v23, ResponseMask: m23}, ShapingOptions{MicroBatchSize: -1})
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
