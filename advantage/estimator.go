package advantage

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/enum"
	"github.com/mtrl-go/mtrl/tensor"
)

// Estimator selects an advantage estimator. The zero value is EstimatorGRPO, the reference's default
// (EasyR1's algorithm.adv_estimator).
type Estimator int

const (
	EstimatorGRPO              Estimator = iota // "grpo": group-normalised outcome reward (docs/semantics.md#grpo)
	EstimatorGAE                                // "gae": generalised advantage estimation with a critic (docs/semantics.md#gae)
	EstimatorGRPOPassK                          // "grpo_passk": pass@k outcome advantage (upstream semantics, docs/semantics.md#grpo-passk)
	EstimatorRLOO                               // "rloo": leave-one-out baseline (docs/semantics.md#rloo)
	EstimatorReinforcePlusPlus                  // "reinforce_plus_plus": discounted return, whitened (docs/semantics.md#reinforce)
	EstimatorReMax                              // "remax": greedy-rollout baseline per response (docs/semantics.md#remax)
	numEstimators
)

var estimators = enum.Table[Estimator]{Type: "advantage.Estimator", Noun: "estimator",
	Names: (&[numEstimators]string{
		EstimatorGRPO:              "grpo",
		EstimatorGAE:               "gae",
		EstimatorGRPOPassK:         "grpo_passk",
		EstimatorRLOO:              "rloo",
		EstimatorReinforcePlusPlus: "reinforce_plus_plus",
		EstimatorReMax:             "remax",
	})[:],
	Errorf: tensor.Errorf, Sentinel: tensor.ErrParam}

// String returns the reference's name of the estimator ("gae", "grpo", ...).
func (e Estimator) String() string { return estimators.String(e) }

// Valid reports whether e is one of the defined estimators.
func (e Estimator) Valid() bool { return estimators.Valid(e) }

// ParseEstimator returns the estimator with the reference's name s (exact, lower case).
func ParseEstimator(s string) (Estimator, error) {
	if e, ok := estimators.Lookup(s); ok {
		return e, nil
	}
	return 0, tensor.Errorf(tensor.ErrParam, "advantage.ParseEstimator", "s",
		"unknown estimator %q, want one of %v", s, estimators.Names)
}

// MarshalText implements encoding.TextMarshaler with the reference's name.
func (e Estimator) MarshalText() ([]byte, error) { return estimators.MarshalText(e) }

// UnmarshalText implements encoding.TextUnmarshaler with ParseEstimator.
func (e *Estimator) UnmarshalText(b []byte) error { return enum.UnmarshalText(e, b, ParseEstimator) }

// DefaultEps is the reference's GRPO epsilon added to the group standard deviation.
const DefaultEps = 1e-6

// GRPOOptions tunes GRPO and GRPO pass@k. The zero value is the reference's behaviour.
type GRPOOptions struct {
	// Eps is added to the group's standard deviation before dividing. Zero means DefaultEps
	// (1e-6); negative or non-finite values are rejected. It is rounded to float32, as torch does.
	Eps float64
	// StdFloor, when positive, replaces the group's std by max(std, StdFloor) before Eps is added,
	// which bounds the advantages of nearly-constant groups (an mtrl extension). Zero: off.
	StdFloor float64
	// NoStdNorm skips the division by (std + eps) altogether (Dr.GRPO): GRPO's advantage becomes
	// score - mean, pass@k's becomes r_max - r_2nd. An mtrl extension; false is the reference.
	NoStdNorm bool
}

func (o GRPOOptions) validate(op string) error {
	if !(o.Eps >= 0) || math.IsInf(o.Eps, 0) {
		return tensor.Errorf(tensor.ErrParam, op, "Eps", "is %v, want a finite value >= 0 (0 means %g)", o.Eps, DefaultEps)
	}
	if !(o.StdFloor >= 0) || math.IsInf(o.StdFloor, 0) {
		return tensor.Errorf(tensor.ErrParam, op, "StdFloor", "is %v, want a finite value >= 0", o.StdFloor)
	}
	return nil
}

func (o GRPOOptions) eps() float32 {
	if o.Eps == 0 {
		return DefaultEps
	}
	return float32(o.Eps)
}

// Config selects and parameterises an estimator for Compute.
//
// The zero Config is GRPO with the reference's eps; note that Gamma and Lambda then are 0, which
// is a valid (if unusual) choice for GAE and REINFORCE++. DefaultConfig returns the reference's
// defaults (EasyR1: adv_estimator "grpo", gamma 1.0, lam 1.0).
type Config struct {
	Estimator Estimator
	// Gamma is the discount factor of GAE and REINFORCE++, in [0, 1].
	Gamma float64
	// Lambda is GAE's lambda, in [0, 1].
	Lambda float64
	// Eps, StdFloor and NoStdNorm are GRPOOptions for GRPO and GRPO pass@k (ignored otherwise).
	Eps       float64
	StdFloor  float64
	NoStdNorm bool
}

// DefaultConfig returns the reference's defaults: EstimatorGRPO, gamma = lambda = 1, eps = 1e-6.
func DefaultConfig() Config {
	return Config{Estimator: EstimatorGRPO, Gamma: 1, Lambda: 1, Eps: DefaultEps}
}

