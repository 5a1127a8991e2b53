//go:build cuda

package main

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/examples/internal/vlm"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// cudaActor is actorDevice on a CUDA device: the models' op set (vlm.CUDAOps) and what the
// optimizer keeps there.
type cudaActor struct {
	b       *cuda.Backend
	ops     *vlm.CUDAOps
	models  []*vlm.Model
	acc     map[*vlm.Model][]*tensor.Tensor // per model, per parameter: the micro-batch gradient sum
	flat    map[*vlm.Model]*tensor.Tensor   // per model, the sums flattened: acc's views are its rows
	nccl    ncclComm                        // the ranks' NCCL communicator (allReduce), or nil
	ncclOf  collective.Comm                 // the Comm nccl was bootstrapped over
	moments map[*loop.AdamW]*deviceMoments
}

// ncclComm is the device collectives allReduce needs: cuda.NCCL's (device_nccl.go; without
// -tags nccl, device_nonccl.go has none).
type ncclComm interface {
	collective.Tensors
	Abort() error
	Close() error
}

type deviceMoments struct{ m, v []*tensor.Tensor }

// testDeviceOpened, when set (tests), sees the device each trainer opens.
var testDeviceOpened func(ordinal int, name string)

// testNCCLReduced, when set (tests), sees each allReduce that NCCL completed and its buckets.
var testNCCLReduced func(buckets int)

// useDevice opens CUDA device ordinal and moves m there (vlm.Model.UseOps with the model's
// CUDA op set) for the rest of the run.
func useDevice(m *vlm.Model, ordinal int) (actorDevice, error) {
	b, err := cuda.New(ordinal)
	if err != nil {
		return nil, err
	}
	if testDeviceOpened != nil {
		testDeviceOpened(ordinal, b.Name())
	}
	o, err := vlm.NewCUDAOps(m.Config, b)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	d := &cudaActor{b: b, ops: o, acc: map[*vlm.Model][]*tensor.Tensor{}, flat: map[*vlm.Model]*tensor.Tensor{}, moments: map[*loop.AdamW]*deviceMoments{}}
	if err := d.attach(m); err != nil {
		_ = o.Close()
		_ = b.Close()
		return nil, err
	}
	return d, nil
}

func (d *cudaActor) backend() tensor.Backend { return d.b }

// openCUDA opens CUDA device ordinal for a model_path run (hflm.LoadOn) and returns its
// closer.
func openCUDA(ordinal int) (tensor.Backend, func() error, error) {
	b, err := cuda.New(ordinal)
	if err != nil {
		return nil, nil, err
	}
	if testDeviceOpened != nil {
		testDeviceOpened(ordinal, b.Name())
	}
	return b, b.Close, nil
}

func (d *cudaActor) attach(m *vlm.Model) error {
	if err := m.UseOps(d.ops); err != nil {
		return err
	}
	d.models = append(d.models, m)
	return nil
}

// params returns m's device parameters.
func (d *cudaActor) params(m *vlm.Model) ([]*vlm.Param, error) {
	ps, err := m.DeviceParams()
	if err == nil && ps == nil {
		err = fmt.Errorf("device: the model is not on %s", d.b.Name())
	}
	return ps, err
}

func (d *cudaActor) accumulate(m *vlm.Model) error {
	ps, err := d.params(m)
	if err != nil {
		return err
	}
	acc := d.acc[m]
	if acc == nil {
		// One flat sum (zeroed by the allocation), so that allReduce reduces buckets of it.
		flat, err := tensor.New(d.b, tensor.Float32, m.NumParams())
		if err != nil {
			return err
		}
		off := 0
		for _, p := range ps {
			rows, err := flat.Rows(off, off+p.G.Len())
			if err == nil {
				rows, err = rows.Reshape(p.G.Shape()...)
			}
			if err != nil {
				_ = flat.Release()
				return err
			}
			acc = append(acc, rows)
			off += p.G.Len()
		}
		d.acc[m], d.flat[m] = acc, flat
	}
	for i, p := range ps {
		if err := d.ops.Add(acc[i], p.G, p.G.Len()); err != nil {
			return err
		}
		if err := d.ops.Zero(p.G, p.G.Len()); err != nil {
			return err
		}
	}
	return nil
}

