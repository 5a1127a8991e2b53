// Package probe holds hooks that the examples' device tests set to see, on a GPU, where a
// device run first departs from the CPU's: what each scoring pass of a vision-language policy
// received and returned, and a model's intermediate results stage by stage. Both are nil
// outside those tests, where they cost a nil check; they are not safe to set while a model
// runs on another goroutine.
package probe

import (
	"fmt"

	"github.com/mtrl-go/mtrl/tensor"
)

// Stage, when set, sees a model's intermediate result at a named stage ("vision.pixels",
// "vision.block.0", "lm.embed", "lm.layer.3", …) on the model's backend, before the model
// reuses its buffer: a hook keeps a copy (Host), never x.
var Stage func(name string, x *tensor.Tensor)

// Show calls Stage, when set, with x at the stage named by format, its %d filled with i (i < 0:
// format is the name); without a hook it costs a nil check.
func Show(format string, i int, x *tensor.Tensor) {
	if Stage == nil {
		return
	}
	name := format
	if i >= 0 {
		name = fmt.Sprintf(format, i)
	}
	Stage(name, x)
}

// Score, when set, sees each scoring pass of a qwenvl.Policy after the model scored it.
var Score func(Pass)

// Pass is one scoring pass (a micro-batch of rows) as the model received it on the host.
type Pass struct {
	Perturbed bool
	Train     bool // a pass that keeps activations for a backward (loop.Policy.Forward)
	Seed      uint64
	IDs       []uint64   // the rows' ids (the perturbation's), perturbed passes only
	Pixels    [][][]byte // each row's images, 8-bit RGB, as the processor received them
	// Samples are the rows' qwenvl.Samples ([]qwenvl.Sample: pixel_values, grids, expanded ids).
	Samples     any
	Completions []int // each row's completion length (its last tokens)
	Temperature float32
	LogProbs    [][]float32 // what the pass returned
}

// Host returns x's values as float32 on the host (a copy; bfloat16 widened).
func Host(x *tensor.Tensor) ([]float32, error) {
	h, err := tensor.To(tensor.CPU(), x)
	if err != nil {
		return nil, err
	}
	if x.DType() == tensor.BFloat16 {
		b, err := h.BF16s()
		if err != nil {
			return nil, err
		}
		out := make([]float32, len(b))
		tensor.WidenBF16(out, b)
		return out, nil
	}
	return h.Float32s()
}
