//go:build cuda

package main

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/examples/hflm"

	"github.com/stretchr/testify/require"
)

// settleDevice runs the collector until the device bytes held stop changing: the finalizers
// of dropped device tensors release them asynchronously.
func settleDevice(b *cuda.Backend) {
	last, same := int64(-1), 0
	for same < 3 {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
		if a, _ := b.Allocated(); a == last {
			same++
		} else {
			last, same = a, 0
		}
	}
}

// hfDeviceConfig is a model_path run on the device (hfOverrides) in dir with the KL loss.
func hfDeviceConfig(t *testing.T, model, dir string, extra ...string) Config {
	t.Helper()
	cfg, err := LoadConfig("", hfOverrides(model, dir, append([]string{"worker.actor.device=cuda", "worker.actor.use_kl_loss=true"}, extra...)...))
	require.NoError(t, err)
	return cfg
}

// TestDeviceModelPathOffload: with the optimizer offloaded (offload.offload_optimizer) a
// model_path run on the device writes the non-offloaded device run's checkpoints bit for bit
// (weights and AdamW moments, steps 1 and 2) and its metrics within dpTolerance, in full
// fine-tuning (clipping active, float32 and bf16 mode) and with LoRA: the device sums the
// micro-batches either way and the host's AdamW is the device kernel's arithmetic; only the
// gradient norm is summed in another order (actor/grad_norm may differ in its last float64
// bits; the float32 clip factor did not here: the weights would show it). In bf16 mode a run
// interrupted after 1 step and resumed equals it too (the checkpoint's masters reach the host
// copy).
func TestDeviceModelPathOffload(t *testing.T) {
	model := tinyHF(t)
	for _, c := range []struct {
		name, set string
		resume    bool
	}{
		{"full", "worker.actor.model.lora_rank=0 worker.actor.max_grad_norm=0.05", false},
		{"full-bf16", "worker.actor.model.lora_rank=0 worker.actor.max_grad_norm=0.05 worker.actor.fsdp.mixed_precision_dtype=bf16", true},
		{"lora", "worker.actor.model.lora_rank=4 worker.actor.model.lora_alpha=8 worker.actor.model.lora_dropout=0.1", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			set := append(strings.Fields(c.set), "training.save_freq=1")
			offSet := append(set, "worker.actor.offload.offload_optimizer=true")
			ref, off, resumed := filepath.Join(t.TempDir(), "ref"), filepath.Join(t.TempDir(), "off"), filepath.Join(t.TempDir(), "resumed")
			a := runLines(t, hfDeviceConfig(t, model, ref, set...))
			b := runLines(t, hfDeviceConfig(t, model, off, offSet...))
			diffs, worst := compareLines(a, b)
			t.Logf("largest relative metric difference %.2g", worst)
			require.Empty(t, diffs)
			dirs := []string{off}
			if c.resume {
				run(t, hfDeviceConfig(t, model, resumed, append(offSet, "training.steps=1")...))
				d := runLines(t, hfDeviceConfig(t, model, resumed, append(offSet, "training.find_last_checkpoint=true")...))
				diffs, _ = compareLines(b, d[len(d)-len(b):])
				require.Empty(t, diffs, "resumed")
				dirs = append(dirs, resumed)
			}
			for _, dir := range dirs {
				for _, step := range []int{1, 2} {
					require.Equal(t, modelWeights(t, ref, step), modelWeights(t, dir, step), "step %d weights", step)
					require.Equal(t, optimizerMoments(t, ref, step), optimizerMoments(t, dir, step), "step %d moments", step)
				}
			}
		})
	}
}

