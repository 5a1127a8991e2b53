// Package perturbtest is the conformance suite of package perturb's kernels for a tensor.Backend:
// patch blackening of a batch of images, each cross-checked against the CPU backend's pure-Go reference with
// backendtest.CrossCheck. A backend that implements perturb's kernel interfaces runs
//
//	func TestPerturb(t *testing.T) { perturbtest.Run(t, mybackend, backendtest.Config{}) }
//
// or every family at once with package conformance.
package perturbtest

import (
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/backendtest"
)

// Run cross-checks package perturb's ops on backend b (not the CPU backend) at cfg's shapes.
func Run(t *testing.T, b tensor.Backend, cfg backendtest.Config) {
	backendtest.CrossCheck(t, b, cfg, opsAt)
}
