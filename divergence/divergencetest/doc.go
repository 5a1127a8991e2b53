// Package divergencetest is the conformance suite of package divergence's kernels for a tensor.Backend:
// every per-token KL penalty and its gradient, the full KL, the perception score and the KL-penalised rewards, each cross-checked against the CPU backend's pure-Go reference with
// backendtest.CrossCheck. A backend that implements divergence's kernel interfaces runs
//
//	func TestDivergence(t *testing.T) { divergencetest.Run(t, mybackend, backendtest.Config{}) }
//
// or every family at once with package conformance.
package divergencetest

import (
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/backendtest"
)

// Run cross-checks package divergence's ops on backend b (not the CPU backend) at cfg's shapes.
func Run(t *testing.T, b tensor.Backend, cfg backendtest.Config) {
	backendtest.CrossCheck(t, b, cfg, opsAt)
}
