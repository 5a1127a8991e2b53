package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
)

const hfTestdata = "../hfmodel/testdata"

// tinyHF writes what `go run ./examples/hf init -config tiny-qwen2-config.json -tokenizer
// qwen2_5` writes: a tiny random Qwen2 with the real Qwen2.5 tokenizer and chat template.
func tinyHF(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(hfTestdata, "tiny-qwen2-config.json"))
	require.NoError(t, err)
	cfg, err := hfmodel.ParseConfig(data)
	require.NoError(t, err)
	ck, err := hfmodel.RandomCheckpoint(cfg, 7)
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "model")
	require.NoError(t, ck.Save(dir, hfmodel.SaveOptions{DType: hfmodel.Float32, Shards: 1}))
	require.NoError(t, hfmodel.CopyTokenizerFiles(dir, filepath.Join(hfTestdata, "qwen2_5")))
	return dir
}

// hfOverrides is a run of a few seconds: 2 prompts × 2 samples of 8 tokens per step, no
// validation. The entropy penalty gives the adapters a gradient even when every reward of the
// random model is 0 (no group-relative signal), so the trained adapter is never the initial
// B = 0.
func hfOverrides(model, run string, extra ...string) []string {
	return append([]string{"worker.actor.model.model_path=" + model, "training.run_dir=" + run,
		"training.steps=2", "dataset.rollout_batch_size=2", "worker.actor.global_batch_size=2", "worker.rollout.n=2",
		"worker.actor.micro_batch_size_per_device_for_update=4", "dataset.max_response_length=8",
		"dataset.train_size=16", "optimization.use_entropy_penalty=true", "optimization.entropy_penalty_coef=0.1",
		"worker.actor.optim.lr=0.01", "training.progress=false", "dataset.val_size=0"}, extra...)
}

func logitsOf(t *testing.T, m *hflm.Model, ids []int32) []float32 {
	t.Helper()
	lg, err := m.Logits(ids)
	require.NoError(t, err)
	v, err := lg.Float32s()
	require.NoError(t, err)
	return v
}

// TestModelPathLoRA is the "done when": a tiny Qwen2 with the real tokenizer trains
// with LoRA for 2 steps; the run directory holds a PEFT adapter with PEFT's tensor names and an
// HF export whose logits (what `hf logits` computes: OpenWeights, Load, Logits) equal those of
// the base with the saved adapter merged, bit for bit, and differ from the base's.
func TestModelPathLoRA(t *testing.T) {
	model, run := tinyHF(t), filepath.Join(t.TempDir(), "run")
	cfg, err := LoadConfig("", hfOverrides(model, run, "worker.actor.model.lora_rank=4", "worker.actor.model.lora_alpha=8",
		"worker.actor.model.target_modules=[q_proj,v_proj,down_proj]"))
	require.NoError(t, err)
	var out, errOut bytes.Buffer
	sum, err := Run(context.Background(), cfg, &out, &errOut)
	require.NoError(t, err, errOut.String())
	assert.Equal(t, 2, sum.Steps)
	assert.Contains(t, out.String(), "LoRA rank 4")
	lines, err := ReadMetrics(filepath.Join(run, "metrics.jsonl"))
	require.NoError(t, err)
	require.Len(t, lines, 2)
	require.NotNil(t, lines[0].Metrics["reward/accuracy"])
	// The reference is the base without adapters: equal to the policy at step 1 (B = 0), not
	// after the first update.
	kl1, kl2 := lines[0].Metrics["actor/reward_kl_penalty"], lines[1].Metrics["actor/reward_kl_penalty"]
	require.True(t, kl1 != nil && kl2 != nil)
	assert.Zero(t, *kl1)
	assert.NotZero(t, *kl2)

	adapter := filepath.Join(run, hfAdapterDir)
	ts, err := hfmodel.ReadSafetensors(filepath.Join(adapter, hflm.AdapterWeightsFile))
	require.NoError(t, err)
	require.Len(t, ts, 2*2*3) // 2 layers × 3 modules × (A, B)
	trainedB := false
	for _, x := range ts {
		assert.True(t, strings.HasPrefix(x.Name, "base_model.model.model.layers."), x.Name)
		assert.True(t, strings.HasSuffix(x.Name, ".lora_A.weight") || strings.HasSuffix(x.Name, ".lora_B.weight"), x.Name)
		if strings.HasSuffix(x.Name, ".lora_B.weight") {
			for _, v := range x.Float32s() {
				trainedB = trainedB || v != 0
			}
		}
	}
	require.True(t, trainedB, "every lora_B is still 0: the adapters did not train")
	require.FileExists(t, filepath.Join(adapter, hflm.AdapterConfigFile))

	export := filepath.Join(run, hfExportDir)
	for _, f := range []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		require.FileExists(t, filepath.Join(export, f))
	}
	ck, err := hfmodel.OpenWeights(export)
	require.NoError(t, err)
	exported, err := hflm.Load(ck)
	ck.Close()
	require.NoError(t, err)
	merged, err := hflm.LoadDir(model)
	require.NoError(t, err)
	ids := []int32{151644, 872, 198, 3838, 374, 220, 18, 488}
	base := logitsOf(t, merged, ids)
	require.NoError(t, merged.LoadLoRA(adapter))
	require.NoError(t, merged.MergeLoRA())
	want, got := logitsOf(t, merged, ids), logitsOf(t, exported, ids)
	require.Equal(t, want, got)
	require.NotEqual(t, base, got)
}

