// Package conformance certifies a tensor.Backend for every op family of mtrl in one call:
//
//	func TestConformance(t *testing.T) { conformance.Run(t, mybackend, backendtest.Config{}) }
//
// It runs package tensor's suites (tensortest, then backendtest's LogProb and Stats) and the
// suite each family keeps next to itself (divergencetest, ppotest, advantagetest, tprltest,
// perturbtest), as subtests named tensor, LogProb, Stats, Divergence, PPO, Advantage, TPRL and
// Perturb (go test -run TestConformance/PPO runs one). It is the one package allowed to import
// every family's suite, so that tensor/backendtest, below the families, imports none of them.
package conformance

import (
	"testing"

	"github.com/mtrl-go/mtrl/advantage/advantagetest"
	"github.com/mtrl-go/mtrl/divergence/divergencetest"
	"github.com/mtrl-go/mtrl/perturb/perturbtest"
	"github.com/mtrl-go/mtrl/ppo/ppotest"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/backendtest"
	"github.com/mtrl-go/mtrl/tensor/tensortest"
	"github.com/mtrl-go/mtrl/tprl/tprltest"
)

// Run runs every suite against backend b, which must not be the CPU backend (the reference).
func Run(t *testing.T, b tensor.Backend, cfg backendtest.Config) {
	t.Run("tensor", func(t *testing.T) { tensortest.Run(t, b) })
	for _, s := range []struct {
		name string
		run  func(*testing.T, tensor.Backend, backendtest.Config)
	}{
		{"LogProb", backendtest.LogProb}, {"Divergence", divergencetest.Run}, {"Stats", backendtest.Stats},
		{"PPO", ppotest.Run}, {"Advantage", advantagetest.Run}, {"TPRL", tprltest.Run}, {"Perturb", perturbtest.Run},
	} {
		t.Run(s.name, func(t *testing.T) { s.run(t, b, cfg) })
	}
}
