package main

import (
	"fmt"
	"strings"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// The memory and batching keys of the model_path path: fsdp.mixed_precision_dtype (bf16 mixed
// precision), model.enable_gradient_checkpointing, padding_free and dynamic_batching with
// max_token_len_per_device (docs/2026-11-memory.md measures them).

// validateScale checks the keys' values (any model).
func (a ActorConfig) validateScale() error {
	if _, err := a.FSDP.MixedPrecision(); err != nil {
		return err
	}
	switch strings.ToLower(a.FSDP.ReduceDType) {
	case "", "fp32", "float32":
	default:
		return keyErr("worker.actor.fsdp.reduce_dtype", "is %q, want fp32: gradients are summed in float32", a.FSDP.ReduceDType)
	}
	if a.DynamicBatching && a.MaxTokenLenPerDevice < 1 {
		return keyErr("worker.actor.max_token_len_per_device", "is %d with dynamic_batching, want >= 1 (tokens per micro-batch)", a.MaxTokenLenPerDevice)
	}
	return nil
}

// warnScaleBuiltin records a warning for each key set that the built-in model does not read:
// it computes in float32, keeps its activations and right-pads fixed-size micro-batches.
func (c *Config) warnScaleBuiltin() {
	a := c.Worker.Actor
	for _, k := range []struct {
		key string
		on  bool
		why string
	}{
		{"worker.actor.fsdp.mixed_precision_dtype", a.FSDP.MixedPrecisionDType != "" && !strings.EqualFold(a.FSDP.MixedPrecisionDType, "fp32") && !strings.EqualFold(a.FSDP.MixedPrecisionDType, "float32"), "the built-in model computes in float32"},
		{"worker.actor.model.enable_gradient_checkpointing", a.Model.EnableGradientCheckpointing, "the built-in model keeps its activations"},
		{"worker.actor.padding_free", c.set["worker.actor.padding_free"] > 0, "the built-in model's rows are right-padded"},
		{"worker.actor.dynamic_batching", a.DynamicBatching, "the built-in model's micro-batches have micro_batch_size_per_device_* rows"},
	} {
		if k.on {
			c.warnings = append(c.warnings, fmt.Sprintf("config: %s: accepted and ignored: %s (the key applies with worker.actor.model.model_path)", k.key, k.why))
		}
	}
}

// applyScale sets the model's compute dtype and checkpointing from the configuration.
func (a ActorConfig) applyScale(m *hflm.Model) error {
	dt, err := a.FSDP.MixedPrecision()
	if err != nil {
		return err
	}
	if err := m.SetMixedPrecision(dt); err != nil {
		return err
	}
	m.SetCheckpointing(a.Model.EnableGradientCheckpointing)
	return nil
}

// scaleLoop sets the loop's token budget (dynamic_batching) on lc.
func (a ActorConfig) scaleLoop(lc *loop.Config) {
	if a.DynamicBatching {
		lc.MicroBatchTokens = a.MaxTokenLenPerDevice
	}
}

// dtypeName is the compute dtype for the run's first line.
func (a ActorConfig) dtypeName() string {
	dt, _ := a.FSDP.MixedPrecision()
	if dt == tensor.BFloat16 {
		return "bf16 mixed precision"
	}
	return "float32"
}
