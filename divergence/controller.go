package divergence

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/enum"
	"github.com/mtrl-go/mtrl/tensor"
)

// Controller adapts the KL coefficient between steps (docs/semantics.md#kl-controllers).
type Controller interface {
	// Coef returns the current KL coefficient.
	Coef() float64
	// Update feeds the KL measured over the last nSteps samples.
	Update(currentKL float64, nSteps int)
}

// ControllerType selects a KL controller: "fixed" or "adaptive".
type ControllerType int

const (
	// FixedController keeps the coefficient constant ("fixed"); the zero value.
	FixedController ControllerType = iota
	// AdaptiveController is the proportional controller of Ziegler et al. ("adaptive").
	AdaptiveController
)

var controllerTypes = enum.Table[ControllerType]{Type: "divergence.ControllerType", Noun: "controller type",
	Names:  []string{FixedController: "fixed", AdaptiveController: "adaptive"},
	Errorf: tensor.Errorf, Sentinel: tensor.ErrParam}

// String returns "fixed" or "adaptive".
func (t ControllerType) String() string { return controllerTypes.String(t) }

// Valid reports whether t is one of the defined controller types.
func (t ControllerType) Valid() bool { return controllerTypes.Valid(t) }

// ParseControllerType parses the reference's kl_type ("fixed" or "adaptive"); anything else is
// an ErrParam error, as the reference raises ValueError.
func ParseControllerType(s string) (ControllerType, error) {
	switch s {
	case "fixed":
		return FixedController, nil
	case "adaptive":
		return AdaptiveController, nil
	}
	return 0, tensor.Errorf(tensor.ErrParam, "divergence.ParseControllerType", "s", "unknown kl type %q (want fixed or adaptive)", s)
}

// MarshalText implements encoding.TextMarshaler so configs round-trip through YAML/JSON.
func (t ControllerType) MarshalText() ([]byte, error) { return controllerTypes.MarshalText(t) }

// UnmarshalText implements encoding.TextUnmarshaler using ParseControllerType.
func (t *ControllerType) UnmarshalText(b []byte) error {
	return enum.UnmarshalText(t, b, ParseControllerType)
}

// ControllerConfig holds the reference's algorithm.kl_* settings. The zero value is a fixed
// controller with coefficient 0 (KL penalty off).
type ControllerConfig struct {
	Type    ControllerType `json:"kl_type" yaml:"kl_type"`
	Coef    float64        `json:"kl_coef" yaml:"kl_coef"`       // initial coefficient
	Target  float64        `json:"kl_target" yaml:"kl_target"`   // adaptive only: target KL, != 0
	Horizon float64        `json:"kl_horizon" yaml:"kl_horizon"` // adaptive only: > 0
}

// Validate checks the config: a known type, a finite Coef, and for the adaptive controller a
// finite Horizon > 0 (the reference asserts this) and a finite Target != 0 (the reference
// divides by it in update and would raise ZeroDivisionError there; mtrl rejects it up front).
func (c ControllerConfig) Validate() error { return c.validate("divergence.ControllerConfig.Validate") }

// validate reports errors under op, so constructors name themselves.
func (c ControllerConfig) validate(op string) error {
	if c.Type != FixedController && c.Type != AdaptiveController {
		return tensor.Errorf(tensor.ErrParam, op, "Type", "unknown controller type %d", int(c.Type))
	}
	if math.IsNaN(c.Coef) || math.IsInf(c.Coef, 0) {
		return tensor.Errorf(tensor.ErrParam, op, "Coef", "is %v, want a finite value", c.Coef)
	}
	if c.Type == AdaptiveController {
		if !(c.Horizon > 0) || math.IsInf(c.Horizon, 0) {
			return tensor.Errorf(tensor.ErrParam, op, "Horizon", "is %v, want a finite value > 0", c.Horizon)
		}
		if c.Target == 0 || math.IsNaN(c.Target) || math.IsInf(c.Target, 0) {
			return tensor.Errorf(tensor.ErrParam, op, "Target", "is %v, want a finite non-zero value", c.Target)
		}
	}
	return nil
}

// NewController validates cfg and returns the controller it describes.
func NewController(cfg ControllerConfig) (Controller, error) {
	if err := cfg.validate("divergence.NewController"); err != nil {
		return nil, err
	}
	if cfg.Type == AdaptiveController {
		return &Adaptive{coef: cfg.Coef, target: cfg.Target, horizon: cfg.Horizon}, nil
	}
	return NewFixed(cfg.Coef), nil
}

// Fixed is a controller whose coefficient never changes.
type Fixed struct{ coef float64 }

// NewFixed returns a fixed controller.
func NewFixed(coef float64) *Fixed { return &Fixed{coef: coef} }

// Coef returns the coefficient.
func (f *Fixed) Coef() float64 { return f.coef }

// Update does nothing.
func (f *Fixed) Update(currentKL float64, nSteps int) {}

// Adaptive is the reference's AdaptiveKLController, in float64:
//
//	pe   = clip(currentKL/target - 1, -0.2, 0.2)
//	mult = 1 + pe*nSteps/horizon
//	coef *= mult
//
// There is no floor: when mult < 0 the coefficient changes sign, as in the reference. A NaN
// currentKL makes the coefficient NaN (numpy's clip propagates NaN).
type Adaptive struct{ coef, target, horizon float64 }

// NewAdaptive returns an adaptive controller; horizon must be > 0 and target != 0 (ErrParam).
func NewAdaptive(coef, target, horizon float64) (*Adaptive, error) {
	cfg := ControllerConfig{Type: AdaptiveController, Coef: coef, Target: target, Horizon: horizon}
	if err := cfg.validate("divergence.NewAdaptive"); err != nil {
		return nil, err
	}
	return &Adaptive{coef: coef, target: target, horizon: horizon}, nil
}

// Coef returns the current coefficient.
func (a *Adaptive) Coef() float64 { return a.coef }

// Update applies one proportional step.
func (a *Adaptive) Update(currentKL float64, nSteps int) {
	pe := currentKL/a.target - 1
	if pe < -0.2 {
		pe = -0.2
	} else if pe > 0.2 {
		pe = 0.2
	}
	mult := 1 + pe*float64(nSteps)/a.horizon
	a.coef *= mult
}
