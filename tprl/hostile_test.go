package tprl

import (
	"math"
	"testing"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/internal/hostile"
	"github.com/mtrl-go/mtrl/ppo"
)

// tprlFuncs lists every exported function and method of tprl. UnmarshalText is called on a
// valid receiver: decoding into a nil pointer is the caller's bug, as with any
// encoding.TextUnmarshaler.
func tprlFuncs() map[string]any {
	return map[string]any{
		"CombinedStats.AppendMetrics":     CombinedStats.AppendMetrics,
		"CombinedStats.Metrics":           CombinedStats.Metrics,
		"CombinedStats.TokenFraction":     CombinedStats.TokenFraction,
		"Config.Apply":                    Config.Apply,
		"Config.Shaping":                  Config.Shaping,
		"Config.Validate":                 Config.Validate,
		"DefaultConfig":                   DefaultConfig,
		"EmptyShapingStats":               EmptyShapingStats,
		"EntropyMask":                     EntropyMask,
		"EntropyMaskRandomTies":           EntropyMaskRandomTies,
		"Filter.MarshalText":              Filter.MarshalText,
		"Filter.String":                   Filter.String,
		"Filter.Valid":                    Filter.Valid,
		"Filter.UnmarshalText":            func(b []byte) error { var f Filter; return f.UnmarshalText(b) },
		"MicroBatchShaping.AppendMetrics": MicroBatchShaping.AppendMetrics,
		"MicroBatchShaping.Metrics":       MicroBatchShaping.Metrics,
		"MicroResult.Release":             (*MicroResult).Release,
		"ParseFilter":                     ParseFilter,
		"ParseShapingScope":               ParseShapingScope,
		"PerceptionMask":                  PerceptionMask,
		"PerceptionMaskRandomTies":        PerceptionMaskRandomTies,
		"RandomMask":                      RandomMask,
		"Result.Release":                  (*Result).Release,
		"SelectionStats.AppendMetrics":    SelectionStats.AppendMetrics,
		"SelectionStats.Metrics":          SelectionStats.Metrics,
		"SelectionStats.TokenFraction":    SelectionStats.TokenFraction,
		"SensitivityScores":               SensitivityScores,
		"ShapeAdvantages":                 ShapeAdvantages,
		"ShapeBatch":                      ShapeBatch,
		"ShapingScope.MarshalText":        ShapingScope.MarshalText,
		"ShapingScope.String":             ShapingScope.String,
		"ShapingScope.Valid":              ShapingScope.Valid,
		"ShapingScope.UnmarshalText":      func(b []byte) error { var s ShapingScope; return s.UnmarshalText(b) },
		"ShapingStats.Applies":            ShapingStats.Applies,
		"ShapingStats.HasRange":           ShapingStats.HasRange,
		"ShapingStats.MeanNorm":           ShapingStats.MeanNorm,
		"ShapingStats.Merge":              ShapingStats.Merge,
		"ShapingStatsOf":                  ShapingStatsOf,
		"ShapingStatsOfScore":             ShapingStatsOfScore,
		"UnionMask":                       UnionMask,
		"Update.MicroBatch":               (*Update).MicroBatch,
		"Update.PerceptionScore":          (*Update).PerceptionScore,
		"Update.Release":                  (*Update).Release,
		"UpdateConfig.Prepare":            UpdateConfig.Prepare,
		"UpdateConfig.Validate":           UpdateConfig.Validate,
	}
}

// allOn is a configuration with every filter and shaping on.
func allOn() Config {
	c := DefaultConfig()
	c.EnableEntropyFiltering, c.EnablePerceptionFiltering, c.EnableTrajectoryReweighting = true, true, true
	return c
}

func fullUpdateConfig() UpdateConfig {
	return UpdateConfig{Tokens: allOn(), Policy: ppo.DefaultPolicyConfig(ppo.Vanilla),
		KLLoss: &ppo.KLConfig{Kind: divergence.LowVarKL, Coef: 0.1}, EntropyPenalty: &ppo.EntropyConfig{Coef: 0.01}}
}

