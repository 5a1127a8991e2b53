//go:build !amd64 || noasm

package ppo

import "github.com/mtrl-go/mtrl/internal/dispatch"

// simdPolicyImpls returns no vector implementations: this build uses the pure-Go loops only.
func simdPolicyImpls() []dispatch.Impl[policySIMD] { return nil }
