//go:build cuda

package main

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/examples/internal/devicetest"
	"github.com/mtrl-go/mtrl/examples/internal/probe"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/stretchr/testify/require"
)

// TestDeviceVLModelPathMatchesCPU: a model_path RL step of the tiny Qwen2.5-VL (window
// attention, a full-attention block) with LoRA on both the language model and the vision
// tower (dropout 0.1: the masks are drawn on the host), the perturbed pass of the perception
// score, the KL loss against the base and validation before and after, with the model on the
// device (worker.actor.device=cuda: qwenvl.LoadDirOn, DeviceTraining) logs the CPU run's
// metrics within 1e-4·(1 + |cpu|) (observed: 1.7e-6) and exports a merged model within 1e-7 of
// the CPU run's, tower included. One step: after an update the two runs' adapters differ in
// the last bits (AdamW's g/(|g| + eps) of gradients that cancel to rounding noise), and
// sampling among the 151,936 nearly equally likely tokens of a random model flips a token for
// differences of that size (at step 2, a quarter of the rows at lr 1e-2 and at 1e-4 alike);
// lr 1e-4 keeps the updated models close enough for the greedy validation after the step.
// The resume test below runs further steps on the device. Before the metrics, the step's old
// log-probs and perception scores are compared per response token (testHFStep), within 1e-5
// of their scale: which one differs tells the scoring pass from the perturbed one. Before those,
// to name where a device run departs (hfvl_probe_cuda_test.go): every scoring pass's host
// inputs and log-probs, both runs' forwards stage by stage, the first plain and perturbed pass
// on fresh models, and after them the step's selection and shaping on the device run's
// tensors, host against device. On an H200 this test fails: the perception metrics (and
// grad_norm through the shaping) differ from the CPU's, the rest agree
// (docs/2026-11-gpu-h200.md; open; the per-token and stage comparisons came after).
//
// bf16: the same step in bf16 mixed precision (fsdp.mixed_precision_dtype=bf16: the tower and
// the language model on bfloat16 copies and activations, every rounding made on the device)
// against the CPU's bf16 run, within the same bounds (observed: metrics 5.4e-8, export 1.5e-8).
// The device rounds the same float32 values as the CPU but for those within float32 rounding
// of a bfloat16 boundary, which round the other way and move by 2⁻⁸ of themselves instead of
// 2⁻²⁴: enough for sampling among the nearly equally likely tokens to draw another token (it
// did at the fifth token of one row), after which the rows are different text. So the bf16
// rollouts take the most likely token (rollout.top_k=1, still scored at temperature 1), as
// validation does; TestCUDAVisionMixedPrecision bounds the per-token differences.
func TestDeviceVLModelPathMatchesCPU(t *testing.T) {
	model := tinyVL(t, "qwen2.5-vl.json")
	for _, mode := range []struct{ name, set string }{
		{"fp32", ""},
		{"bf16", "worker.actor.fsdp.mixed_precision_dtype=bf16 worker.rollout.top_k=1"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			cpu, dev := filepath.Join(t.TempDir(), "cpu"), filepath.Join(t.TempDir(), "dev")
			extra := append([]string{"worker.actor.model.lora_rank=4", "worker.actor.model.lora_alpha=8", "worker.actor.model.lora_dropout=0.1",
				"dataset.val_size=2", "worker.actor.use_kl_loss=true", "worker.actor.optim.lr=1e-4", "training.steps=1"}, strings.Fields(mode.set)...)
			var tokens []stepTokens // the CPU run's, then the device run's
			testHFStep = func(step int, mask, old, entropy, perception, advantages *tensor.Tensor) {
				d := func(x *tensor.Tensor) []float32 { return devicetest.Downloaded(t, x) }
				tokens = append(tokens, stepTokens{mask.Dim(0), mask.Dim(1), d(mask), d(old), d(entropy), d(perception), d(advantages)})
			}
			defer func() { testHFStep = nil }()
			var recs [2]*vlRecord // each run's scoring passes and stages (probe)
			var devCfg Config
			for i, r := range []struct {
				dir string
				set []string
			}{{cpu, extra}, {dev, append(extra, "worker.actor.device=cuda")}} {
				cfg, err := LoadConfig("", vlOverrides(model, r.dir, r.set...))
				require.NoError(t, err)
				rec, stop := recordVL()
				run(t, cfg)
				stop()
				recs[i], devCfg = rec, cfg
			}
			require.Len(t, tokens, 2)
			// Where a difference enters: the passes' host inputs and log-probs, then the first
			// plain and the first perturbed pass's inputs through fresh models stage by stage.
			passes := [2][]probe.Pass{recs[0].passes, recs[1].passes}
			compareVLPasses(t, passes[0], passes[1], 1e-5)
			compareRunStages(t, recs[0], recs[1], stageTol[mode.name])
			var bisect []struct{ cpu, dev probe.Pass }
			for _, perturbed := range []bool{false, true} {
				if k := slices.IndexFunc(passes[1], func(p probe.Pass) bool { return p.Perturbed == perturbed && !p.Train }); k >= 0 && k < len(passes[0]) {
					bisect = append(bisect, struct{ cpu, dev probe.Pass }{passes[0][k], passes[1][k]})
				}
			}
			require.Len(t, bisect, 2, "a plain and a perturbed pass")
			bisectVLStages(t, devCfg, stageTol[mode.name], bisect)
			// Per response token first: which of the two inputs of the perception metrics
			// differs tells a scoring pass from the perturbed one.
			closeTokens(t, "old log-probs", tokens[0].mask, tokens[1].old, tokens[0].old)
			closeTokens(t, "perception scores", tokens[0].mask, tokens[1].perception, tokens[0].perception)
			closeTokens(t, "advantages", tokens[0].mask, tokens[1].advantages, tokens[0].advantages)
			compareShaping(t, devCfg, tokens[1], 1e-5)
			logPerception(t, cpu, dev)
			closeRuns(t, cpu, dev, 1e-4)
			read := func(path string) map[string][]float32 {
				ts, err := hfmodel.ReadSafetensors(path)
				require.NoError(t, err)
				out := map[string][]float32{}
				for _, x := range ts {
					out[x.Name] = x.Float32s()
				}
				return out
			}
			base := read(filepath.Join(model, "model.safetensors"))
			want, got := read(filepath.Join(cpu, hfExportDir, "model.safetensors")), read(filepath.Join(dev, hfExportDir, "model.safetensors"))
			for _, name := range []string{"visual.blocks.0.attn.qkv.weight", "visual.merger.mlp.2.weight", "model.layers.0.self_attn.q_proj.weight"} {
				require.Equal(t, len(want[name]), len(got[name]), name)
				moved, worst := 0.0, 0.0
				for i := range got[name] {
					worst = max(worst, math.Abs(float64(got[name][i]-want[name][i])))
					moved = max(moved, math.Abs(float64(got[name][i]-base[name][i])))
				}
				t.Logf("%s: export max |device − cpu| %.3g, moved %.3g", name, worst, moved)
				require.LessOrEqual(t, worst, 1e-7, name)
				require.Greater(t, moved, 1e-6, "%s did not move", name)
			}
		})
	}
}