// TestModelPathFullFineTuning: lora_rank 0 trains every weight (a second load is the
// reference) and exports without an adapter directory.
func TestModelPathFullFineTuning(t *testing.T) {
	model, run := tinyHF(t), filepath.Join(t.TempDir(), "run")
	cfg, err := LoadConfig("", hfOverrides(model, run, "training.steps=1"))
	require.NoError(t, err)
	var out, errOut bytes.Buffer
	_, err = Run(context.Background(), cfg, &out, &errOut)
	require.NoError(t, err, errOut.String())
	assert.Contains(t, out.String(), "full fine-tuning")
	assert.NoDirExists(t, filepath.Join(run, hfAdapterDir))
	ck, err := hfmodel.OpenWeights(filepath.Join(run, hfExportDir))
	require.NoError(t, err)
	defer ck.Close()
	orig, err := hfmodel.OpenWeights(model)
	require.NoError(t, err)
	defer orig.Close()
	name := "model.layers.0.mlp.down_proj.weight"
	assert.NotEqual(t, orig.Tensor(name).Float32s(), ck.Tensor(name).Float32s(), "full fine-tuning left %s unchanged", name)
}

// TestModelPathRefusals: the combinations this path does not do are configuration errors
// naming their key, never a silent substitute.
func TestModelPathRefusals(t *testing.T) {
	model := tinyHF(t)
	for _, c := range []struct{ set, key string }{
		{"worker.actor.device=cuda", "worker.actor.device"}, // no -tags cuda: not compiled in
		{"worker.actor.device=cuda worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP worker.actor.offload.offload_optimizer=true", "worker.actor.offload.offload_optimizer"},
		{"training.n_gpus_per_node=2 worker.actor.model.lora_rank=4 worker.actor.model.lora_dropout=0.1", "worker.actor.model.lora_dropout"},
		{"worker.reward.mdi_weight=1", "worker.reward.mdi_weight"},
		{"optimization.enable_perception_filtering=true", "optimization.enable_perception_filtering"},
		{"optimization.enable_trajectory_reweighting=true", "optimization.enable_trajectory_reweighting"},
		{"training.sft_steps=10", "training.sft_steps"},
		{"optimization.advantage_estimator=gae", "optimization.advantage_estimator"},
		{"worker.actor.model.tokenizer_path=/nonexistent", "worker.actor.model.tokenizer_path"},
		{"worker.actor.checkpoint.torch_dtype=int8", "worker.actor.checkpoint.torch_dtype"},
		{"worker.actor.checkpoint.max_shard_size=5XB", "worker.actor.checkpoint.max_shard_size"},
		{"worker.actor.model.lora_rank=-1", "worker.actor.model.lora_rank"},
	} {
		cfg, err := LoadConfig("", append([]string{"worker.actor.model.model_path=" + model}, strings.Fields(c.set)...))
		if err == nil {
			_, err = Run(context.Background(), cfg, &bytes.Buffer{}, &bytes.Buffer{})
		}
		var ce *ConfigError
		if assert.ErrorAs(t, err, &ce, c.set) {
			assert.Equal(t, c.key, ce.Key, c.set)
		}
	}
	// The defaults that belong to the built-in model are dropped with model_path.
	cfg, err := LoadConfig("", []string{"worker.actor.model.model_path=m"})
	require.NoError(t, err)
	_, err = Run(context.Background(), cfg, &bytes.Buffer{}, &bytes.Buffer{})
	require.ErrorContains(t, err, `worker.actor.model.model_path: "m" is not a local directory`)
	assert.Zero(t, cfg.Training.SFTSteps)
	assert.Zero(t, cfg.Worker.Reward.MDIWeight)
	assert.False(t, cfg.Optimization.EnablePerceptionFiltering)

	// The seeds' config loads; running it names the hub id it cannot fetch.
	cfg, err = LoadConfig("testdata/mtrl-config.yaml", []string{"training.n_gpus_per_node=1"})
	require.NoError(t, err)
	dir := t.TempDir()
	cfg.Training.RunDir = filepath.Join(dir, "run")
	_, err = Run(context.Background(), cfg, &bytes.Buffer{}, &bytes.Buffer{})
	require.ErrorContains(t, err, `"Qwen/Qwen2.5-VL-7B-Instruct" is not a local directory`)
	require.NoDirExists(t, cfg.Training.RunDir)

	// Images in the data, and an unknown LoRA target, fail at the start.
	data := filepath.Join(t.TempDir(), "train.jsonl")
	require.NoError(t, os.WriteFile(data, []byte(`{"prompt": "What is 1 + 1?", "answer": "2", "images": ["a.png"]}`+"\n"), 0o644))
	cfg, err = LoadConfig("", hfOverrides(model, filepath.Join(t.TempDir(), "r"), "dataset.train_files="+data))
	require.NoError(t, err)
	_, err = Run(context.Background(), cfg, &bytes.Buffer{}, &bytes.Buffer{})
	require.ErrorContains(t, err, "text model")
	cfg, err = LoadConfig("", hfOverrides(model, filepath.Join(t.TempDir(), "r"), "worker.actor.model.lora_rank=2", "worker.actor.model.target_modules=[attn]"))
	require.NoError(t, err)
	_, err = Run(context.Background(), cfg, &bytes.Buffer{}, &bytes.Buffer{})
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "worker.actor.model.target_modules", ce.Key)
}

