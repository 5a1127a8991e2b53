package tensor_test

import (
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/tensortest"
)

func TestCPUConformance(t *testing.T) { tensortest.Run(t, tensor.CPU()) }

// TestCPUConformanceImpls runs the log-prob part of the suite on every implementation of the
// vocabulary loops this CPU supports (the default, the best, already ran above).
func TestCPUConformanceImpls(t *testing.T) {
	for _, name := range tensor.LogProbImpls()[1:] {
		t.Run("impl="+name, func(t *testing.T) {
			defer tensor.UseLogProbImpl(name)()
			tensortest.Run(t, tensor.CPU())
		})
	}
}

// forEachLogProbImpl runs bench under impl=<name> for every implementation of the vocabulary
// loops (SIMD kernels and the pure-Go reference).
func forEachLogProbImpl(b *testing.B, bench func(*testing.B)) {
	for _, name := range tensor.LogProbImpls() {
		b.Run("impl="+name, func(b *testing.B) {
			defer tensor.UseLogProbImpl(name)()
			bench(b)
		})
	}
}

func BenchmarkLogProbEntropy(b *testing.B) {
	forEachLogProbImpl(b, func(b *testing.B) { tensortest.BenchLogProbEntropy(b, tensor.CPU()) })
}

func BenchmarkLogProbEntropyBackward(b *testing.B) {
	forEachLogProbImpl(b, func(b *testing.B) { tensortest.BenchLogProbEntropyBackward(b, tensor.CPU()) })
}

func BenchmarkMaskedWhiten(b *testing.B) { tensortest.BenchMaskedWhiten(b, tensor.CPU()) }

func BenchmarkTopPMask(b *testing.B) { tensortest.BenchTopPMask(b, tensor.CPU()) }
