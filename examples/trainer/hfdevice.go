package main

import (
	"errors"
	"fmt"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// A model_path model on a device (worker.actor.device=cuda), on one rank or several (one
// device each): its gradients are summed and reduced on the device (loop.DeviceReduce), through
// the ranks' tensor collectives (NCCL in a binary built with -tags "cuda nccl"; without nccl,
// collective.HostTensors, which stages each buffer through the host). grad_reduce ordered keeps
// each micro-batch's gradient apart and adds them in the global order, the same bits at any
// number of ranks; bucketed accumulates them in place and all-reduces (ZeRO-2: reduce-scatters)
// buckets of grad_bucket_mb. NO_SHARD steps with the model's DeviceAdamW; optim and
// SHARD_GRAD_OP with loop.DeviceShardedAdamW, whose moments each rank writes as its shard.
// With offload_optimizer each rank's AdamW steps on the host (offload.go): NO_SHARD after the
// devices' reduction, ZeRO with the reduction too on the host.

// zeroMoments is a ZeRO optimizer as checkpoints see it: this rank's moment shards and the
// step count.
type zeroMoments interface {
	moments() ([]loop.MomentShard, error)
	SetMoments([]loop.MomentShard) error
	steps() *int
}

// hostZero is loop.ShardedAdamW's (host parameters).
type hostZero struct{ *loop.ShardedAdamW }

func (z hostZero) moments() ([]loop.MomentShard, error) { return z.Moments(), nil }
func (z hostZero) steps() *int                          { return &z.T }

// deviceZero is loop.DeviceShardedAdamW's (moments on the device).
type deviceZero struct{ *loop.DeviceShardedAdamW }

func (z deviceZero) moments() ([]loop.MomentShard, error) { return z.Moments() }
func (z deviceZero) steps() *int                          { return &z.T }

// testHostCollectives, when set (tests), makes the device ranks reduce through
// collective.HostTensors even where NCCL is compiled in.
var testHostCollectives bool

// testDeviceCollectives, when set (tests), sees each rank's tensor collectives.
var testDeviceCollectives func(collective.Tensors)

// deviceTraining is actorTraining for parameters ps on a device.
func (t *hfTrainer[P]) deviceTraining(ps []loop.Param, stage loop.Sharding, rc loop.ReduceConfig, rank, world int) (_ loop.Optimizer, _ loop.Gradients, err error) {
	var off *loop.Offload
	if stage != 0 && t.cfg.Worker.Actor.offloadOptimizer() {
		// ZeRO offloaded: the same reduction and sharded optimizer on host masters (the CPU
		// backend computes what the device kernels do), each micro-batch's gradient coming
		// down after its backward, the ranks' buffers reduced over the host Comm.
		if off, err = loop.NewOffload(ps); err != nil {
			return nil, nil, err
		}
		off.Zero = func(g *tensor.Tensor) error { return tensor.Axpby(g, g, 0, 0) }
		off.Uploaded = t.s.model.Repack
		ps = off.Params()
	}
	var closers []func() error
	defer func() {
		if err != nil {
			for _, c := range closers {
				_ = c()
			}
			return
		}
		// Released before the session gives its device back.
		prev := t.s.close
		t.s.close = func() error {
			var errs []error
			for _, c := range closers {
				errs = append(errs, c())
			}
			if prev != nil {
				errs = append(errs, prev())
			}
			return errors.Join(errs...)
		}
	}()
	var coll collective.Tensors
	if world > 1 && off != nil {
		if coll, err = collective.NewHostTensors(t.comm); err != nil {
			return nil, nil, err
		}
	} else if world > 1 {
		c, closeC, err := deviceCollectives(t.rctx, ps[0].Value.Backend(), t.comm)
		if err != nil {
			return nil, nil, err
		}
		coll, closers = c, append(closers, closeC)
		if testDeviceCollectives != nil {
			testDeviceCollectives(c)
		}
	}
	cfg := loop.DeviceReduceConfig{Ordered: rc.Ordered, BucketBytes: rc.BucketBytes, ShardOnly: stage == loop.ShardGradients && !rc.Ordered}
	g, err := loop.NewDeviceReduce(ps, coll, cfg, rank, world)
	if err != nil {
		return nil, nil, err
	}
	o := t.cfg.Worker.Actor.Optim
	if stage != 0 {
		repack := t.s.model.Repack
		if off != nil {
			repack = func() error { return nil } // Offload uploads, then repacks
		}
		zero, err := loop.NewDeviceShardedAdamW(g, stage, o.Betas[0], o.Betas[1], o.Eps, o.WeightDecay)
		if err != nil {
			return nil, nil, err
		}
		zero.Stepped = repack
		closers = append(closers, zero.Close)
		t.zero = deviceZero{zero}
		if off != nil {
			t.off = off
			return off.Optimizer(zero), off.Gradients(g), nil
		}
		return zero, g, nil
	}
	opt, adam, own, err := t.s.training(o.WeightDecay)
	if err != nil {
		return nil, nil, err
	}
	adam.Beta1, adam.Beta2, adam.Eps = o.Betas[0], o.Betas[1], o.Eps
	t.adam = adam
	if dev, ok := opt.(*loop.DeviceAdamW); ok { // its moments live on the device
		t.devOpt = dev
	}
	if ho, ok := opt.(hfOffloaded); ok { // its masters and moments live on the host (offload.go)
		t.off = ho.off
		if world > 1 {
			// The ranks' sum on the device (g, as without offload), then down once per
			// mini-batch: each rank steps the same host AdamW on the same sum.
			return opt, ho.off.DeviceGradients(g), nil
		}
	}
	if _, plain := own.(*loop.DeviceGradients); !plain {
		// An optimizer with its own gradient handling (one rank): keep it.
		if world > 1 {
			return nil, nil, fmt.Errorf("worker.actor.device: this optimizer of the device model (%T) runs on one rank", opt)
		}
		return opt, own, nil
	}
	return opt, g, nil
}

// deviceNote is the data-parallel start line's account of how device ranks reduce.
func deviceNote(a ActorConfig) string {
	switch {
	case a.Device != "cuda":
		return ""
	case haveNCCL:
		return ", one CUDA device each, gradients reduced between the devices by NCCL"
	}
	return ", one CUDA device each, gradients reduced through the host (collective.HostTensors: a binary built without -tags nccl)"
}
