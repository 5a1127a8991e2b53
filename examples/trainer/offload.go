package main

import (
	"fmt"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/internal/vlm"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// OffloadConfig is EasyR1's worker.actor.offload section (verl's fsdp_config.param_offload and
// optimizer_offload are aliases).
type OffloadConfig struct {
	// OffloadParams would move the policy's weights off the device between its uses; with
	// device=cuda it is refused (validateOffload says why).
	OffloadParams bool `yaml:"offload_params" json:"offload_params"`
	// OffloadOptimizer (or fsdp.cpu_offload) with device=cuda keeps the float32 master
	// weights, AdamW's moments and the gradient reduction in host memory: the gradients come
	// down after the backward, AdamW steps on the host and the weights go up (loop.Offload).
	// The device keeps the weights and their gradients only.
	OffloadOptimizer bool `yaml:"offload_optimizer" json:"offload_optimizer"`
}

// offloadOptimizer reports whether the actor's optimizer is offloaded (either key).
func (a ActorConfig) offloadOptimizer() bool { return a.FSDP.CPUOffload || a.Offload.OffloadOptimizer }

// validateOffload refuses parameter offload on the device.
func (a ActorConfig) validateOffload() error {
	if a.Device == "cuda" && a.Offload.OffloadParams {
		return keyErr("worker.actor.offload.offload_params", "is true with device=cuda: the policy samples, scores and trains on the device in every phase of a step, so its weights have no phase off it (verl moves them out while vLLM generates), and offloading them layer by layer needs a per-layer forward this model does not have; use offload_optimizer (the optimizer's state in host memory)")
	}
	return nil
}

// warnOffload records a warning for offload keys that change nothing: on the CPU the optimizer
// and the weights are in host memory already.
func (c *Config) warnOffload() {
	a := c.Worker.Actor
	if a.Device == "cuda" {
		return
	}
	for _, k := range []struct {
		key string
		on  bool
	}{{"worker.actor.fsdp.cpu_offload", a.FSDP.CPUOffload}, {"worker.actor.offload.offload_optimizer", a.Offload.OffloadOptimizer},
		{"worker.actor.offload.offload_params", a.Offload.OffloadParams}} {
		if k.on {
			c.warnings = append(c.warnings, fmt.Sprintf("config: %s=true: accepted and ignored: on the CPU (device=cpu) the weights and the optimizer are in host memory already", k.key))
		}
	}
}

// offloadTraining is the gradient sum and optimizer of the actor m with AdamW state o (the RL
// run's t.opt, or the warm start's) and the optimizer offloaded (device=cuda): loop.Offload
// over m's device parameters, AdamW's state (o, or t.opt's ZeRO shard) and the masters on the
// host. On one rank, and with NCCL (bucketed, several
// ranks), the micro-batches are summed on the device as without offload and the sum comes down
// once per mini-batch; with the ordered reduction on several ranks, and with sharding, each
// micro-batch's gradient comes down for the host's reduction.
func (t *Trainer) offloadTraining(m *vlm.Model, o *loop.AdamW, stage loop.Sharding, rc loop.ReduceConfig) (loop.Gradients, loop.Optimizer, error) {
	dps, err := m.DeviceParams()
	if err != nil {
		return nil, nil, err
	}
	var ps []loop.Param
	for _, p := range dps {
		ps = append(ps, loop.Param{Name: p.Name, Value: p.W, Grad: p.G, Decay: len(p.W.Shape()) >= 2})
	}
	off, err := loop.NewOffload(ps)
	if err != nil {
		return nil, nil, err
	}
	off.Zero = t.dev.zero
	host := off.Params()
	if stage != 0 {
		zero, g, err := loop.NewShardedAdamW(host, stage, rc, t.rank(), t.world(), o.Beta1, o.Beta2, o.Eps, o.WeightDecay)
		if err != nil {
			return nil, nil, err
		}
		if err := zero.SetMoments([]loop.MomentShard{loop.FlatMoments(o)}); err != nil {
			return nil, nil, err
		}
		zero.T = o.T
		t.zero, o.M, o.V = zero, nil, nil // the moments live sharded now (o is t.opt)
		return off.Gradients(g), off.Optimizer(zero), nil
	}
	opt := off.Optimizer(&loop.HostAdamW{AdamW: o, Params: host})
	if t.world() == 1 || !rc.Ordered {
		dg := &deviceGradients{t: t, m: m}
		if t.world() > 1 {
			dg.nccl, dg.bucket = true, max(1, rc.BucketBytes/4)
		}
		return off.DeviceGradients(dg), opt, nil
	}
	g, err := loop.NewHostGradients(host)
	if err != nil {
		return nil, nil, err
	}
	return off.Gradients(hostGradients{g, t}), opt, nil
}

// hfOffloaded is the optimizer of a model_path model on the device with offload_optimizer:
// loop.Offload's, whose host masters a loaded checkpoint must reach (hfTrainer.setWeights).
type hfOffloaded struct {
	loop.Optimizer
	off *loop.Offload
}

// offloadTraining is the model_path model's training with the optimizer offloaded (one rank on
// the device): offloadedTraining of its parameters, rebuilding what it derives from the
// weights (bf16 mode's copies) after each upload.
func (m *textModel) offloadTraining(weightDecay float64) (loop.Optimizer, *loop.AdamW, loop.Gradients, error) {
	ps, err := m.Params()
	if err != nil {
		return nil, nil, nil, err
	}
	return offloadedTraining(ps, m.Repack, weightDecay)
}

// offloadedTraining is the training of a model_path model's device parameters ps (the text
// model's or Qwen2-VL's, tower included) with the optimizer offloaded: the micro-batches'
// gradients sum on the device as without offload (loop.DeviceGradients) and come down once per
// mini-batch; AdamW steps float32 masters with its moments in host memory (loop.DeviceAdamW on
// the host); the weights go up after each step and uploaded rebuilds what the model derives
// from them (packed weights, bf16 copies). The device keeps the weights (the float32 masters
// too in bf16 mode) and their gradients.
func offloadedTraining(ps []loop.Param, uploaded func() error, weightDecay float64) (loop.Optimizer, *loop.AdamW, loop.Gradients, error) {
	off, err := loop.NewOffload(ps)
	if err != nil {
		return nil, nil, nil, err
	}
	off.Zero = func(g *tensor.Tensor) error { return tensor.Axpby(g, g, 0, 0) }
	off.Uploaded = uploaded
	// The device optimizer's ops (tensor.ClipGradNorm, tensor.AdamWStep) on the host masters:
	// the CPU's arithmetic is the device kernels', so the steps are the non-offloaded run's.
	opt, _, err := hflm.NewDeviceAdamW(off.Params(), weightDecay, func() error { return nil })
	if err != nil {
		return nil, nil, nil, err
	}
	return hfOffloaded{off.Optimizer(opt), off}, opt.AdamW, off.DeviceGradients(&loop.DeviceGradients{Params: ps}), nil
}
