package loop

import (
	"context"
	"fmt"
	"math"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
)

// Offload keeps the optimizer of a policy whose parameters live on a device in host memory
// (FSDP's cpu_offload, verl's optimizer_offload): the float32 master weights, the gradient the
// optimizer reads and the optimizer's state (AdamW's moments) are host tensors; the device keeps
// only what the forward and backward use, the weights and their gradients. Build the optimizer
// and the reduction on Params (NewHostAdamW, NewHostGradients, NewShardedAdamW) and give the loop
// Gradients (or DeviceGradients) and Optimizer of this Offload: the gradients come down after the
// backward (HostGradients, BucketedGradients, ShardedAdamW reduce them on the host, a ZeRO rank
// stepping its shard only) or once after a reduction on the device, the step runs on the host,
// and the updated weights go up to the device. The arithmetic is the host optimizer's, so a
// device whose kernels reproduce it (the gradient sum, AdamW) takes the same steps bit for bit.
type Offload struct {
	// Zero, when set, zeroes a device gradient (the backend's memset kernel); when nil, zeros
	// are uploaded from host memory.
	Zero func(g *tensor.Tensor) error
	// Uploaded, when set, runs after each upload of the optimizer's step: a model that derives
	// copies from its weights (packed or bfloat16 matrices) rebuilds them there.
	Uploaded func() error

	dev, host []Param
	bf16      []tensor.BF16 // staging for bfloat16 device weights
	zeros     []float32     // the default Zero's host zeros
	down, up  int64         // bytes moved (Bytes)
}

// NewOffload returns the host side of params, parameters on a device: float32 or bfloat16
// values (a bfloat16 copy is what a mixed-precision model computes with; its float32 master is
// here) and float32 gradients, neither in host memory. The masters are the device values,
// downloaded now; the host gradients are zero.
func NewOffload(params []Param) (*Offload, error) {
	if len(params) == 0 {
		return nil, fmt.Errorf("loop: Offload of no parameters")
	}
	o := &Offload{dev: params}
	for _, p := range params {
		if p.Value == nil || p.Grad == nil {
			return nil, fmt.Errorf("loop: parameter %q has a nil value or gradient", p.Name)
		}
		if p.Value.IsHost() || p.Grad.IsHost() {
			return nil, fmt.Errorf("loop: parameter %s is in host memory already: give the loop its Params, not an Offload", p.Name)
		}
		if err := tensor.CheckDType("loop.Offload", p.Name+" gradient", p.Grad, tensor.Float32); err != nil {
			return nil, err
		}
		if dt := p.Value.DType(); dt != tensor.Float32 && dt != tensor.BFloat16 {
			return nil, fmt.Errorf("loop: parameter %s is %v, want float32 or bfloat16", p.Name, dt)
		}
		if p.Value.Len() != p.Grad.Len() {
			return nil, fmt.Errorf("loop: parameter %s has %d values and %d gradients", p.Name, p.Value.Len(), p.Grad.Len())
		}
		w, err := tensor.New(tensor.CPU(), tensor.Float32, p.Value.Shape()...)
		if err != nil {
			return nil, err
		}
		g, err := tensor.NewLike(w, tensor.Float32)
		if err != nil {
			return nil, err
		}
		o.host = append(o.host, Param{Name: p.Name, Value: w, Grad: g, Decay: p.Decay})
	}
	return o, o.Download()
}

// Params are the host masters and gradient buffers, in the device parameters' order, with
// their names and decay flags: build the host optimizer and reduction on them. Writing a
// master (a loaded checkpoint) reaches the device at the next Upload.
func (o *Offload) Params() []Param { return o.host }

// Bytes returns the bytes downloaded (gradients, masters) and uploaded (weights, zeros) so far.
func (o *Offload) Bytes() (down, up int64) { return o.down, o.up }

// Download sets the masters to the device's values (after something else wrote them there).
// A bfloat16 device value gives its float32 widening: set the masters from the float32
// weights instead (Params, then Upload) when the model has them.
func (o *Offload) Download() error {
	for i, p := range o.dev {
		w, _ := o.host[i].Value.Float32s()
		if p.Value.DType() == tensor.Float32 {
			if err := tensor.CopyInto(o.host[i].Value, p.Value); err != nil {
				return fmt.Errorf("loop: offload %s: %w", p.Name, err)
			}
			o.down += 4 * int64(len(w))
			continue
		}
		h, err := tensor.To(tensor.CPU(), p.Value)
		if err != nil {
			return fmt.Errorf("loop: offload %s: %w", p.Name, err)
		}
		b, _ := h.BF16s()
		for j, x := range b {
			w[j] = x.Float32()
		}
		o.down += 2 * int64(len(w))
	}
	return nil
}

