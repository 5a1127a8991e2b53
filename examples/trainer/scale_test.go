package main

import (
	"bytes"
	"context"
	"github.com/mtrl-go/mtrl/examples/hflm"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/tensor"
)

// TestScaleKeys: the memory keys, their verl aliases, the values refused, and the warnings on
// the built-in model, which reads none of them.
func TestScaleKeys(t *testing.T) {
	c, err := LoadConfig("", []string{"worker.actor.model.model_path=/nonexistent",
		"worker.actor.fsdp.mixed_precision.param_dtype=bf16", "worker.actor.fsdp.mixed_precision.reduce_dtype=fp32",
		"worker.actor.use_dynamic_bsz=true", "worker.actor.ppo_max_token_len_per_gpu=2048",
		"worker.actor.model.use_remove_padding=false", "worker.actor.model.enable_gradient_checkpointing=true"})
	require.NoError(t, err)
	a := c.Worker.Actor
	dt, err := a.FSDP.MixedPrecision()
	require.NoError(t, err)
	assert.Equal(t, tensor.BFloat16, dt)
	assert.True(t, a.DynamicBatching)
	assert.Equal(t, 2048, a.MaxTokenLenPerDevice)
	assert.False(t, a.PaddingFree)
	assert.True(t, a.Model.EnableGradientCheckpointing)
	assert.Empty(t, c.Warnings())
	adv, err := c.Advantage()
	require.NoError(t, err)
	upd, err := c.Update()
	require.NoError(t, err)
	lc := c.loopConfig(1, adv, upd)
	a.scaleLoop(&lc)
	assert.Equal(t, 2048, lc.MicroBatchTokens)

	for _, o := range []struct{ set, key string }{
		{"worker.actor.fsdp.mixed_precision_dtype=fp16", "worker.actor.fsdp.mixed_precision_dtype"},
		{"worker.actor.fsdp.mixed_precision.reduce_dtype=bf16", "worker.actor.fsdp.reduce_dtype"},
		{"worker.actor.max_token_len_per_device=0", "worker.actor.max_token_len_per_device"},
	} {
		_, err := LoadConfig("", []string{"worker.actor.dynamic_batching=true", o.set})
		require.Error(t, err, o.set)
		assert.Contains(t, err.Error(), o.key)
	}

	c, err = LoadConfig("", []string{"worker.actor.fsdp.mixed_precision_dtype=bf16", "worker.actor.padding_free=true",
		"worker.actor.dynamic_batching=true", "worker.actor.model.enable_gradient_checkpointing=true"})
	require.NoError(t, err)
	ws := strings.Join(c.Warnings(), "\n")
	for _, k := range []string{"fsdp.mixed_precision_dtype", "padding_free", "dynamic_batching", "model.enable_gradient_checkpointing"} {
		assert.Equal(t, 1, strings.Count(ws, "config: worker.actor."+k+": accepted and ignored"), "%s in:\n%s", k, ws)
	}
}

// TestModelPathScaleKeys runs the model_path path with the memory keys: checkpointing, padded
// rows and token-budget micro-batches give the first step's rollouts and scores of the default
// run (the same rewards, KL and response lengths), and the bf16 keys reach the model.
func TestModelPathScaleKeys(t *testing.T) {
	model := tinyHF(t)
	run := func(extra ...string) map[string]*float64 {
		dir := filepath.Join(t.TempDir(), "run")
		cfg, err := LoadConfig("", hfOverrides(model, dir, append([]string{"training.steps=1"}, extra...)...))
		require.NoError(t, err)
		var out, errOut bytes.Buffer
		_, err = Run(context.Background(), cfg, &out, &errOut)
		require.NoError(t, err, errOut.String())
		lines, err := ReadMetrics(filepath.Join(dir, "metrics.jsonl"))
		require.NoError(t, err)
		require.Len(t, lines, 1)
		return lines[0].Metrics
	}
	base := run()
	same := run("worker.actor.model.enable_gradient_checkpointing=true", "worker.actor.padding_free=false",
		"worker.actor.dynamic_batching=true", "worker.actor.max_token_len_per_device=40")
	// (actor/entropy and the losses are means of per-micro-batch means: they depend on the split.)
	for _, k := range []string{"reward/overall", "actor/reward_kl_penalty", "response_length/mean"} {
		require.NotNil(t, base[k], k)
		require.NotNil(t, same[k], k)
		assert.Equal(t, *base[k], *same[k], k)
	}
	cfg, err := LoadConfig("", hfOverrides(model, t.TempDir(), "worker.actor.fsdp.mixed_precision_dtype=bf16",
		"worker.actor.model.enable_gradient_checkpointing=true"))
	require.NoError(t, err)
	r, err := openHF(cfg)
	require.NoError(t, err)
	m, ok := r.model.(*hflm.Model)
	require.True(t, ok, "model_path's model is %T", r.model)
	assert.Equal(t, tensor.BFloat16, m.MixedPrecision())
	assert.True(t, m.Checkpointing())
	assert.Equal(t, "bf16 mixed precision", cfg.Worker.Actor.dtypeName())
}
