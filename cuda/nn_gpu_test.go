//go:build cuda

package cuda_test

import (
	"testing"

	"github.com/mtrl-go/mtrl/tensor/nntest"
)

// TestNNOps certifies the transformer op families (tensor/nntest) on the device: cuBLAS GEMMs,
// the kernels of nn.cu and attention.cu, against the float64 reference, each run twice for
// bitwise determinism.
func TestNNOps(t *testing.T) { nntest.Run(t, device(t)) }
