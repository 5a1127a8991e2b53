// Package ppotest is the conformance suite of package ppo's kernels for a tensor.Backend:
// the aggregated average loss, the policy loss of every loss type and aggregation mode, the value loss, the KL loss and the entropy penalty, with and without gradient scaling and accumulation, each cross-checked against the CPU backend's pure-Go reference with
// backendtest.CrossCheck. A backend that implements ppo's kernel interfaces runs
//
//	func TestPPO(t *testing.T) { ppotest.Run(t, mybackend, backendtest.Config{}) }
//
// or every family at once with package conformance.
package ppotest

import (
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/backendtest"
)

// Run cross-checks package ppo's ops on backend b (not the CPU backend) at cfg's shapes.
func Run(t *testing.T, b tensor.Backend, cfg backendtest.Config) {
	backendtest.CrossCheck(t, b, cfg, opsAt)
}