// miniBatch is a plausible [rows, cols] mini-batch with every optional tensor set.
func miniBatch(rows, cols int) MiniBatch {
	return MiniBatch{ResponseMask: hostile.Ones(rows, cols), OldLogProbs: hostile.F32(rows, cols), Advantages: hostile.F32(rows, cols),
		AugLogProbs: hostile.F32(rows, cols), RefLogProbs: hostile.F32(rows, cols)}
}

func tprlValues() *hostile.Values {
	v := hostile.NewValues()
	v.Add(allOn(), DefaultConfig(), fullUpdateConfig(), UpdateConfig{Tokens: allOn(), Policy: ppo.DefaultPolicyConfig(ppo.Vanilla)})
	v.Add(EntropyFilter, PerceptionFilter, Filter(-3), GlobalScope, PerMicroBatchScope, ShapingScope(7))
	v.Add(EmptyShapingStats(), ShapingStats{Count: 2, Min: 0, Max: 1, Sum: 1}, ShapingStats{Count: -1, Min: float32(math.NaN()), Max: 1},
		ShapingOptions{ScalingMin: 0.8}, ShapingOptions{ScalingMin: 0.5, Scope: PerMicroBatchScope, MiniBatchSize: 1, MicroBatchSize: 1})
	hostile.Gen(v, "batch [2 3]", func() Batch {
		return Batch{ResponseMask: hostile.Ones(2, 3), Entropy: hostile.F32(2, 3), OldLogProbs: hostile.F32(2, 3),
			AugLogProbs: hostile.F32(2, 3), Advantages: hostile.F32(2, 3), MicroBatchSize: 1}
	})
	hostile.Gen(v, "mini-batch [2 3]", func() MiniBatch { return miniBatch(2, 3) })
	hostile.Gen(v, "mini-batch [2 0]", func() MiniBatch { return miniBatch(2, 0) })
	hostile.Gen(v, "prepared update [2 3]", func() *Update {
		u, err := fullUpdateConfig().Prepare(miniBatch(2, 3))
		if err != nil {
			panic(err)
		}
		return u
	})
	hostile.Gen(v, "micro inputs [2 3]", func() MicroInputs { return MicroInputs{LogProbs: hostile.F32(2, 3), Entropy: hostile.F32(2, 3)} })
	hostile.Gen(v, "shaping inputs [2 3]", func() ShapingInputs {
		return ShapingInputs{Advantages: hostile.F32(2, 3), ResponseMask: hostile.Ones(2, 3), Sensitivity: hostile.F32(2), PerceptionScore: hostile.F32(2, 3)}
	})
	hostile.Gen(v, "shaping outputs [2 3]", func() ShapingOutputs {
		return ShapingOutputs{Advantages: hostile.F32(2, 3), Factors: hostile.F32(2), Sensitivity: hostile.F32(2)}
	})
	hostile.Gen(v, "union inputs [2 3]", func() UnionInputs {
		return UnionInputs{EntropyMask: hostile.Ones(2, 3), PerceptionMask: hostile.F32(2, 3), Entropy: hostile.F32(2, 3),
			PerceptionScore: hostile.F32(2, 3), ResponseMask: hostile.Ones(2, 3)}
	})
	hostile.Gen(v, "applied result", func() *Result {
		r, err := allOn().Apply(Batch{ResponseMask: hostile.Ones(2, 3), Entropy: hostile.F32(2, 3), OldLogProbs: hostile.F32(2, 3),
			AugLogProbs: hostile.F32(2, 3), Advantages: hostile.F32(2, 3)})
		if err != nil {
			panic(err)
		}
		return r
	})
	v.Add(0)
	v.Add(float32(0.2))
	return v
}

// TestHostileInputs: no exported function of tprl panics, whatever its arguments; every error
// is a *tensor.Error.
func TestHostileInputs(t *testing.T) {
	hostile.Test(t, tprlFuncs(), nil, tprlValues(), hostile.Options{TensorErrors: true})
}