// TestDeviceVLModelPathResume: on the device, a Qwen2-VL LoRA run (the tower's adapters and
// dropout included, the perturbed pass on) of 2 steps in one go and 1 step + a resumed 1 give
// identical metrics, bit for bit: the checkpoint downloads the device's adapters and AdamW
// moments, the resumed run uploads them, and the device kernels are deterministic.
func TestDeviceVLModelPathResume(t *testing.T) {
	model := tinyVL(t, "qwen2-vl.json")
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	set := []string{"worker.actor.device=cuda", "worker.actor.model.lora_rank=4", "worker.actor.model.lora_alpha=8", "worker.actor.model.lora_dropout=0.1", "dataset.max_response_length=4"}
	for _, r := range []struct {
		dir string
		set []string
	}{{a, set}, {b, append(set, "training.steps=1")}, {b, append(set, "training.find_last_checkpoint=true")}} {
		cfg, err := LoadConfig("", vlOverrides(model, r.dir, r.set...))
		require.NoError(t, err)
		run(t, cfg)
	}
	sameRun(t, a, b, 2)
}

// TestDeviceVLModelPathDataParallel: the tiny Qwen2-VL with LoRA on the language model and the
// tower (the perturbed pass on) on 2 emulated devices (scripts/cuda-emu: CUEMU_DEVICES=2), the
// gradients reduced on device buffers by the text model's reduction (hflm.DeviceReduce through
// NCCL). A run of one step on one device resumed on 2 (ordered: each rank one micro-batch of
// two rows, one device two) ends as the uninterrupted one-device run, bit for bit in metrics,
// adapters and AdamW moments: the 2 ranks upload the one-device checkpoint, reduce in one
// device's order and write a checkpoint one device would. Bucketed ZeRO-2 in small buckets,
// two one-row micro-batches per rank, ends within 1e-5 relative L2 of one device's weights
// (TestDeviceModelPathDataParallel's bound). Six RL steps in all: the LM head over the real
// 151,936-token vocabulary dominates the emulator's time.
func TestDeviceVLModelPathDataParallel(t *testing.T) {
	if b, err := cuda.New(1); err != nil {
		t.Skipf("SKIP: needs a second CUDA device: %v", err)
	} else {
		_ = b.Close()
	}
	model := tinyVL(t, "qwen2-vl.json")
	dir := func(name string) string { return filepath.Join(t.TempDir(), name) }
	over := func(run string, ranks int, extra ...string) []string {
		return vlOverrides(model, run, append([]string{"worker.actor.device=cuda", "worker.actor.model.lora_rank=4", "worker.actor.model.lora_alpha=8",
			"dataset.max_response_length=4", "training.save_freq=1", "worker.actor.micro_batch_size_per_device_for_update=2",
			"worker.actor.micro_batch_size_per_device_for_experience=2", fmt.Sprintf("training.n_gpus_per_node=%d", ranks)}, extra...)...)
	}
	one, re, bucketed := dir("one"), dir("resumed"), dir("bucketed")
	a := hfLines(t, over(one, 1))
	hfLines(t, over(re, 1, "training.steps=1"))
	c := hfLines(t, over(re, 2, "training.find_last_checkpoint=true"))
	diffs, _ := compareLines(a, c)
	require.Empty(t, diffs, "1 → 2 ranks")
	sameState(t, one, re, 2, "1 → 2 ranks")
	// Two micro-batches of one row per rank: NCCL adds (a₀+a₁)+(b₀+b₁), one device a₀+a₁+b₀+b₁.
	hfLines(t, over(bucketed, 2, "worker.actor.grad_reduce=bucketed", "worker.actor.micro_batch_size_per_device_for_update=1",
		"worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP", "worker.actor.grad_bucket_mb=0.01"))
	wd := weightDiff(modelWeights(t, one, 2), modelWeights(t, bucketed, 2))
	t.Logf("bucketed ZeRO-2 (2 devices) vs ordered (1): weights %.2g apart (relative L2)", wd)
	require.Less(t, wd, 1e-5)
}