// Upload writes the masters into the device's values (rounded to bfloat16 for a bfloat16
// value).
func (o *Offload) Upload() error {
	for i, p := range o.dev {
		w, _ := o.host[i].Value.Float32s()
		src := o.host[i].Value
		if p.Value.DType() == tensor.BFloat16 {
			if cap(o.bf16) < len(w) {
				o.bf16 = make([]tensor.BF16, len(w))
			}
			b := o.bf16[:len(w)]
			for j, x := range w {
				b[j] = tensor.BF16FromFloat32(x)
			}
			var err error
			if src, err = tensor.FromBF16(b, p.Value.Shape()...); err != nil {
				return err
			}
		}
		if err := tensor.CopyInto(p.Value, src); err != nil {
			return fmt.Errorf("loop: offload %s: %w", p.Name, err)
		}
		o.up += int64(len(w) * p.Value.DType().Size())
	}
	return nil
}

// take moves every device gradient into its host buffer (zero: the reduction or the step took
// the last one) and zeroes the device's, so the policy's next backward starts from zero.
func (o *Offload) take() error {
	for i, p := range o.dev {
		if err := tensor.CopyInto(o.host[i].Grad, p.Grad); err != nil {
			return fmt.Errorf("loop: offload %s: %w", p.Name, err)
		}
		o.down += 4 * int64(p.Grad.Len())
		if err := o.zero(p.Grad); err != nil {
			return fmt.Errorf("loop: offload %s: %w", p.Name, err)
		}
	}
	return nil
}

func (o *Offload) zero(g *tensor.Tensor) error {
	if o.Zero != nil {
		return o.Zero(g)
	}
	if len(o.zeros) < g.Len() {
		o.zeros = make([]float32, g.Len())
	}
	z, err := tensor.FromFloat32(o.zeros[:g.Len()], g.Shape()...)
	if err == nil {
		err = tensor.CopyInto(g, z)
	}
	o.up += 4 * int64(g.Len())
	return err
}

// Gradients is the loop's Gradients for g, a host reduction built on Params: each micro-batch's
// gradient comes down after its backward (and the device's is zeroed), then g collects and
// reduces it on the host.
func (o *Offload) Gradients(g Gradients) Gradients { return &offloadGradients{o: o, g: g} }

// DeviceGradients is the loop's Gradients for g, a reduction on the device (the policy's own
// micro-batch sum, NCCL): after g's Reduce the reduced gradient comes down once into Params'
// gradients and the device's is zeroed.
func (o *Offload) DeviceGradients(g Gradients) Gradients {
	return &offloadGradients{o: o, g: g, onDevice: true}
}

type offloadGradients struct {
	o        *Offload
	g        Gradients
	onDevice bool
}

func (g *offloadGradients) Collect() error {
	if !g.onDevice {
		if err := g.o.take(); err != nil {
			return err
		}
	}
	return g.g.Collect()
}

func (g *offloadGradients) Reduce(ctx context.Context, comm collective.Comm, scale float32) (int64, error) {
	received, err := g.g.Reduce(ctx, comm, scale)
	if err == nil && g.onDevice {
		err = g.o.take()
	}
	return received, err
}

// Optimizer is the loop's Optimizer for opt, a host optimizer built on Params (a
// GroupOptimizer stays one): after each step that was taken (a finite norm) the masters go up
// to the device.
func (o *Offload) Optimizer(opt Optimizer) Optimizer {
	if g, ok := opt.(GroupOptimizer); ok {
		return &offloadGroupOptimizer{offloadOptimizer{o: o, opt: opt}, g}
	}
	return &offloadOptimizer{o: o, opt: opt}
}

type offloadOptimizer struct {
	o   *Offload
	opt Optimizer
}

func (p *offloadOptimizer) Steps() int { return p.opt.Steps() }

func (p *offloadOptimizer) Step(lr, maxNorm float64) (float64, error) {
	norm, err := p.opt.Step(lr, maxNorm)
	return norm, p.after(norm, err)
}

func (p *offloadOptimizer) after(norm float64, err error) error {
	if err != nil || math.IsNaN(norm) || math.IsInf(norm, 0) {
		return err // a skipped step changed no weight
	}
	if err := p.o.Upload(); err != nil {
		return err
	}
	if p.o.Uploaded != nil {
		return p.o.Uploaded()
	}
	return nil
}

type offloadGroupOptimizer struct {
	offloadOptimizer
	g GroupOptimizer
}

func (p *offloadGroupOptimizer) StepGroup(ctx context.Context, comm collective.Comm, lr, maxNorm float64) (float64, int64, error) {
	norm, received, err := p.g.StepGroup(ctx, comm, lr, maxNorm)
	return norm, received, p.after(norm, err)
}