// TestDeviceModelPathMixed: bf16 mixed precision on the device in the trainer. Activation
// checkpointing writes the stored path's run bit for bit (metrics and weights); padded rows
// (padding_free=false) score the packed run's first step: the same rewards, response lengths,
// KL and entropy losses and PPO KL, bit for bit (the rollouts and log-probs are the packed
// ones: the causal attention never lets a real token see the padding after it, and on the
// emulator each GEMM output sums in one order whatever the rows; TestCUDAPaddedEqualsPacked);
// and a run of bf16 + checkpointing resumed after 1 step equals the run in one go bit for bit
// (the device's moments and masters saved and loaded, the copies rebuilt; with the optimizer
// offloaded, TestDeviceModelPathOffload/full-bf16).
func TestDeviceModelPathMixed(t *testing.T) {
	model := tinyHF(t)
	bf := []string{"worker.actor.model.lora_rank=0", "worker.actor.fsdp.mixed_precision_dtype=bf16"}
	t.Run("checkpointing", func(t *testing.T) {
		stored, ckpt := filepath.Join(t.TempDir(), "stored"), filepath.Join(t.TempDir(), "ckpt")
		run(t, hfDeviceConfig(t, model, stored, bf...))
		run(t, hfDeviceConfig(t, model, ckpt, append(bf, "worker.actor.model.enable_gradient_checkpointing=true")...))
		sameRun(t, stored, ckpt, 2)
	})
	t.Run("padded", func(t *testing.T) {
		one := append(bf, "training.steps=1")
		packed := runLines(t, hfDeviceConfig(t, model, filepath.Join(t.TempDir(), "packed"), one...))
		padded := runLines(t, hfDeviceConfig(t, model, filepath.Join(t.TempDir(), "padded"), append(one, "worker.actor.padding_free=false")...))
		require.Len(t, packed, 1)
		require.Len(t, padded, 1)
		for _, k := range []string{"reward/overall", "response_length/mean", "actor/kl_loss", "actor/entropy_loss", "actor/ppo_kl"} {
			require.NotNil(t, packed[0].Metrics[k], k)
			require.NotNil(t, padded[0].Metrics[k], k)
			require.Equal(t, *packed[0].Metrics[k], *padded[0].Metrics[k], k)
		}
	})
	t.Run("resume", func(t *testing.T) {
		all := append(bf, "worker.actor.model.enable_gradient_checkpointing=true")
		a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
		run(t, hfDeviceConfig(t, model, a, all...))
		run(t, hfDeviceConfig(t, model, b, append(all, "training.steps=1")...))
		run(t, hfDeviceConfig(t, model, b, append(all, "training.find_last_checkpoint=true")...))
		sameRun(t, a, b, 2)
	})
}

