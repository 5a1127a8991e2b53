package tprl

import (
	"strings"

	"github.com/mtrl-go/mtrl/internal/enum"
	"github.com/mtrl-go/mtrl/tensor"
)

// Filter names the token filters of TPRL (and the random control); it selects the metric names
// of SelectionStats.
type Filter int

const (
	// EntropyFilter keeps the highest-entropy tokens (reference flag use_vppo_on_entropy).
	EntropyFilter Filter = iota
	// PerceptionFilter keeps the tokens with the highest perception score (low_var_kl between the
	// log-probs with the original and with the perturbed image; use_vppo_on_perception).
	PerceptionFilter
	// RandomFilter keeps a uniformly random subset of the same size as the perception filter's
	// (RandomMask): the control that trains on as few tokens, chosen blindly. Not in the
	// reference.
	RandomFilter
)

var filters = enum.Table[Filter]{Type: "tprl.Filter", Noun: "filter",
	Names:  []string{EntropyFilter: "entropy", PerceptionFilter: "perception", RandomFilter: "random"},
	Errorf: tensor.Errorf, Sentinel: tensor.ErrParam}

// String returns "entropy", "perception" or "random".
func (f Filter) String() string { return filters.String(f) }

// Valid reports whether f is one of the defined filters.
func (f Filter) Valid() bool { return filters.Valid(f) }

// ParseFilter parses "entropy", "perception" or "random" (exact match); anything else is an ErrParam error.
func ParseFilter(s string) (Filter, error) {
	if f, ok := filters.Lookup(s); ok {
		return f, nil
	}
	return 0, tensor.Errorf(tensor.ErrParam, "tprl.ParseFilter", "s", "unknown filter %q (want one of %s)", s, strings.Join(filters.Names, ", "))
}

// MarshalText implements encoding.TextMarshaler with the name String returns; a value outside
// the defined constants is an error.
func (f Filter) MarshalText() ([]byte, error) { return filters.MarshalText(f) }

// UnmarshalText implements encoding.TextUnmarshaler with ParseFilter, so configuration files
// (JSON, YAML) hold the name.
func (f *Filter) UnmarshalText(b []byte) error { return enum.UnmarshalText(f, b, ParseFilter) }

// ShapingScope says over which rows trajectory advantage shaping takes its normalisation
// statistics.
type ShapingScope int

const (
	// GlobalScope (the default, "global") takes the score range (gmin, gmax) and the mean
	// normalised score mu over the whole mini-batch, or over whatever set of responses the
	// ShapingStats passed in describe (for example all devices' mini-batches after an
	// all-reduce). The factors then do not depend on how the mini-batch is split into
	// micro-batches or devices, and they average to ≈1 over all valid rows.
	GlobalScope ShapingScope = iota
	// PerMicroBatchScope ("per_micro_batch") reproduces the reference: mu per micro-batch, range
	// per device mini-batch. The factors average to ≈1 within each micro-batch and depend on how
	// micro-batches are formed; a single-row micro-batch gets factor ≈1, or ScalingMin with
	// target_max ≈ 2e7 for the minimum-score row (docs/semantics.md#advantage-shaping).
	PerMicroBatchScope
)

var scopes = enum.Table[ShapingScope]{Type: "tprl.ShapingScope", Noun: "shaping scope",
	Names:  []string{GlobalScope: "global", PerMicroBatchScope: "per_micro_batch"},
	Errorf: tensor.Errorf, Sentinel: tensor.ErrParam}

// String returns "global" or "per_micro_batch".
func (s ShapingScope) String() string { return scopes.String(s) }

// Valid reports whether s is one of the defined scopes.
func (s ShapingScope) Valid() bool { return scopes.Valid(s) }

// ParseShapingScope parses "global" or "per_micro_batch"; the empty string means GlobalScope.
func ParseShapingScope(s string) (ShapingScope, error) {
	if s == "" {
		return GlobalScope, nil
	}
	if v, ok := scopes.Lookup(s); ok {
		return v, nil
	}
	return 0, tensor.Errorf(tensor.ErrParam, "tprl.ParseShapingScope", "s", "unknown shaping scope %q (want one of %s)", s, strings.Join(scopes.Names, ", "))
}

// MarshalText implements encoding.TextMarshaler (used by YAML and JSON encoders).
func (s ShapingScope) MarshalText() ([]byte, error) { return scopes.MarshalText(s) }

// UnmarshalText implements encoding.TextUnmarshaler with ParseShapingScope.
func (s *ShapingScope) UnmarshalText(b []byte) error {
	return enum.UnmarshalText(s, b, ParseShapingScope)
}

// Reference defaults (the reference's ActorConfig).
const (
	DefaultTopPEntropyTokens    = 0.2
	DefaultTopPPerceptionTokens = 0.2
	DefaultTrajectoryScalingMin = 0.8
	// DefaultTopPRandomTokens is the perception filter's default, so that the random control
	// keeps as many tokens.
	DefaultTopPRandomTokens = DefaultTopPPerceptionTokens
)

