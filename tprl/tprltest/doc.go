// Package tprltest is the conformance suite of package tprl's kernels for a tensor.Backend:
// the top-p token selections and their union with their statistics, and trajectory advantage shaping in both scopes, each cross-checked against the CPU backend's pure-Go reference with
// backendtest.CrossCheck. A backend that implements tprl's kernel interfaces runs
//
//	func TestTPRL(t *testing.T) { tprltest.Run(t, mybackend, backendtest.Config{}) }
//
// or every family at once with package conformance.
package tprltest

import (
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/backendtest"
)

// Run cross-checks package tprl's ops on backend b (not the CPU backend) at cfg's shapes.
func Run(t *testing.T, b tensor.Backend, cfg backendtest.Config) {
	backendtest.CrossCheck(t, b, cfg, opsAt)
}
