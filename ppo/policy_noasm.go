//go:build !amd64 || noasm

package ppo

// simdPolicyImpls returns no vector implementations: this build uses the pure-Go loops only.
func simdPolicyImpls() []policyImpl { return nil }