// Config is the TPRL section of a training configuration, with the seeds' YAML keys.
//
// The zero value disables everything and is valid; DefaultConfig returns the reference's
// defaults for the numbers (top-p 0.2 for both filters, scaling minimum 0.8) with every feature
// still disabled. Decode YAML into DefaultConfig() so unset numeric keys keep those defaults: a
// zero top-p with its filter enabled is valid and selects no token at all.
type Config struct {
	// EnableEntropyFiltering trains only on the top-p highest-entropy tokens of each response.
	EnableEntropyFiltering bool `yaml:"enable_entropy_filtering" json:"enable_entropy_filtering"`
	// TopPEntropyTokens is the fraction of each response's valid tokens the entropy filter keeps,
	// in [0, 1]; the count is ceil(float32(n)*float32(p)) computed in float32.
	TopPEntropyTokens float64 `yaml:"top_p_entropy_tokens" json:"top_p_entropy_tokens"`
	// EnablePerceptionFiltering trains only on the top-p tokens by perception score.
	EnablePerceptionFiltering bool `yaml:"enable_perception_filtering" json:"enable_perception_filtering"`
	// TopPPerceptionTokens is the fraction kept by the perception filter, in [0, 1].
	TopPPerceptionTokens float64 `yaml:"top_p_perception_tokens" json:"top_p_perception_tokens"`
	// EnableRandomFiltering trains only on a uniformly random subset of each response's valid
	// tokens (RandomMask, seeded per step and row by Batch.Random): the control of the
	// perception filter. Not in the reference; it cannot be combined with the other filters.
	EnableRandomFiltering bool `yaml:"enable_random_filtering" json:"enable_random_filtering"`
	// TopPRandomTokens is the fraction kept by the random filter, in [0, 1]; set it to
	// TopPPerceptionTokens for the control with the same keep count.
	TopPRandomTokens float64 `yaml:"top_p_random_tokens" json:"top_p_random_tokens"`
	// EnableTrajectoryReweighting turns on trajectory advantage shaping: each response's
	// advantages are multiplied by a factor in [TrajectoryScalingMin, target_max] that grows
	// with the response's mean perception score.
	EnableTrajectoryReweighting bool `yaml:"enable_trajectory_reweighting" json:"enable_trajectory_reweighting"`
	// TrajectoryScalingMin is the smallest shaping factor (reference advantage_scaling_min), in
	// [0, 1].
	TrajectoryScalingMin float64 `yaml:"trajectory_scaling_min" json:"trajectory_scaling_min"`
	// TrajectoryShapingScope selects where the shaping statistics come from; the default
	// GlobalScope makes the result independent of the micro-batch split, PerMicroBatchScope
	// reproduces the reference.
	TrajectoryShapingScope ShapingScope `yaml:"trajectory_shaping_scope" json:"trajectory_shaping_scope"`
	// ShapingRequiresPerception reproduces a reference quirk: there, shaping runs only when the
	// perception filter is enabled too, and use_advantage_shaping alone silently does nothing.
	// By default (false) shaping works whenever EnableTrajectoryReweighting is set.
	ShapingRequiresPerception bool `yaml:"shaping_requires_perception" json:"shaping_requires_perception"`
	// TiesToLowerIndex reproduces the reference's tie rule in the entropy and perception masks:
	// tokens tied at the threshold are taken from the lowest positions (a stable sort), so a row
	// whose scores all tie trains on its first tokens. By default (false) a uniformly random
	// subset of the tied tokens is kept, drawn from Batch.Random (EntropyMaskRandomTies,
	// PerceptionMaskRandomTies): no position is favoured.
	TiesToLowerIndex bool `yaml:"ties_to_lower_index" json:"ties_to_lower_index"`
}

// DefaultConfig returns the reference's default numbers with every feature disabled.
func DefaultConfig() Config {
	return Config{
		TopPEntropyTokens:    DefaultTopPEntropyTokens,
		TopPPerceptionTokens: DefaultTopPPerceptionTokens,
		TopPRandomTokens:     DefaultTopPRandomTokens,
		TrajectoryScalingMin: DefaultTrajectoryScalingMin,
	}
}

// Validate checks the numeric fields — each top-p and the scaling minimum must lie in [0, 1] —
// and that the random filter is not combined with another filter. The error wraps
// tensor.ErrParam and names the YAML key.
func (c Config) Validate() error {
	const op = "tprl.Config.Validate"
	if err := tensor.CheckUnit(op, "top_p_entropy_tokens", c.TopPEntropyTokens); err != nil {
		return err
	}
	if err := tensor.CheckUnit(op, "top_p_perception_tokens", c.TopPPerceptionTokens); err != nil {
		return err
	}
	if err := tensor.CheckUnit(op, "top_p_random_tokens", c.TopPRandomTokens); err != nil {
		return err
	}
	if err := tensor.CheckUnit(op, "trajectory_scaling_min", c.TrajectoryScalingMin); err != nil {
		return err
	}
	if c.EnableRandomFiltering && (c.EnableEntropyFiltering || c.EnablePerceptionFiltering) {
		return tensor.Errorf(tensor.ErrParam, op, "enable_random_filtering", "is a control that replaces the entropy and perception filters; it cannot be combined with them")
	}
	if !c.TrajectoryShapingScope.Valid() {
		return tensor.Errorf(tensor.ErrParam, op, "trajectory_shaping_scope", "unknown shaping scope %d", int(c.TrajectoryShapingScope))
	}
	return nil
}

// Shaping reports whether trajectory shaping runs under this configuration (taking
// ShapingRequiresPerception into account).
func (c Config) Shaping() bool {
	return c.EnableTrajectoryReweighting && (c.EnablePerceptionFiltering || !c.ShapingRequiresPerception)
}