// TestTextRowsAndRewards: the seed's JSONL rows (a string prompt, verl's message list, numeric
// answers) render through the real chat template, and the accuracy reward reads the last
// \boxed{…} or number.
func TestTextRowsAndRewards(t *testing.T) {
	data := filepath.Join(t.TempDir(), "train.jsonl")
	require.NoError(t, os.WriteFile(data, []byte(`{"q": "2+2?", "a": 4}
{"q": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "一半是多少？"}], "a": "\\frac{1}{2}", "images": []}
`), 0o644))
	d := DefaultConfig().Dataset
	d.PromptKey, d.AnswerKey, d.RolloutBatchSize = "q", "a", 2
	rows, err := loadTextRows(data, d, nil)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	assert.Equal(t, "4", rows[0].answer)
	ct, err := hfmodel.LoadChatTemplate(filepath.Join(hfTestdata, "qwen2_5"))
	require.NoError(t, err)
	tok, err := hfmodel.LoadTokenizer(filepath.Join(hfTestdata, "qwen2_5"))
	require.NoError(t, err)
	ps, _, err := encodePrompts(rows, ct, tok, d)
	require.NoError(t, err)
	text, err := ct.Render(rows[1].conversation, true)
	require.NoError(t, err)
	assert.Equal(t, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n一半是多少？<|im_end|>\n<|im_start|>assistant\n", text)
	back := make([]int, len(ps[1].ids))
	for i, id := range ps[1].ids {
		back[i] = int(id)
	}
	dec, err := tok.Decode(back, false)
	require.NoError(t, err)
	assert.Equal(t, text, dec)

	// dataset.format_prompt rewrites string prompts as EasyR1's Jinja file does (content).
	tpl := filepath.Join(t.TempDir(), "math.jinja")
	require.NoError(t, os.WriteFile(tpl, []byte(`{{ content | trim }} Put the final answer in \boxed{}.`), 0o644))
	format, err := loadFormatPrompt(tpl)
	require.NoError(t, err)
	one := filepath.Join(t.TempDir(), "one.jsonl")
	require.NoError(t, os.WriteFile(one, []byte(`{"q": " 2+2? ", "a": 4}`+"\n"), 0o644))
	rows, err = loadTextRows(one, d, format)
	require.NoError(t, err)
	assert.JSONEq(t, `{"messages":[{"role":"user","content":"2+2? Put the final answer in \\boxed{}."}]}`, string(rows[0].conversation))
	_, err = loadTextRows(data, d, format)
	assert.ErrorContains(t, err, "string prompts only")

	for _, c := range []struct {
		text, answer string
		want         bool
	}{
		{"so 3 + 4 = 7", "7", true},
		{"7 or maybe 8", "7", false},
		{`the answer is \boxed{\frac{1}{2}} (not 3)`, "0.5", true},
		{`\boxed{1,000}`, "1000", true},
		{"it is 12.", "12", true},
		{"no number", "3", false},
		{`\boxed{x+1}`, "x + 1", true},
		{`\boxed{x = \dfrac{3}{4}}`, "0.75", false}, // mathruler: "x=3/4" is not read by sympy
		{`\boxed{k = \dfrac{3}{4}}`, `\frac34`, true},
		{`\boxed{2\sqrt{3}}`, `\sqrt{12}`, true},
		{`\boxed{(1, 2)}`, "(1,2)", true},
		{`\boxed{\frac{2}{4}}`, `\frac{1}{2}`, false}, // unreduced
		{`答案是 \boxed{三角形}`, "三角形", true},
		{`\boxed{90^\circ}`, "90", true},
		{`\boxed{50\%}`, "50", true},
		{`\boxed{\text{B}}`, "B", true},
		{`\boxed{\frac{1}{3}}`, "0.33", false},
	} {
		assert.Equal(t, c.want, answersEqual(extractAnswer(c.text), c.answer), "%q vs %q", c.text, c.answer)
	}
}

// TestModelPathResume: 4 steps in one run equal 2 steps, a resume and 2 more, bit for bit
// (metrics but wall times, the trained weights, the optimizer's moments and the export): with
// LoRA and dropout (its random state is in the checkpoint) stopped by the budget, and with full
// fine-tuning stopped by an interrupt (what SIGINT does) after step 2, and with LoRA in bfloat16
// mixed precision with activation checkpointing (scale's keys). Shuffled epochs of 3
// steps, the adaptive divergence controller and validation every 2 steps make the state to
// restore non-trivial.
func TestModelPathResume(t *testing.T) {
	model := tinyHF(t)
	common := []string{"training.steps=4", "dataset.train_size=6", "dataset.shuffle=true", "optimization.divergence_type=adaptive",
		"optimization.divergence_target=0.001", "dataset.val_size=2", "training.val_freq=2", "training.save_freq=0"}
	for _, c := range []struct {
		name      string
		extra     []string
		interrupt bool
	}{
		{"lora-dropout", []string{"worker.actor.model.lora_rank=4", "worker.actor.model.lora_dropout=0.3"}, false},
		{"full", nil, true},
		// 2 ranks, ZeRO-2: an interrupt seen by rank 0 stops both at the same step.
		{"ranks-zero2", []string{"training.n_gpus_per_node=2", "worker.actor.fsdp.sharding_strategy=SHARD_GRAD_OP",
			"worker.actor.micro_batch_size_per_device_for_update=2", "worker.actor.micro_batch_size_per_device_for_experience=2"}, true},
		{"lora-bf16-checkpointing", []string{"worker.actor.model.lora_rank=4", "worker.actor.model.lora_dropout=0.2",
			"worker.actor.fsdp.mixed_precision_dtype=bf16", "worker.actor.model.enable_gradient_checkpointing=true"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
			runHFTest(t, context.Background(), hfOverrides(model, a, append(common, c.extra...)...))
			if c.interrupt {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				testAfterStep = func(step int) {
					if step == 2 {
						cancel()
					}
				}
				cfg, err := LoadConfig("", hfOverrides(model, b, append(common, c.extra...)...))
				require.NoError(t, err)
				var out, errb bytes.Buffer
				sum, err := Run(ctx, cfg, &out, &errb)
				testAfterStep = nil
				require.ErrorIs(t, err, ErrInterrupted)
				assert.Equal(t, 2, sum.Steps)
				require.FileExists(t, filepath.Join(b, "checkpoints/global_step_2/model.safetensors"))
				require.Contains(t, errb.String(), "go run ./examples/trainer -config "+filepath.Join(b, "config.yaml")+" training.find_last_checkpoint=true")
				require.DirExists(t, filepath.Join(b, hfExportDir), "the interrupted run exports what it trained")
				// The printed command, in process.
				cfg, err = LoadConfig(filepath.Join(b, "config.yaml"), []string{"training.find_last_checkpoint=true"})
				require.NoError(t, err)
				runHFCfg(t, context.Background(), cfg)
			} else {
				runHFTest(t, context.Background(), hfOverrides(model, b, append(append(common, c.extra...), "training.steps=2")...))
				ok, err := verifyCheckpoint(filepath.Join(b, "checkpoints/global_step_2"))
				require.NoError(t, err)
				require.True(t, ok, "the checkpoint has a manifest")
				runHFTest(t, context.Background(), hfOverrides(model, b, append(common, append(c.extra, "training.find_last_checkpoint=true")...)...))
			}
			sameRun(t, a, b, 4)
			lines, err := ReadMetrics(filepath.Join(a, "metrics.jsonl"))
			require.NoError(t, err)
			require.Len(t, lines, 5) // validation before training, then 4 steps
			for step, l := range lines {
				assert.Equal(t, step%2 == 0, l.Metrics["val/reward_score"] != nil, "step %d validates: %v", step, step%2 == 0)
			}
			assert.NotEqual(t, *lines[1].Metrics["actor/reward_kl_penalty_coeff"], *lines[4].Metrics["actor/reward_kl_penalty_coeff"], "the adaptive coefficient moves")
			assert.Equal(t, optimizerMoments(t, a, 4), optimizerMoments(t, b, 4), "the moments")
			for _, f := range []string{"checkpoints/global_step_4/" + ckptState, hfExportDir + "/model.safetensors"} {
				fa, err := os.ReadFile(filepath.Join(a, f))
				require.NoError(t, err)
				fb, err := os.ReadFile(filepath.Join(b, f))
				require.NoError(t, err)
				if strings.HasSuffix(f, ckptState) { // all but the time of the save
					var sa, sb hfState
					require.NoError(t, json.Unmarshal(fa, &sa))
					require.NoError(t, json.Unmarshal(fb, &sb))
					sa.Time, sb.Time = "", ""
					assert.Equal(t, sa, sb)
					continue
				}
				assert.True(t, bytes.Equal(fa, fb), "%s differs", f)
			}
			if strings.Contains(strings.Join(c.extra, " "), "lora_rank") {
				var st hfState
				data, err := os.ReadFile(filepath.Join(a, "checkpoints/global_step_4", ckptState))
				require.NoError(t, err)
				require.NoError(t, json.Unmarshal(data, &st))
				assert.NotEmpty(t, st.DropoutRNG)
				require.FileExists(t, filepath.Join(a, "checkpoints/global_step_4", hfAdapterDir, hflm.AdapterWeightsFile))
			}
		})
	}
}

// runHFTest loads a configuration from overrides and runs it to the end.
func runHFTest(t *testing.T, ctx context.Context, overrides []string) *Summary {
	t.Helper()
	cfg, err := LoadConfig("", overrides)
	require.NoError(t, err)
	return runHFCfg(t, ctx, cfg)
}

func runHFCfg(t *testing.T, ctx context.Context, cfg Config) *Summary {
	t.Helper()
	var out, errb bytes.Buffer
	sum, err := Run(ctx, cfg, &out, &errb)
	require.NoError(t, err, errb.String())
	return sum
}

// TestModelPathValidation: validation under EasyR1's names (val/reward_score, val/<reward>_reward)
// before training and every val_freq steps, on dataset.val_files rows of every form (a string, a
// message list, Chinese), in batches of val_batch_size; val_only on the last checkpoint
// (load_checkpoint_path) gives exactly the last step's validation.
func TestModelPathValidation(t *testing.T) {
	model, run := tinyHF(t), filepath.Join(t.TempDir(), "run")
	val := filepath.Join(t.TempDir(), "val.jsonl")
	require.NoError(t, os.WriteFile(val, []byte(`{"prompt": "What is 2 + 3?", "answer": 5}
{"prompt": [{"role": "system", "content": "Answer in \\boxed{}."}, {"role": "user", "content": "What is half of 1?"}], "answer": "\\frac{1}{2}"}
{"prompt": "三加四等于几？", "answer": "7"}
`), 0o644))
	extra := []string{"worker.actor.model.lora_rank=4", "dataset.val_files=" + val, "training.val_freq=1",
		"training.val_before_train=true", "dataset.val_batch_size=2", "worker.rollout.val_override_config.temperature=0.7"} // EasyR1's name
	assert.Equal(t, 0.7, mustConfig(t, hfOverrides(model, run, extra...)).Worker.Rollout.ValTemperature)
	sum := runHFTest(t, context.Background(), hfOverrides(model, run, extra...))
	lines, err := ReadMetrics(filepath.Join(run, "metrics.jsonl"))
	require.NoError(t, err)
	require.Len(t, lines, 3)
	assert.Equal(t, *lines[0].Metrics["val/accuracy_reward"], sum.ValAccStart)
	assert.Equal(t, *lines[2].Metrics["val/format_reward"], sum.ValFormatEnd)
	cfg := DefaultConfig().Worker.Reward
	wa, wf := cfg.AccuracyWeight/(cfg.AccuracyWeight+cfg.FormatWeight), cfg.FormatWeight/(cfg.AccuracyWeight+cfg.FormatWeight)
	for _, l := range lines {
		for _, k := range []string{"val/reward_score", "val/overall_reward", "val/accuracy_reward", "val/format_reward", "timing_s/testing"} {
			require.NotNil(t, l.Metrics[k], "step %d: %s", l.Step, k)
		}
		m := func(k string) float64 { return *l.Metrics[k] }
		assert.Equal(t, m("val/overall_reward"), m("val/reward_score"))
		assert.InDelta(t, wa*m("val/accuracy_reward")+wf*m("val/format_reward"), m("val/reward_score"), 1e-12)
	}
	other := filepath.Join(t.TempDir(), "val-only")
	cfgV, err := LoadConfig("", hfOverrides(model, other, append(extra, "training.val_only=true",
		"training.load_checkpoint_path="+filepath.Join(run, "checkpoints", "global_step_2"))...))
	require.NoError(t, err)
	var out, errb bytes.Buffer
	_, err = Run(context.Background(), cfgV, &out, &errb)
	require.NoError(t, err, errb.String())
	assert.Contains(t, out.String(), "validation of step 0 on 3 prompts")
	got, err := ReadMetrics(filepath.Join(other, "validation.json"))
	require.NoError(t, err)
	require.Len(t, got, 1)
	for _, k := range []string{"val/reward_score", "val/accuracy_reward", "val/format_reward"} {
		assert.Equal(t, *lines[2].Metrics[k], *got[0].Metrics[k], k)
	}
	assert.NoFileExists(t, filepath.Join(other, "metrics.jsonl"))
}

// TestModelPathTokenizerPathAndExport: a checkpoint without tokenizer files trains with
// worker.actor.model.tokenizer_path (and without it fails naming model_path), and the export
// honours worker.actor.checkpoint: bfloat16 weights in shards of at most max_shard_size (an
// index beside them), the trained weights rounded to bfloat16 as torch does, and the
// tokenizer files of tokenizer_path.
func TestModelPathTokenizerPathAndExport(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(hfTestdata, "tiny-qwen2-config.json"))
	require.NoError(t, err)
	mcfg, err := hfmodel.ParseConfig(data)
	require.NoError(t, err)
	ck, err := hfmodel.RandomCheckpoint(mcfg, 7)
	require.NoError(t, err)
	model := filepath.Join(t.TempDir(), "weights-only")
	require.NoError(t, ck.Save(model, hfmodel.SaveOptions{DType: hfmodel.Float32, Shards: 1}))

	_, err = Run(context.Background(), mustConfig(t, hfOverrides(model, filepath.Join(t.TempDir(), "r"))), &bytes.Buffer{}, &bytes.Buffer{})
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "worker.actor.model.model_path", ce.Key)
	assert.ErrorContains(t, err, "tokenizer")

	run := filepath.Join(t.TempDir(), "run")
	runHFTest(t, context.Background(), hfOverrides(model, run, "training.steps=1",
		"worker.actor.model.tokenizer_path="+filepath.Join(hfTestdata, "qwen2_5"),
		"worker.actor.checkpoint.torch_dtype=bfloat16", "worker.actor.checkpoint.max_shard_size=20KB"))
	export := filepath.Join(run, hfExportDir)
	require.FileExists(t, filepath.Join(export, hfmodel.WeightsIndexFile))
	require.NoFileExists(t, filepath.Join(export, hfmodel.SingleWeightsFile))
	shards, err := filepath.Glob(filepath.Join(export, "model-*-of-*.safetensors"))
	require.NoError(t, err)
	require.Greater(t, len(shards), 2)
	for _, f := range shards {
		st, err := os.Stat(f)
		require.NoError(t, err)
		ts, err := hfmodel.ReadSafetensors(f)
		require.NoError(t, err)
		size := 0
		for _, x := range ts {
			size += len(x.Data)
		}
		assert.True(t, size <= 20000 || len(ts) == 1, "%s: %d bytes of weights in %d tensors (%d on disk)", f, size, len(ts), st.Size())
	}
	for _, f := range []string{hfmodel.TokenizerFile, hfmodel.TokenizerConfigFile} {
		require.FileExists(t, filepath.Join(export, f))
	}
	got, err := hfmodel.Open(export)
	require.NoError(t, err)
	defer got.Close()
	assert.Equal(t, "bfloat16", got.Config.TorchDType)
	files, err := readCheckpoint(filepath.Join(run, "checkpoints", "global_step_1"), ckptModel)
	require.NoError(t, err)
	trained, err := DecodeSafetensors(files[ckptModel], ckptModel)
	require.NoError(t, err)
	require.Len(t, trained, len(got.Tensors))
	for _, x := range got.Tensors {
		w := trained[x.Name]
		want, err := hfmodel.NewTensor(x.Name, w.Shape, w.Data, hfmodel.BFloat16)
		require.NoError(t, err)
		require.Equal(t, hfmodel.BFloat16, x.DType, x.Name)
		require.True(t, bytes.Equal(want.Data, x.Data), "%s is not the trained weight in bfloat16", x.Name)
	}
}

