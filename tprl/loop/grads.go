package loop

import (
	"context"
	"fmt"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
)

// Gradients sums a policy's micro-batch gradients over the micro-batches of a mini-batch and
// over the ranks. Reduce leaves the sum in the policy's gradients, and the Optimizer's Step
// zeroes them: a policy whose backward adds to its gradients relies on that.
type Gradients interface {
	// Collect takes the gradient of the micro-batch just backpropagated into the pending sum
	// and zeroes the policy's.
	Collect() error
	// Reduce sets the policy's gradient to scale × the sum of every rank's collected
	// micro-batch gradients and clears the pending sum. It returns the bytes this rank
	// received from the others.
	Reduce(ctx context.Context, comm collective.Comm, scale float32) (received int64, err error)
}

// HostGradients is the Gradients of host parameters: each micro-batch's gradient is kept apart
// and the sum runs in the global micro-batch order (collective.OrderedSum), so the result, and
// every replica's weights, are those of one device bit for bit, whatever the number of ranks.
type HostGradients struct {
	params  []Param
	pending []float32 // the collected micro-batch gradients, concatenated
	per     int
}

// NewHostGradients returns the Gradients of params (float32 host tensors; only Grad is read).
func NewHostGradients(params []Param) (*HostGradients, error) {
	if err := checkParams(params, false); err != nil {
		return nil, err
	}
	g := &HostGradients{params: params}
	for _, p := range params {
		g.per += p.Grad.Len()
	}
	return g, nil
}

// checkParams requires float32 host gradients, and values of their size when withValues.
func checkParams(params []Param, withValues bool) error {
	if len(params) == 0 {
		return fmt.Errorf("loop: no parameters")
	}
	for _, p := range params {
		ts := []*tensor.Tensor{p.Grad}
		if withValues {
			ts = append(ts, p.Value)
		}
		for _, t := range ts {
			if t == nil {
				return fmt.Errorf("loop: parameter %q has a nil value or gradient", p.Name)
			}
			if err := tensor.CheckDType("loop.Param", p.Name, t, tensor.Float32); err != nil {
				return err
			}
			if !t.IsHost() {
				return fmt.Errorf("loop: parameter %s is not in host memory; give the loop Gradients and an Optimizer of its backend", p.Name)
			}
		}
		if withValues && p.Value.Len() != p.Grad.Len() {
			return fmt.Errorf("loop: parameter %s has %d values and %d gradients", p.Name, p.Value.Len(), p.Grad.Len())
		}
	}
	return nil
}

// Collect implements Gradients.
func (g *HostGradients) Collect() (err error) {
	g.pending, err = takeGrads(g.pending, g.params)
	return err
}

// takeGrads appends the gradients of ps, flattened in order, to pending and zeroes them for
// the next micro-batch.
func takeGrads(pending []float32, ps []Param) ([]float32, error) {
	gs, err := gradSlices(ps)
	if err != nil {
		return pending, err
	}
	for _, x := range gs {
		pending = append(pending, x...)
	}
	zero(gs)
	return pending, nil
}

// Reduce implements Gradients.
func (g *HostGradients) Reduce(ctx context.Context, comm collective.Comm, scale float32) (int64, error) {
	local := g.pending
	g.pending = nil
	sum, received, err := collective.OrderedSum(ctx, comm, local, g.per)
	if err != nil {
		return 0, err
	}
	if scale != 1 {
		for i := range sum {
			sum[i] *= scale
		}
	}
	gs, err := gradSlices(g.params)
	if err != nil {
		return 0, err
	}
	off := 0
	for _, x := range gs {
		copy(x, sum[off:off+len(x)])
		off += len(x)
	}
	return received, nil
}

func gradSlices(ps []Param) ([][]float32, error) {
	gs := make([][]float32, len(ps))
	for i, p := range ps {
		g, err := p.Grad.Float32s()
		if err != nil {
			return nil, fmt.Errorf("loop: gradient of %s: %w", p.Name, err)
		}
		gs[i] = g
	}
	return gs, nil
}
