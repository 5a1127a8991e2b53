package tensor_test

import (
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

type ranker interface{ Rank() int }

// direct implements the kernel interface on the backend itself; viaSet behind Kernels.
type direct struct{ tensor.Backend }
type viaSet struct{ tensor.Backend }
type rankKernels struct{}

func (direct) Rank() int      { return 1 }
func (viaSet) Kernels() any   { return rankKernels{} }
func (rankKernels) Rank() int { return 2 }
func (viaSet) Name() string   { return "via-set" }
func (direct) Name() string   { return "direct" }

func TestKernelOf(t *testing.T) {
	for _, c := range []struct {
		b    tensor.Backend
		want int
	}{{direct{tensor.CPU()}, 1}, {viaSet{tensor.CPU()}, 2}, {tensor.CPU(), 0}} {
		got := 0
		if k, ok := tensor.KernelOf[ranker](c.b); ok {
			got = k.Rank()
		}
		if got != c.want {
			t.Errorf("%s: kernel %d, want %d (0: none)", c.b.Name(), got, c.want)
		}
	}
}