func (d *cudaActor) finish(m *vlm.Model, scale float32) error {
	ps, err := d.params(m)
	if err != nil {
		return err
	}
	acc := d.acc[m]
	if acc == nil {
		return fmt.Errorf("gradient reduction: no micro-batch on the device")
	}
	for i, p := range ps {
		if err := tensor.CopyInto(p.G, acc[i]); err != nil {
			return err
		}
		if scale != 1 {
			if err := d.ops.Scale(p.G, p.G.Len(), scale); err != nil {
				return err
			}
		}
		if err := d.ops.Zero(acc[i], acc[i].Len()); err != nil {
			return err
		}
	}
	return nil
}

func (d *cudaActor) allReduce(ctx context.Context, comm collective.Comm, m *vlm.Model, scale float32, bucket int) error {
	flat := d.flat[m]
	if flat == nil {
		return fmt.Errorf("gradient reduction: no micro-batch on the device")
	}
	if d.nccl != nil && d.ncclOf != comm {
		errs := d.nccl.Close()
		if d.nccl = nil; errs != nil {
			return errs
		}
	}
	if d.nccl == nil {
		nc, err := bootstrapNCCL(ctx, d.b, comm)
		if err != nil {
			return err
		}
		d.nccl, d.ncclOf = nc, comm
	}
	err := func() error {
		n, buckets := flat.Len(), 0
		for lo := 0; lo < n; lo += max(1, bucket) {
			buckets++
			b, err := flat.Rows(lo, min(n, lo+max(1, bucket)))
			if err != nil {
				return err
			}
			if err := d.nccl.AllReduce(ctx, b, collective.Sum); err != nil {
				return err
			}
		}
		if testNCCLReduced != nil {
			testNCCLReduced(buckets)
		}
		return d.finish(m, scale)
	}()
	if err != nil {
		_ = d.nccl.Abort() // the other ranks stop waiting for this one
		d.nccl = nil
	}
	return err
}

func (d *cudaActor) appendGrad(m *vlm.Model, dst []float32) ([]float32, error) {
	ps, err := d.params(m)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		h, err := tensor.To(tensor.CPU(), p.G)
		if err != nil {
			return nil, err
		}
		v, _ := h.Float32s()
		dst = append(dst, v...)
		if err := d.ops.Zero(p.G, p.G.Len()); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

func (d *cudaActor) setGrad(m *vlm.Model, flat []float32) error {
	ps, err := d.params(m)
	if err != nil {
		return err
	}
	off := 0
	for _, p := range ps {
		n := p.G.Len()
		if off+n > len(flat) {
			return fmt.Errorf("gradient reduction: %d values for %d parameters", len(flat), m.NumParams())
		}
		h := tensor.Must(tensor.FromFloat32(flat[off:off+n], p.G.Shape()...))
		if err := tensor.CopyInto(p.G, h); err != nil {
			return err
		}
		off += n
	}
	return nil
}

func (d *cudaActor) zero(g *tensor.Tensor) error { return d.ops.Zero(g, g.Len()) }

func (d *cudaActor) step(m *vlm.Model, opt *loop.AdamW, decay []bool, lr, maxNorm float64) (float64, error) {
	ps, err := d.params(m)
	if err != nil {
		return 0, err
	}
	if len(ps) != len(opt.M) || len(decay) != len(ps) {
		return 0, fmt.Errorf("adamw: %d parameters, %d moments, %d decay flags", len(ps), len(opt.M), len(decay))
	}
	gs := make([]*tensor.Tensor, len(ps))
	for i, p := range ps {
		gs[i] = p.G
	}
	zero := func() error {
		for _, g := range gs {
			if err := d.ops.Zero(g, g.Len()); err != nil {
				return err
			}
		}
		return nil
	}
	norm, err := d.ops.GradNorm(gs)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return norm, zero() // the non-finite check: no step
	}
	if err := d.ops.ClipGrads(gs, norm, maxNorm); err != nil {
		return 0, err
	}
	mom, err := d.momentsOf(opt)
	if err != nil {
		return 0, err
	}
	s := opt.Next(lr)
	for i, p := range ps {
		st := vlm.AdamWStep{Beta1: s.Beta1, Beta2: s.Beta2, StepSize: s.StepSize, InvSqrtBC2: s.InvSqrtBC2,
			Eps: s.Eps, Shrink: opt.Shrink(decay[i], lr)}
		if err := d.ops.AdamW(p.W, p.G, mom.m[i], mom.v[i], p.W.Len(), st); err != nil {
			return 0, err
		}
	}
	return norm, zero()
}

