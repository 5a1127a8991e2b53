package tensor_test

import (
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/tensortest"
)

func TestCPUConformance(t *testing.T) { tensortest.Run(t, tensor.CPU()) }

func BenchmarkLogProbEntropy(b *testing.B) { tensortest.BenchLogProbEntropy(b, tensor.CPU()) }

func BenchmarkLogProbEntropyBackward(b *testing.B) {
	tensortest.BenchLogProbEntropyBackward(b, tensor.CPU())
}

func BenchmarkMaskedWhiten(b *testing.B) { tensortest.BenchMaskedWhiten(b, tensor.CPU()) }

func BenchmarkTopPMask(b *testing.B) { tensortest.BenchTopPMask(b, tensor.CPU()) }
