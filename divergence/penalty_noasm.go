//go:build !amd64 || noasm

package divergence

// simdPenaltyImpls returns no vector implementations: this build uses the pure-Go loops only.
func simdPenaltyImpls() []penaltyImpl { return nil }