// TestDeviceVLModelPathOffload: with the optimizer offloaded (offload.offload_optimizer) a
// Qwen2-VL LoRA run on the device (the tower's adapters and dropout included, the perturbed
// pass on, clipping active) writes the non-offloaded device run's checkpoints bit for bit
// (adapters and AdamW moments, steps 1 and 2) and its metrics within dpTolerance: the text
// model's offload path (offloadedTraining), whose host AdamW is the device kernel's arithmetic;
// only actor/grad_norm is summed in another order (TestDeviceModelPathOffload).
func TestDeviceVLModelPathOffload(t *testing.T) {
	model := tinyVL(t, "qwen2-vl.json")
	ref, off := filepath.Join(t.TempDir(), "ref"), filepath.Join(t.TempDir(), "off")
	set := []string{"worker.actor.device=cuda", "worker.actor.model.lora_rank=4", "worker.actor.model.lora_alpha=8", "worker.actor.model.lora_dropout=0.1",
		"worker.actor.max_grad_norm=0.05", "dataset.max_response_length=4", "training.save_freq=1"}
	a := hfLines(t, vlOverrides(model, ref, set...))
	b := hfLines(t, vlOverrides(model, off, append(set, "worker.actor.offload.offload_optimizer=true")...))
	diffs, worst := compareLines(a, b)
	t.Logf("largest relative metric difference %.2g", worst)
	require.Empty(t, diffs)
	for _, step := range []int{1, 2} {
		sameState(t, ref, off, step, "offloaded")
	}
	// and the optimizer really is the offloaded one (equal results alone would not show it)
	s, err := openHFVL(mustConfig(t, vlOverrides(model, filepath.Join(t.TempDir(), "probe"), append(set, "worker.actor.offload.offload_optimizer=true")...)))
	require.NoError(t, err)
	defer func() { _ = s.close() }()
	opt, _, _, err := s.training(0)
	require.NoError(t, err)
	require.IsType(t, hfOffloaded{}, opt, "offload_optimizer=true on the device")
}

