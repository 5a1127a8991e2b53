package nntest_test

import (
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/nntest"
)

// TestCPU certifies the CPU backend (its pure-Go kernels, or the SIMD ones where an op has
// them; under -tags noasm the pure-Go ones only).
func TestCPU(t *testing.T) { nntest.Run(t, tensor.CPU()) }