// TestExportRoundTrip: load → export → load is bit-identical: a bfloat16 checkpoint exported
// with the default torch_dtype (the checkpoint's own) in shards gives back its bytes, and so
// does a float32 one exported as float32.
func TestExportRoundTrip(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(hfTestdata, "tiny-qwen2-config.json"))
	require.NoError(t, err)
	mcfg, err := hfmodel.ParseConfig(data)
	require.NoError(t, err)
	ck, err := hfmodel.RandomCheckpoint(mcfg, 11)
	require.NoError(t, err)
	for _, dt := range []hfmodel.DType{hfmodel.BFloat16, hfmodel.Float32} {
		src := filepath.Join(t.TempDir(), "src")
		require.NoError(t, ck.Save(src, hfmodel.SaveOptions{DType: dt, Shards: 1}))
		require.NoError(t, hfmodel.CopyTokenizerFiles(src, filepath.Join(hfTestdata, "qwen2_5")))
		orig, err := hfmodel.Open(src)
		require.NoError(t, err)
		m, err := hflm.Load(orig)
		require.NoError(t, err)
		opt, err := exportOptions(ExportConfig{MaxShardSize: "30KB"}, orig.Config)
		require.NoError(t, err)
		tm := &textModel{Model: m, gen: orig.Generation, tokDir: src, export: opt, modelDir: src}
		dir := t.TempDir()
		require.NoError(t, tm.save(dir))
		back, err := hfmodel.Open(filepath.Join(dir, hfExportDir))
		require.NoError(t, err)
		require.Equal(t, orig.Config, back.Config)
		require.Equal(t, orig.Generation, back.Generation)
		require.Len(t, back.Tensors, len(orig.Tensors))
		for i, x := range back.Tensors {
			require.Equal(t, dt, x.DType)
			require.True(t, bytes.Equal(orig.Tensors[i].Data, x.Data), "%v: %s differs", dt, x.Name)
		}
		require.FileExists(t, filepath.Join(dir, hfExportDir, hfmodel.WeightsIndexFile))
		tokA, err := os.ReadFile(filepath.Join(src, hfmodel.TokenizerConfigFile))
		require.NoError(t, err)
		tokB, err := os.ReadFile(filepath.Join(dir, hfExportDir, hfmodel.TokenizerConfigFile))
		require.NoError(t, err)
		require.Equal(t, tokA, tokB)
		orig.Close()
		back.Close()
	}
}

