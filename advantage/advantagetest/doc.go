// Package advantagetest is the conformance suite of package advantage's kernels for a tensor.Backend:
// every advantage estimator (GAE, REINFORCE++, ReMax and the group estimators GRPO, pass@k and RLOO), each cross-checked against the CPU backend's pure-Go reference with
// backendtest.CrossCheck. A backend that implements advantage's kernel interfaces runs
//
//	func TestAdvantage(t *testing.T) { advantagetest.Run(t, mybackend, backendtest.Config{}) }
//
// or every family at once with package conformance.
package advantagetest

import (
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/backendtest"
)

// Run cross-checks package advantage's ops on backend b (not the CPU backend) at cfg's shapes.
func Run(t *testing.T, b tensor.Backend, cfg backendtest.Config) {
	backendtest.CrossCheck(t, b, cfg, opsAt)
}
