//go:build !cuda

package cuda_test

import (
	"errors"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/tensor"
)

func TestNotCompiled(t *testing.T) {
	b, err := cuda.New(0)
	if b != nil || !errors.Is(err, cuda.ErrNotCompiled) || !errors.Is(err, tensor.ErrDevice) {
		t.Fatalf("New(0) = %v, %v; want nil, ErrNotCompiled wrapping tensor.ErrDevice", b, err)
	}
	var z cuda.Backend
	if _, err := z.Alloc(4); !errors.Is(err, cuda.ErrNotCompiled) {
		t.Fatalf("Alloc: %v", err)
	}
	if _, err := tensor.New(&z, tensor.Float32, 2); !errors.Is(err, tensor.ErrDevice) {
		t.Fatalf("tensor.New on the stub: %v", err)
	}
}
