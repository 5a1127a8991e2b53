//go:build !amd64 || noasm

package divergence

import "github.com/mtrl-go/mtrl/internal/dispatch"

// simdPenaltyImpls returns no vector implementations: this build uses the pure-Go loops only.
func simdPenaltyImpls() []dispatch.Impl[penaltySIMD] { return nil }
