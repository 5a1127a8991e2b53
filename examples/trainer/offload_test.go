package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOffloadKeys: EasyR1's offload section, verl's fsdp_config names and fsdp.cpu_offload
// reach the same switches; with device=cuda offload_params is refused and SHARD_GRAD_OP needs
// the offloaded optimizer; on the CPU each key set gets one warning saying why it changes
// nothing.
func TestOffloadKeys(t *testing.T) {
	for _, kv := range []string{"worker.actor.offload.offload_optimizer=true", "worker.actor.fsdp.optimizer_offload=true",
		"worker.actor.fsdp.cpu_offload=true", "worker.actor.fsdp.enable_cpu_offload=true"} {
		c, err := LoadConfig("", []string{"worker.actor.device=cuda", kv})
		require.NoError(t, err, kv)
		assert.True(t, c.Worker.Actor.offloadOptimizer(), kv)
		assert.Empty(t, c.Warnings(), kv)
	}
	c, err := LoadConfig("", []string{"worker.actor.fsdp.param_offload=false"})
	require.NoError(t, err)
	assert.False(t, c.Worker.Actor.Offload.OffloadParams)
	for _, kv := range []string{"worker.actor.offload.offload_params=true", "worker.actor.fsdp.param_offload=true"} {
		_, err := LoadConfig("", []string{"worker.actor.device=cuda", kv})
		require.ErrorContains(t, err, "worker.actor.offload.offload_params", kv)
	}
	_, err = LoadConfig("", []string{"worker.actor.device=cuda", "worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP"})
	require.ErrorContains(t, err, "offload_optimizer=true")
	_, err = LoadConfig("", []string{"worker.actor.device=cuda", "worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP", "worker.actor.fsdp.cpu_offload=true"})
	require.NoError(t, err)
	c, err = LoadConfig("", []string{"worker.actor.offload.offload_params=true", "worker.actor.offload.offload_optimizer=true", "worker.actor.offload.pin_memory=true"})
	require.NoError(t, err)
	ws := strings.Join(c.Warnings(), "\n")
	for _, k := range []string{"offload_params=true: ", "offload_optimizer=true: ", "pin_memory "} {
		assert.Equal(t, 1, strings.Count(ws, "config: worker.actor.offload."+k), "%s in:\n%s", k, ws)
	}
}