// GRPOOptions returns the GRPO fields of c.
func (c Config) GRPOOptions() GRPOOptions {
	return GRPOOptions{Eps: c.Eps, StdFloor: c.StdFloor, NoStdNorm: c.NoStdNorm}
}

// Validate checks the estimator and every parameter's range (whatever the estimator).
func (c Config) Validate() error {
	const op = "advantage.Config.Validate"
	if !c.Estimator.Valid() {
		return tensor.Errorf(tensor.ErrParam, op, "Estimator", "unknown estimator %d", int(c.Estimator))
	}
	if err := tensor.CheckUnit(op, "Gamma", c.Gamma); err != nil {
		return err
	}
	if err := tensor.CheckUnit(op, "Lambda", c.Lambda); err != nil {
		return err
	}
	return c.GRPOOptions().validate(op)
}

// Inputs holds the tensors the estimators read. Rewards and ResponseMask are always required; the others
// only by the estimators that use them.
type Inputs struct {
	Rewards      *tensor.Tensor // token_level_rewards, float32 [B, T]
	ResponseMask *tensor.Tensor // response_mask, float32 0/1 [B, T]
	Values       *tensor.Tensor // critic values, float32 [B, T] (GAE)
	Index        *tensor.Tensor // group ids (uid), int32 [B] (GRPO, GRPO pass@k, RLOO)
	Baselines    *tensor.Tensor // reward_baselines, float32 [B] (ReMax)
}

// Compute writes the advantages [B, T] of the estimator cfg.Estimator into adv
// (docs/semantics.md#advantage-estimators; the table in the package documentation lists what
// each estimator reads). It validates cfg and checks that the inputs the estimator needs are
// present (a missing one is an ErrParam naming it); inputs it does not use are ignored. Use
// ComputeWithReturns for the returns too (the critic's targets with GAE).
func Compute(adv *tensor.Tensor, in Inputs, cfg Config) error {
	return compute("advantage.Compute", adv, nil, in, cfg)
}

// ComputeWithReturns is Compute that also writes the estimator's returns [B, T] into returns:
// raw GAE + values (GAE), the discounted return (REINFORCE++), the masked reward-to-go (ReMax),
// or a copy of the advantages (the group estimators, as the reference returns the same tensor
// twice). Outputs must not alias the inputs or each other.
func ComputeWithReturns(adv, returns *tensor.Tensor, in Inputs, cfg Config) error {
	if returns == nil {
		return tensor.Errorf(tensor.ErrShape, "advantage.ComputeWithReturns", "returns", "is nil (use Compute for the advantages alone)")
	}
	return compute("advantage.ComputeWithReturns", adv, returns, in, cfg)
}

func compute(op string, adv, returns *tensor.Tensor, in Inputs, cfg Config) error {
	err := retag(runEstimator(op, adv, returns, in, cfg), op)
	if e, ok := err.(*tensor.Error); ok { // a copy: name the fields the caller set
		if f, ok := inputFields[e.Arg]; ok {
			e.Arg = f
		}
	}
	return err
}

// inputFields maps the estimators' argument names to the fields of Inputs and Config.
var inputFields = map[string]string{"rewards": "Inputs.Rewards", "mask": "Inputs.ResponseMask",
	"values": "Inputs.Values", "index": "Inputs.Index", "baselines": "Inputs.Baselines",
	"gamma": "Gamma", "lam": "Lambda"}

func runEstimator(op string, adv, returns *tensor.Tensor, in Inputs, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	need := func(arg string, t *tensor.Tensor) error {
		if t == nil {
			return tensor.Errorf(tensor.ErrParam, op, arg, "is required by estimator %q", cfg.Estimator)
		}
		return nil
	}
	if err := need("Inputs.Rewards", in.Rewards); err != nil {
		return err
	}
	if err := need("Inputs.ResponseMask", in.ResponseMask); err != nil {
		return err
	}
	switch cfg.Estimator {
	case EstimatorGAE:
		if err := need("Inputs.Values", in.Values); err != nil {
			return err
		}
		return gae(adv, returns, in.Rewards, in.Values, in.ResponseMask, cfg.Gamma, cfg.Lambda)
	case EstimatorReinforcePlusPlus:
		return reinforcePlusPlus(adv, returns, in.Rewards, in.ResponseMask, cfg.Gamma)
	case EstimatorReMax:
		if err := need("Inputs.Baselines", in.Baselines); err != nil {
			return err
		}
		return reMax(adv, returns, in.Rewards, in.ResponseMask, in.Baselines)
	}
	if err := need("Inputs.Index", in.Index); err != nil {
		return err
	}
	switch cfg.Estimator {
	case EstimatorGRPOPassK:
		return grpoPassK(adv, returns, in.Rewards, in.ResponseMask, in.Index, cfg.GRPOOptions())
	case EstimatorRLOO:
		return rloo(adv, returns, in.Rewards, in.ResponseMask, in.Index)
	default:
		return grpo(adv, returns, in.Rewards, in.ResponseMask, in.Index, cfg.GRPOOptions())
	}
}

// retag renames the op of an *tensor.Error: the estimators' own checks report the entry point
// the caller used.
func retag(err error, op string) error {
	if e, ok := err.(*tensor.Error); ok {
		c := *e
		c.Op = op
		return &c
	}
	return err
}