// TestDeviceVLModelPathDataParallelOffload: the tiny Qwen2-VL with LoRA on the language model
// and the tower (the perturbed pass on, clipping active) on 2 emulated devices
// (CUEMU_DEVICES=2) with the optimizer offloaded writes the non-offloaded 2-device run's
// checkpoints bit for bit (adapters and AdamW moments, steps 1 and 2) and its metrics within
// dpTolerance (the host's gradient norm sums in another order), both ways the text models
// offload on several ranks: NO_SHARD (the devices' sum through NCCL, then each rank's host
// AdamW on the same sum) and ZeRO-2 (each micro-batch's gradient down to the host, reduced
// and stepped there shard by shard; no device collectives are bootstrapped, which shows the
// offloaded path ran). The NO_SHARD configuration's optimizer is the offloaded one.
func TestDeviceVLModelPathDataParallelOffload(t *testing.T) {
	if b, err := cuda.New(1); err != nil {
		t.Skipf("SKIP: needs a second CUDA device: %v", err)
	} else {
		_ = b.Close()
	}
	var mu sync.Mutex
	bootstrapped := 0
	testDeviceCollectives = func(collective.Tensors) {
		mu.Lock()
		bootstrapped++
		mu.Unlock()
	}
	defer func() { testDeviceCollectives = nil }()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return bootstrapped
	}
	model := tinyVL(t, "qwen2-vl.json")
	dir := func(name string) string { return filepath.Join(t.TempDir(), name) }
	set := []string{"worker.actor.device=cuda", "worker.actor.model.lora_rank=4", "worker.actor.model.lora_alpha=8",
		"worker.actor.max_grad_norm=0.05", "dataset.max_response_length=4", "training.save_freq=1", "training.steps=2",
		"worker.actor.micro_batch_size_per_device_for_update=2", "worker.actor.micro_batch_size_per_device_for_experience=2",
		"training.n_gpus_per_node=2"}
	off := append(append([]string(nil), set...), "worker.actor.offload.offload_optimizer=true")
	zero2 := "worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP"
	ref, noShard, sharded := dir("ref"), dir("no_shard"), dir("zero2")
	a := hfLines(t, vlOverrides(model, ref, set...))
	require.Equal(t, 2, count(), "the device run reduces through the devices' collectives")
	for _, c := range []struct {
		name, dir string
		set       []string
		devColl   int // device collectives bootstrapped (2 ranks each)
	}{
		{"NO_SHARD", noShard, off, 2},
		{"ZeRO-2", sharded, append(off, zero2), 0},
	} {
		before := count()
		b := hfLines(t, vlOverrides(model, c.dir, c.set...))
		require.Equal(t, c.devColl, count()-before, "%s: device collectives", c.name)
		diffs, worst := compareLines(a, b)
		t.Logf("%s offloaded vs on the devices: largest relative metric difference %.2g", c.name, worst)
		require.Empty(t, diffs, c.name)
		for _, step := range []int{1, 2} {
			sameState(t, ref, c.dir, step, c.name+" offloaded")
		}
	}
	s, err := openHFVL(mustConfig(t, vlOverrides(model, dir("probe"), off...)))
	require.NoError(t, err)
	defer func() { _ = s.close() }()
	opt, _, _, err := s.training(0)
	require.NoError(t, err)
	require.IsType(t, hfOffloaded{}, opt, "offload_optimizer=true on 2 devices")
}