// TestDeviceModelPathMemory logs the device bytes of one RL step of a model_path run (full
// fine-tuning, after a first step that allocates what every step keeps) with each memory
// feature on and off: resident after the step and the step's peak (docs/2026-11-memory.md). The
// model is the tests' tiny Qwen2; MTRL_HF_MEMORY_MODEL=DIR measures another checkpoint and
// MTRL_HF_MEMORY_SET adds overrides (space-separated). Checked: the offloaded optimizer holds
// exactly AdamW's 8 bytes per parameter less, and bf16 mode adds at least its copies (2 bytes
// per matrix element and 4 per norm weight or bias: the float32 masters stay) to what stays
// resident, the policy's and the reference's (with its conversion scratch and the backward's
// widened operands on top: the rest of the difference).
func TestDeviceModelPathMemory(t *testing.T) {
	model := os.Getenv("MTRL_HF_MEMORY_MODEL")
	if model == "" {
		model = tinyHF(t)
	}
	base := append([]string{"worker.actor.model.lora_rank=0"}, strings.Fields(os.Getenv("MTRL_HF_MEMORY_SET"))...)
	type bytesOf struct{ resident, peak int64 }
	var params, copies int64
	measure := func(extra ...string) bytesOf {
		cfg := hfDeviceConfig(t, model, filepath.Join(t.TempDir(), "run"), append(base, extra...)...)
		s, err := openHF(cfg)
		require.NoError(t, err)
		defer func() { require.NoError(t, s.close()) }()
		tr, err := newHFTrainer(cfg, s, 3) // step 2 is not the last
		require.NoError(t, err)
		defer runtime.KeepAlive(tr) // the reference and the optimizer live in tr
		m := s.model.(*hflm.Model)
		b := m.Backend().(*cuda.Backend)
		res, err := tr.loop.Step(context.Background())
		require.NoError(t, err)
		res.Release()
		settleDevice(b)
		b.ResetPeak()
		res, err = tr.loop.Step(context.Background())
		require.NoError(t, err)
		res.Release()
		settleDevice(b)
		resident, _ := b.Allocated()
		ps, err := m.Params()
		require.NoError(t, err)
		params, copies = 0, 0
		for _, p := range ps {
			params += int64(p.Value.Len())
			if p.Value.Rank() >= 2 && p.Name != "model.embed_tokens.weight" || p.Name == "model.embed_tokens.weight" && m.Config.TieWordEmbeddings {
				copies += 2 * int64(p.Value.Len()) // a bfloat16 matrix (the tied head's included)
			} else if p.Value.Rank() == 1 {
				copies += 4 * int64(p.Value.Len()) // a float32 norm weight or bias holding bfloat16 values
			}
		}
		return bytesOf{resident, b.Peak()}
	}
	all := os.Getenv("MTRL_HF_MEMORY") == "1"
	rows := []struct {
		name string
		set  []string
	}{
		{"float32, packed (default)", nil},
		{"bf16", []string{"worker.actor.fsdp.mixed_precision_dtype=bf16"}},
		{"checkpointing", []string{"worker.actor.model.enable_gradient_checkpointing=true"}},
		{"padded (padding_free=false)", []string{"worker.actor.padding_free=false"}},
		{"offload_optimizer", []string{"worker.actor.offload.offload_optimizer=true"}},
		{"bf16 + checkpointing + offload", []string{"worker.actor.fsdp.mixed_precision_dtype=bf16", "worker.actor.model.enable_gradient_checkpointing=true", "worker.actor.offload.offload_optimizer=true"}},
	}
	if !all { // what the assertions need; MTRL_HF_MEMORY=1 measures every row
		rows = []struct {
			name string
			set  []string
		}{rows[0], rows[1], rows[4]}
	}
	got := map[string]bytesOf{}
	for _, r := range rows {
		got[r.name] = measure(r.set...)
		t.Logf("%-32s resident %9d B  step peak %9d B", r.name, got[r.name].resident, got[r.name].peak)
	}
	t.Logf("P = %d trained parameters", params)
	def := got[rows[0].name]
	require.Equal(t, 8*params, def.resident-got["offload_optimizer"].resident, "offload: AdamW's moments leave the device")
	require.GreaterOrEqual(t, got["bf16"].resident-def.resident, 2*copies, "bf16: the policy's and the reference's copies stay resident beside the masters")
}

// TestDeviceModelPathBF16DataParallel: bf16 mixed precision with checkpointing on 2 devices
// (ordered ZeRO-2 through the devices' collectives) writes one device's bf16 run: metrics
// within dpTolerance, weights and moments bit for bit at step 3 (the ordered reduction adds the
// micro-batch gradients in one device's order, and each rank rebuilds its bfloat16 copies from
// the same masters). Needs two devices (CUEMU_DEVICES=2 under scripts/cuda-emu).
func TestDeviceModelPathBF16DataParallel(t *testing.T) {
	if b, err := cuda.New(1); err != nil {
		t.Skipf("SKIP: needs a second CUDA device: %v", err)
	} else {
		_ = b.Close()
	}
	model := tinyHFSmallVocab(t)
	over := func(run string, ranks int, extra ...string) []string {
		return hfDPOverrides(model, run, ranks, append([]string{"dataset.max_prompt_length=128"}, extra...)...)
	}
	bf := []string{"worker.actor.device=cuda", "worker.actor.model.lora_rank=0", "worker.actor.optim.lr=1e-4",
		"worker.actor.fsdp.mixed_precision_dtype=bf16", "worker.actor.model.enable_gradient_checkpointing=true"}
	one, two := filepath.Join(t.TempDir(), "one"), filepath.Join(t.TempDir(), "two")
	a := hfLines(t, over(one, 1, bf...))
	b := hfLines(t, over(two, 2, append(bf, "worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP")...))
	diffs, worst := compareLines(a, b)
	t.Logf("bf16 ordered ZeRO-2, 2 devices vs 1: largest relative metric difference %.2g", worst)
	require.Empty(t, diffs)
	sameState(t, one, two, 3, "bf16, 2 devices (ZeRO-2) vs 1")
}
