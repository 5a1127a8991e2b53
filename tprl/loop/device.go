package loop

import (
	"context"
	"fmt"
	"math"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
)

// DeviceAdamW is the Optimizer of parameters on any backend (a CUDA device): the gradient norm,
// clipping and torch's AdamW step (tensor.ClipGradNorm, tensor.AdamWStep) run where the
// parameters live, and the moments stay there. The embedded AdamW holds the hyper-parameters
// and the step count; its M and V are the host's copy of the moments, written by SaveMoments
// and read by LoadMoments (a checkpoint, a resume). Over host parameters (the masters of an
// Offload) the same ops run on the CPU with the same arithmetic, and M and V are the moments
// themselves.
type DeviceAdamW struct {
	*AdamW
	Params []Param
	// Stepped, when set, runs after each step taken: a model that derives copies from its
	// weights (packed or bfloat16 matrices) rebuilds them there.
	Stepped func() error
	m, v    []*tensor.Tensor
}

// DeviceGradients is the Gradients of one device: the backward adds every micro-batch's
// gradient into the parameters' gradients, so Collect has nothing to move and Reduce scales
// the sum in place. It sums in micro-batch order into one tensor, not micro-batch by
// micro-batch as HostGradients does, so the sum's float32 roundings differ from the host's.
// One rank only: data-parallel ranks reduce with DeviceReduce.
type DeviceGradients struct {
	Params []Param
}

// NewDeviceAdamW creates fresh AdamW state for params (all on one backend) with torch's
// hyper-parameters.
func NewDeviceAdamW(params []Param, beta1, beta2, eps, weightDecay float64) (*DeviceAdamW, error) {
	if len(params) == 0 {
		return nil, fmt.Errorf("loop: no parameters")
	}
	sizes := make([]int, len(params))
	o := &DeviceAdamW{Params: params}
	for i, p := range params {
		if p.Value == nil || p.Grad == nil || p.Value.Backend() != params[0].Value.Backend() {
			return nil, fmt.Errorf("loop: parameter %s: nil, or not on %s", p.Name, params[0].Value.Backend().Name())
		}
		sizes[i] = p.Value.Len()
	}
	o.AdamW = NewAdamW(sizes, beta1, beta2, eps, weightDecay)
	for i, p := range params {
		var m, v *tensor.Tensor
		var err error
		if p.Value.IsHost() { // the moments are the host copy itself (an offloaded optimizer)
			m, err = tensor.FromFloat32(o.M[i], p.Value.Shape()...)
			if err == nil {
				v, err = tensor.FromFloat32(o.V[i], p.Value.Shape()...)
			}
		} else {
			m, err = tensor.NewLike(p.Value, tensor.Float32)
			if err == nil {
				v, err = tensor.NewLike(p.Value, tensor.Float32)
			}
		}
		if err != nil {
			return nil, err
		}
		o.m, o.v = append(o.m, m), append(o.v, v)
	}
	return o, nil
}

// Steps is the number of steps taken.
func (o *DeviceAdamW) Steps() int { return o.T }

// Step implements Optimizer: the global gradient norm, clipping to maxNorm (when > 0),
// and, when the norm is finite, one AdamW step of every parameter; the gradients are zero
// afterwards either way. It returns the norm before clipping.
func (o *DeviceAdamW) Step(lr, maxNorm float64) (float64, error) {
	grads := make([]*tensor.Tensor, len(o.Params))
	for i, p := range o.Params {
		grads[i] = p.Grad
	}
	var norm float64
	var err error
	if maxNorm > 0 {
		norm, err = tensor.ClipGradNorm(grads, maxNorm)
	} else {
		norm, err = tensor.GradNorm(grads)
	}
	if err == nil && !math.IsNaN(norm) && !math.IsInf(norm, 0) {
		o.T++
		for i, p := range o.Params {
			cfg := tensor.AdamWConfig{LR: lr, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps}
			if p.Decay {
				cfg.WeightDecay = o.WeightDecay
			}
			if err = tensor.AdamWStep(tensor.AdamWParams{Param: p.Value, Grad: p.Grad, ExpAvg: o.m[i], ExpAvgSq: o.v[i]}, o.T, cfg); err != nil {
				break
			}
		}
		if err == nil && o.Stepped != nil {
			err = o.Stepped()
		}
	}
	for _, g := range grads {
		if zerr := zeroTensor(g); err == nil {
			err = zerr
		}
	}
	return norm, err
}

// SaveMoments downloads the moments into the host copy M and V.
func (o *DeviceAdamW) SaveMoments() error {
	for i := range o.m {
		for _, p := range []struct {
			dst []float32
			src *tensor.Tensor
		}{{o.M[i], o.m[i]}, {o.V[i], o.v[i]}} {
			v, err := tensor.HostFloat32s(p.src)
			if err != nil {
				return err
			}
			copy(p.dst, v)
		}
	}
	return nil
}

// LoadMoments uploads the host copy M and V into the device's moments.
func (o *DeviceAdamW) LoadMoments() error {
	for i := range o.m {
		for _, p := range []struct {
			src []float32
			dst *tensor.Tensor
		}{{o.M[i], o.m[i]}, {o.V[i], o.v[i]}} {
			h, err := tensor.FromFloat32(p.src, p.dst.Shape()...)
			if err == nil {
				err = tensor.CopyInto(p.dst, h)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// Collect implements Gradients: nothing to do, the next micro-batch's backward adds to the
// same gradients.
func (g *DeviceGradients) Collect() error { return nil }

// Reduce implements Gradients on one rank: the gradients become scale × their sum.
func (g *DeviceGradients) Reduce(_ context.Context, comm collective.Comm, scale float32) (int64, error) {
	if comm != nil && comm.Size() > 1 {
		return 0, fmt.Errorf("loop: DeviceGradients is one rank's; %d data-parallel ranks reduce with DeviceReduce", comm.Size())
	}
	if scale == 1 {
		return 0, nil
	}
	for _, p := range g.Params {
		if err := tensor.Axpby(p.Grad, p.Grad, scale, 0); err != nil {
			return 0, err
		}
	}
	return 0, nil
}

// zeroTensor sets a float32 tensor to zero on its backend.
func zeroTensor(t *tensor.Tensor) error { return tensor.Axpby(t, t, 0, 0) }