// TestDeviceVLModelPathBF16DataParallel: the tiny Qwen2-VL in bf16 mixed precision (the tower's
// and the language model's copies, roundings and kept activations on each device) with LoRA on
// both parts, 2 emulated devices (ordered NO_SHARD, a micro-batch of 2 rows per rank) against one
// device (two micro-batches of 2 rows): metrics within dpTolerance, adapters and AdamW
// moments bit for bit at step 2, as TestDeviceModelPathBF16DataParallel for the text models (the
// ordered reduction adds the micro-batches' gradients in one device's order, and each rank
// computes its rows as one device does).
func TestDeviceVLModelPathBF16DataParallel(t *testing.T) {
	if b, err := cuda.New(1); err != nil {
		t.Skipf("SKIP: needs a second CUDA device: %v", err)
	} else {
		_ = b.Close()
	}
	model := tinyVL(t, "qwen2-vl.json")
	over := func(run string, ranks int) []string {
		return vlOverrides(model, run, "worker.actor.device=cuda", "worker.actor.model.lora_rank=4", "worker.actor.model.lora_alpha=8",
			"worker.actor.fsdp.mixed_precision_dtype=bf16", "dataset.max_response_length=4", "training.save_freq=2",
			"worker.actor.micro_batch_size_per_device_for_update=2", "worker.actor.micro_batch_size_per_device_for_experience=2",
			fmt.Sprintf("training.n_gpus_per_node=%d", ranks))
	}
	one, two := filepath.Join(t.TempDir(), "one"), filepath.Join(t.TempDir(), "two")
	a := hfLines(t, over(one, 1))
	b := hfLines(t, over(two, 2))
	diffs, worst := compareLines(a, b)
	t.Logf("bf16, 2 devices vs 1: largest relative metric difference %.2g", worst)
	require.Empty(t, diffs)
	sameState(t, one, two, 2, "bf16, 2 devices vs 1")
}

// stepTokens is one RL step's [rows, cols] per-token tensors on the host (testHFStep).
type stepTokens struct {
	rows, cols                                 int
	mask, old, entropy, perception, advantages []float32
}

// closeTokens reports the response tokens (mask 1) where got and want differ by more than
// 1e-5·(1 + max|want|), the device-vs-CPU tolerance of the models' own tests, and logs the
// largest difference.
func closeTokens(t *testing.T, name string, mask, got, want []float32) {
	t.Helper()
	require.Equal(t, len(want), len(got), name)
	scale := 0.0
	for i, m := range mask {
		if m != 0 {
			scale = max(scale, math.Abs(float64(want[i])))
		}
	}
	worst, bad := 0.0, 0
	for i, m := range mask {
		if m == 0 {
			continue
		}
		d := math.Abs(float64(got[i])-float64(want[i])) / (1 + scale)
		worst = max(worst, d)
		if d > 1e-5 {
			if bad == 0 {
				t.Errorf("%s at token %d: device %v, cpu %v", name, i, got[i], want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of the response tokens differ by more than 1e-5", name, bad)
	}
	t.Logf("%s: largest relative difference %.3g", name, worst)
}