func mustConfig(t *testing.T, overrides []string) Config {
	t.Helper()
	cfg, err := LoadConfig("", overrides)
	require.NoError(t, err)
	return cfg
}

// TestParseShardSize: transformers' size strings.
func TestParseShardSize(t *testing.T) {
	for s, want := range map[string]int64{"5GB": 5e9, "500MB": 5e8, "2GiB": 2 << 30, "10kb": 1e4, "123": 123, "1.5 GB": 15e8, "64KiB": 65536} {
		got, err := parseShardSize(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, got, s)
	}
	for _, s := range []string{"", "0", "-1GB", "5XB", "GB", "0.1"} {
		_, err := parseShardSize(s)
		assert.Error(t, err, s)
	}
}

// TestCheckpointSubdirectories: a checkpoint's manifest covers the files a writer adds in
// subdirectories (the export), so damage there is found and named before a resume.
func TestCheckpointSubdirectories(t *testing.T) {
	ck := &Checkpoints{Root: filepath.Join(t.TempDir(), "checkpoints")}
	dir, err := ck.SaveWith(3, map[string][]byte{ckptState: []byte("{}\n")}, func(tmp string) error {
		require.NoError(t, os.MkdirAll(filepath.Join(tmp, hfExportDir), dirMode))
		return os.WriteFile(filepath.Join(tmp, hfExportDir, "model.safetensors"), []byte("weights"), fileMode)
	})
	require.NoError(t, err)
	manifest, err := os.ReadFile(filepath.Join(dir, ckptManifest))
	require.NoError(t, err)
	assert.Contains(t, string(manifest), "  hf/model.safetensors\n")
	assert.Contains(t, string(manifest), "  "+ckptState+"\n")
	ok, err := verifyCheckpoint(dir)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, os.WriteFile(filepath.Join(dir, hfExportDir, "model.safetensors"), []byte("weightz"), fileMode))
	_, err = verifyCheckpoint(dir)
	var de *damagedError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, "hf/model.safetensors", de.file)
	// A manifest naming a file outside the checkpoint is itself damaged.
	require.NoError(t, os.WriteFile(filepath.Join(dir, ckptManifest), []byte(strings.Repeat("0", 64)+"  ../x\n"), fileMode))
	_, err = verifyCheckpoint(dir)
	require.ErrorAs(t, err, &de)
	assert.Equal(t, ckptManifest, de.file)
}

