package divergence

import (
	"strings"

	"github.com/mtrl-go/mtrl/internal/enum"
	"github.com/mtrl-go/mtrl/tensor"
)

// Kind selects the per-token KL estimator of compute_kl (docs/semantics.md#kl-penalty).
type Kind int

const (
	// KL is the k1 estimator lp - ref ("kl", alias "k1").
	KL Kind = iota
	// Abs is |lp - ref| ("abs").
	Abs
	// MSE is the k2 estimator 0.5*(lp - ref)^2 ("mse", alias "k2").
	MSE
	// LowVarKL is the k3 estimator: x = clamp(ref-lp, -20, 20), clamp(exp(x)-x-1, -10, 10)
	// ("low_var_kl", alias "k3").
	LowVarKL
	// Full is the exact KL between full log-distributions, summed over the last axis V:
	// sum_v exp(lp_v) * (lp_v - ref_v) ("full").
	Full
)

var kinds = enum.Table[Kind]{Type: "divergence.Kind", Noun: "KL penalty",
	Names:  []string{KL: "kl", Abs: "abs", MSE: "mse", LowVarKL: "low_var_kl", Full: "full"},
	Errorf: tensor.Errorf, Sentinel: tensor.ErrParam}

// String returns the reference's name of the kind ("kl", "abs", "mse", "low_var_kl", "full").
func (k Kind) String() string { return kinds.String(k) }

// Valid reports whether k is one of the defined kinds.
func (k Kind) Valid() bool { return kinds.Valid(k) }

// ParseKind parses the reference's kl_penalty names ("kl", "abs", "mse", "low_var_kl", "full")
// and the aliases "k1", "k2" and "k3". Matching is exact (case-sensitive, as in the reference);
// anything else is an ErrParam error.
func ParseKind(s string) (Kind, error) {
	switch s {
	case "kl", "k1":
		return KL, nil
	case "abs":
		return Abs, nil
	case "mse", "k2":
		return MSE, nil
	case "low_var_kl", "k3":
		return LowVarKL, nil
	case "full":
		return Full, nil
	}
	return 0, tensor.Errorf(tensor.ErrParam, "divergence.ParseKind", "s", "unknown KL penalty %q (want one of %s, k1, k2, k3)", s, strings.Join(kinds.Names, ", "))
}

// MarshalText implements encoding.TextMarshaler with the name String returns; a value outside
// the defined constants is an error.
func (k Kind) MarshalText() ([]byte, error) { return kinds.MarshalText(k) }

// UnmarshalText implements encoding.TextUnmarshaler with ParseKind, so configuration files
// (JSON, YAML) hold the name.
func (k *Kind) UnmarshalText(b []byte) error { return enum.UnmarshalText(k, b, ParseKind) }