// momentsOf returns opt's moments on the device, uploading opt.M and opt.V the first time.
func (d *cudaActor) momentsOf(opt *loop.AdamW) (*deviceMoments, error) {
	if mom := d.moments[opt]; mom != nil {
		return mom, nil
	}
	mom := &deviceMoments{}
	up := func(v []float32) (*tensor.Tensor, error) {
		return tensor.To(d.b, tensor.Must(tensor.FromFloat32(v, len(v))))
	}
	for i := range opt.M {
		m, err := up(opt.M[i])
		if err != nil {
			d.release(mom)
			return nil, err
		}
		mom.m = append(mom.m, m)
		v, err := up(opt.V[i])
		if err != nil {
			d.release(mom)
			return nil, err
		}
		mom.v = append(mom.v, v)
	}
	d.moments[opt] = mom
	return mom, nil
}

func (d *cudaActor) saveMoments(opt *loop.AdamW) error {
	mom := d.moments[opt]
	if mom == nil {
		return nil // no device step yet: opt.M and opt.V are current
	}
	for i := range opt.M {
		if err := tensor.CopyInto(tensor.Must(tensor.FromFloat32(opt.M[i], len(opt.M[i]))), mom.m[i]); err != nil {
			return err
		}
		if err := tensor.CopyInto(tensor.Must(tensor.FromFloat32(opt.V[i], len(opt.V[i]))), mom.v[i]); err != nil {
			return err
		}
	}
	return nil
}

func (d *cudaActor) forget(opt *loop.AdamW) {
	if mom := d.moments[opt]; mom != nil {
		d.release(mom)
		delete(d.moments, opt)
	}
}

func (d *cudaActor) release(mom *deviceMoments) {
	for _, t := range append(mom.m, mom.v...) {
		_ = t.Release()
	}
}

func (d *cudaActor) close() error {
	var errs []error
	for _, m := range d.models {
		errs = append(errs, m.UseOps(nil)) // the newest weights back on the host
	}
	for opt := range d.moments {
		errs = append(errs, d.saveMoments(opt))
		d.forget(opt)
	}
	if d.nccl != nil {
		errs = append(errs, d.nccl.Close())
	}
	for _, flat := range d.flat {
		_ = flat.Release()
	}
	errs = append(errs, d.ops.Close(), d.b.Close())
	return errors.Join(errs...)
}

// deviceCollectives are the tensor collectives of comm's ranks for a model_path model on
// backend b: NCCL between CUDA devices (bootstrapped over comm), or, in a binary built without
// -tags nccl (and for host tensors), collective.HostTensors, which downloads each buffer,
// reduces it over comm and uploads it. The closer releases them.
func deviceCollectives(ctx context.Context, b tensor.Backend, comm collective.Comm) (collective.Tensors, func() error, error) {
	cb, ok := b.(*cuda.Backend)
	if !ok || !haveNCCL || testHostCollectives {
		h, err := collective.NewHostTensors(comm)
		return h, func() error { return nil }, err
	}
	nc, err := bootstrapNCCL(ctx, cb, comm)
	if err != nil {
		return nil, nil, err
	}
	return nc, nc.Close, nil
}