// tinyHFSmallVocab is tinyHF with a 1,056-token vocabulary, for runs where the 151,936-token LM
// head would dominate (the emulated devices): the Qwen2.5 tokenizer cut to its first 1,024 tokens
// (the 256 byte symbols and the merges that make the next 768), its 22 special tokens moved
// to ids 1024–1045 (the chat template, EOS and the padding are the same tokens), and the tiny
// Qwen2's config with vocab_size 1056 and those ids.
func tinyHFSmallVocab(t *testing.T) string {
	t.Helper()
	const keep, vocab = 1024, 1056
	src := filepath.Join(hfTestdata, "qwen2_5")
	f, err := os.Open(filepath.Join(src, "tokenizer.json.gz"))
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	var tok map[string]any
	require.NoError(t, json.NewDecoder(zr).Decode(&tok))
	model := tok["model"].(map[string]any)
	small := map[string]any{}
	for s, id := range model["vocab"].(map[string]any) {
		if id.(float64) < keep {
			small[s] = id
		}
	}
	var merges []any
	for _, m := range model["merges"].([]any) {
		a, b, _ := strings.Cut(m.(string), " ")
		if small[a] != nil && small[b] != nil && small[a+b] != nil {
			merges = append(merges, m)
		}
	}
	model["vocab"], model["merges"] = small, merges
	moved := map[float64]float64{}
	for i, a := range tok["added_tokens"].([]any) {
		at := a.(map[string]any)
		moved[at["id"].(float64)] = float64(keep + i)
		at["id"] = float64(keep + i)
	}
	dir := filepath.Join(t.TempDir(), "model")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	js, err := json.Marshal(tok)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), js, 0o644))
	data, err := os.ReadFile(filepath.Join(src, "tokenizer_config.json"))
	require.NoError(t, err)
	var tc map[string]any
	require.NoError(t, json.Unmarshal(data, &tc))
	dec := map[string]any{}
	for id, v := range tc["added_tokens_decoder"].(map[string]any) {
		n, err := strconv.Atoi(id)
		require.NoError(t, err)
		require.Contains(t, moved, float64(n))
		dec[strconv.Itoa(int(moved[float64(n)]))] = v
	}
	tc["added_tokens_decoder"] = dec
	js, err = json.Marshal(tc)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), js, 0o644))

	data, err = os.ReadFile(filepath.Join(hfTestdata, "tiny-qwen2-config.json"))
	require.NoError(t, err)
	var mc map[string]any
	require.NoError(t, json.Unmarshal(data, &mc))
	mc["vocab_size"], mc["bos_token_id"], mc["eos_token_id"] = vocab, moved[mc["bos_token_id"].(float64)], moved[mc["eos_token_id"].(float64)]
	js, err = json.Marshal(mc)
	require.NoError(t, err)
	cfg, err := hfmodel.ParseConfig(js)
	require.NoError(t, err)
	ck, err := hfmodel.RandomCheckpoint(cfg, 7)
	require.NoError(t, err)
	require.NoError(t, ck.Save(dir, hfmodel.SaveOptions{DType: hfmodel.Float32, Shards: 1}))
	return dir
}
