package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/examples/internal/vqa"
	xdraw "golang.org/x/image/draw"
)

// tinyConfig is a configuration that runs a few steps in about a second.
func tinyConfig(t testing.TB, dir string, extra ...string) Config {
	t.Helper()
	o := append([]string{"training.run_dir=" + dir}, tinyOverrides...)
	cfg, err := LoadConfig("", append(o, extra...))
	require.NoError(t, err)
	return cfg
}

// tinyOverrides are tinyConfig's settings but the run directory.
var tinyOverrides = []string{
	"training.steps=4", "training.sft_steps=3", "training.sft_batch_size=8", "training.val_freq=2",
	"training.save_freq=2", "training.progress=false", "training.rollout_log_freq=2",
	"dataset.train_size=64", "dataset.val_size=8", "dataset.rollout_batch_size=4",
	"worker.rollout.n=2", "worker.rollout.max_response_length=12",
	"worker.actor.global_batch_size=2", "worker.actor.micro_batch_size_per_device_for_update=2",
	"worker.actor.micro_batch_size_per_device_for_experience=4",
	"worker.actor.model.dim=16", "worker.actor.model.layers=1", "worker.actor.model.heads=2", "worker.actor.model.mlp_dim=32",
}

func run(t *testing.T, cfg Config) *Summary {
	t.Helper()
	var out, errb bytes.Buffer
	s, err := Run(context.Background(), cfg, &out, &errb)
	require.NoError(t, err, "stderr: %s", errb.String())
	return s
}

func TestEndToEnd(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyConfig(t, dir, "worker.actor.use_kl_loss=true", "optimization.enable_entropy_filtering=true")
	s := run(t, cfg)
	assert.Equal(t, 4, s.Steps)
	for _, f := range []string{"metrics.jsonl", "curves.png", "rollouts.md", "config.yaml", "summary.json",
		"checkpoints/global_step_2/model.safetensors", "checkpoints/global_step_4/model.safetensors",
		"checkpoints/global_step_4/optimizer.safetensors", "checkpoints/global_step_4/state.json",
		"checkpoints/global_step_4/config.yaml", "checkpoints/global_step_4/ref.safetensors", "checkpoints/checkpoint_tracker.json"} {
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err, f)
		assert.Positive(t, st.Size(), f)
	}
	png, _ := os.ReadFile(filepath.Join(dir, "curves.png"))
	assert.True(t, bytes.HasPrefix(png, []byte("\x89PNG")))
	lines, err := ReadMetrics(filepath.Join(dir, "metrics.jsonl"))
	require.NoError(t, err)
	require.Len(t, lines, 5) // step 0 (warm start) + 4 RL steps
	for _, l := range lines[1:] {
		for _, k := range []string{"actor/pg_loss", "actor/pg_clipfrac_higher", "actor/ppo_kl", "actor/entropy_loss",
			"actor/grad_norm", "actor/kl_loss", "reward/overall", "reward/accuracy", "reward/format",
			"perf/tokens_per_second", "perf/time_per_step", "actor/approx_kl", "actor/clipfrac", "actor/entropy"} {
			v, ok := l.Metrics[k]
			require.True(t, ok, "step %d: no %s", l.Step, k)
			require.NotNil(t, v, "step %d: %s is not finite", l.Step, k)
			assert.False(t, math.IsNaN(*v) || math.IsInf(*v, 0), k)
		}
		for _, k := range []string{"actor/perception_token_fraction", "actor/scaling_factor_mean", "perception/precision",
			"perception/recall", "entropy_mask/precision", "entropy_mask/recall", "actor/entropy_token_fraction"} {
			_, ok := l.Metrics[k]
			assert.True(t, ok, "step %d: no %s", l.Step, k)
		}
	}
	_, ok := lines[2].Metrics["val/accuracy"]
	assert.True(t, ok, "validation at step 2 (val_freq 2)")
	md, _ := os.ReadFile(filepath.Join(dir, "rollouts.md"))
	assert.Contains(t, string(md), "## step 1")
	ad, _ := os.ReadFile(filepath.Join(dir, "attention_diagnostics.md"))
	assert.Contains(t, string(ad), "## step 2")
	assert.Contains(t, string(ad), "| all |")
	for _, k := range []string{"mdi/balance_mean", "mdi/mdi_geomean", "mdi/reward_mean", "mdi/all_mdi"} {
		v := lines[1].Metrics[k]
		require.NotNil(t, v, k)
	}
}

// sameRun asserts that run directories a and b have identical metrics (all but wall-time
// fields) and identical final weights at step.
func sameRun(t *testing.T, a, b string, step int) {
	t.Helper()
	la, err := ReadMetrics(filepath.Join(a, "metrics.jsonl"))
	require.NoError(t, err)
	lb, err := ReadMetrics(filepath.Join(b, "metrics.jsonl"))
	require.NoError(t, err)
	require.Equal(t, len(la), len(lb))
	for i := range la {
		require.Equal(t, la[i].Step, lb[i].Step)
		for k, va := range la[i].Metrics {
			if timingKey(k) {
				continue
			}
			vb, ok := lb[i].Metrics[k]
			require.True(t, ok, "step %d: resumed run lacks %s", la[i].Step, k)
			if va == nil || vb == nil {
				assert.Equal(t, va == nil, vb == nil, "step %d %s", la[i].Step, k)
				continue
			}
			assert.Equal(t, *va, *vb, "step %d %s", la[i].Step, k)
		}
		for k := range lb[i].Metrics {
			_, ok := la[i].Metrics[k]
			assert.True(t, ok || timingKey(k), "step %d: resumed run has extra %s", la[i].Step, k)
		}
	}
	for _, f := range []string{"rollouts.md", "attention_diagnostics.md"} {
		ra, erra := os.ReadFile(filepath.Join(a, f))
		rb, errb := os.ReadFile(filepath.Join(b, f))
		assert.Equal(t, erra == nil, errb == nil, f)
		assert.Equal(t, string(ra), string(rb), "%s differs", f)
	}
	name := fmt.Sprintf("checkpoints/global_step_%d/model.safetensors", step)
	wa, _ := os.ReadFile(filepath.Join(a, name))
	wb, _ := os.ReadFile(filepath.Join(b, name))
	require.NotEmpty(t, wa)
	assert.True(t, bytes.Equal(wa, wb), "final weights differ")
}

// TestResumeEquivalence: 4 steps in one go and 2 steps + a resumed 2 give identical metrics
// (all but wall-time fields), and identical final weights.
func TestResumeEquivalence(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	run(t, tinyConfig(t, a))
	run(t, tinyConfig(t, b, "training.steps=2"))
	run(t, tinyConfig(t, b, "training.find_last_checkpoint=true"))
	sameRun(t, a, b, 4)
}

// TestInterruptThenResume: a run whose context is cancelled (what SIGINT does) during step 3
// finishes that step, checkpoints it, prints the resume command and returns ErrInterrupted;
// running that command gives the uninterrupted run. The adaptive divergence controller and a
// cosine LR schedule make the state to restore non-trivial.
func TestInterruptThenResume(t *testing.T) {
	extra := []string{"optimization.divergence_type=adaptive", "optimization.divergence_target=0.01",
		"worker.actor.optim.lr_scheduler_type=cosine", "worker.actor.optim.warmup_steps=2", "training.save_freq=0",
		"training.logger=[jsonl, tensorboard]"}
	a, b := t.TempDir(), t.TempDir()
	run(t, tinyConfig(t, a, extra...))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	testAfterStep = func(step int) {
		if step == 2 {
			cancel() // arrives during step 2's bookkeeping: step 3 never starts
		}
	}
	defer func() { testAfterStep = nil }()
	var out, errb bytes.Buffer
	s, err := Run(ctx, tinyConfig(t, b, extra...), &out, &errb)
	require.ErrorIs(t, err, ErrInterrupted)
	testAfterStep = nil
	assert.Equal(t, 2, s.Steps, "the summary covers the steps done")
	assert.Positive(t, s.WarmStartSeconds)
	_, err = os.Stat(filepath.Join(b, "checkpoints/global_step_2/model.safetensors"))
	require.NoError(t, err, "checkpoint of the last step")
	cmd := "go run ./examples/trainer -config " + filepath.Join(b, "config.yaml") + " training.find_last_checkpoint=true"
	require.Contains(t, errb.String(), cmd)

	// The printed command, in process: the run dir's config.yaml and the one override.
	cfg, err := LoadConfig(filepath.Join(b, "config.yaml"), []string{"training.find_last_checkpoint=true"})
	require.NoError(t, err)
	s2 := run(t, cfg)
	assert.Equal(t, 4, s2.Steps)
	assert.Positive(t, s2.WarmStartSeconds, "summary.json is not reset by the resumed segment")
	sameRun(t, a, b, 4)
	events, _ := filepath.Glob(filepath.Join(b, "events.out.tfevents.*"))
	assert.NotEmpty(t, events)
}

// TestResumeRefusesTrajectoryChange: a changed worker.rollout.n is refused by name; a changed
// budget with a constant LR is not.
func TestResumeRefusesTrajectoryChange(t *testing.T) {
	dir := t.TempDir()
	run(t, tinyConfig(t, dir, "training.steps=1"))
	_, err := Run(context.Background(), tinyConfig(t, dir, "training.find_last_checkpoint=true", "worker.rollout.n=4"), &bytes.Buffer{}, &bytes.Buffer{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "worker.rollout.n: checkpoint 2, now 4")
	run(t, tinyConfig(t, dir, "training.find_last_checkpoint=true", "training.steps=2"))
}

// TestMetricsWithoutCheckpointRefused: a run dir holding metrics of RL steps but no checkpoint
// is not reused. (The step-0 line alone is what a kill inside the first checkpoint leaves: that
// run starts again, TestKilledInFirstCheckpointRestarts.)
func TestMetricsWithoutCheckpointRefused(t *testing.T) {
	dir := t.TempDir()
	lines := `{"step":0,"sft/loss":1}` + "\n" + `{"step":1,"reward/overall":0.5}` + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(lines), 0o644))
	_, err := Run(context.Background(), tinyConfig(t, dir), &bytes.Buffer{}, &bytes.Buffer{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no complete checkpoint")
	data, _ := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	assert.Equal(t, lines, string(data), "left as it was")
}

// TestOrphanedMetricsKept: lines after the last checkpoint (a crash) move to
// metrics.orphaned.jsonl when the run resumes; nothing is deleted.
func TestOrphanedMetricsKept(t *testing.T) {
	dir := t.TempDir()
	run(t, tinyConfig(t, dir, "training.steps=2"))
	p := filepath.Join(dir, "metrics.jsonl")
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"step":3,"reward/overall":0.5}` + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	run(t, tinyConfig(t, dir, "training.find_last_checkpoint=true", "training.steps=3"))
	orphan, err := os.ReadFile(filepath.Join(dir, "metrics.orphaned.jsonl"))
	require.NoError(t, err)
	assert.Equal(t, `{"step":3,"reward/overall":0.5}`+"\n", string(orphan))
	lines, err := ReadMetrics(p)
	require.NoError(t, err)
	assert.Len(t, lines, 4)
}

// TestOneFileMode: every file and directory of a run has the same mode.
func TestOneFileMode(t *testing.T) {
	dir := t.TempDir()
	run(t, tinyConfig(t, dir, "training.steps=2", "training.logger=[console, tensorboard]"))
	n := 0
	require.NoError(t, filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		require.NoError(t, err)
		if p == dir {
			return nil
		}
		want := fileMode
		if info.IsDir() {
			want = dirMode
		}
		assert.Equal(t, want, info.Mode().Perm(), p)
		n++
		return nil
	}))
	assert.Greater(t, n, 10)
}

// TestValOnly validates a checkpoint's weights without training.
func TestValOnly(t *testing.T) {
	a := t.TempDir()
	run(t, tinyConfig(t, a, "training.steps=1"))
	b := t.TempDir()
	var out bytes.Buffer
	_, err := Run(context.Background(), tinyConfig(t, b, "training.val_only=true", "training.load_checkpoint_path="+filepath.Join(a, "checkpoints/global_step_1")), &out, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Contains(t, out.String(), "validation of step 0")
	la, err := ReadMetrics(filepath.Join(a, "metrics.jsonl"))
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(b, "validation.json"))
	require.NoError(t, err)
	lv, err := parseMetrics(data, "validation.json")
	require.NoError(t, err)
	assert.Equal(t, *la[1].Metrics["val/accuracy"], *lv[0].Metrics["val/accuracy"], "the same weights validate the same")
}

func TestRunRefusesExistingCheckpoints(t *testing.T) {
	dir := t.TempDir()
	run(t, tinyConfig(t, dir, "training.steps=1"))
	_, err := Run(context.Background(), tinyConfig(t, dir, "training.steps=1"), &bytes.Buffer{}, &bytes.Buffer{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "find_last_checkpoint")
}

func TestDataFileErrors(t *testing.T) {
	dir := t.TempDir()
	samples := vqa.Generate(vqa.DefaultTaskConfig(), 1, 0, 8)
	path, err := vqa.WriteJSONL(dir, "train", samples)
	require.NoError(t, err)
	vpath, err := vqa.WriteJSONL(dir, "val", samples[:4])
	require.NoError(t, err)

	// The files work, in both formats.
	run(t, tinyConfig(t, t.TempDir(), "dataset.train_files="+path, "dataset.val_files="+vpath, "training.steps=1"))
	ppath, err := vqa.WriteParquet(dir, "train", samples)
	require.NoError(t, err)
	run(t, tinyConfig(t, t.TempDir(), "dataset.train_files="+ppath, "dataset.val_files="+vpath, "training.steps=1"))

	// A corrupt line names the file and line.
	data, _ := os.ReadFile(path)
	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, append(data, []byte("{not json\n")...), 0o644))
	_, err = NewTrainer(tinyConfig(t, t.TempDir(), "dataset.train_files="+bad))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dataset.train_files")
	assert.Contains(t, err.Error(), "bad.jsonl")
	assert.Contains(t, err.Error(), "9") // the line

	// A missing image names its path.
	imgs, _ := filepath.Glob(filepath.Join(dir, "images", "val_*.png"))
	require.NotEmpty(t, imgs)
	require.NoError(t, os.Remove(imgs[0]))
	_, err = NewTrainer(tinyConfig(t, t.TempDir(), "dataset.train_files="+path, "dataset.val_files="+vpath))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dataset.val_files")
	assert.Contains(t, err.Error(), filepath.Base(imgs[0]))

	// A missing file.
	_, err = NewTrainer(tinyConfig(t, t.TempDir(), "dataset.train_files="+filepath.Join(dir, "nope.jsonl")))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nope.jsonl")
}

// TestFailedSaveKeepsCheckpoints: a save that fails before its commit leaves the previous
// checkpoint, the tracker and the resume point intact, and no partial directory behind.
func TestFailedSaveKeepsCheckpoints(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyConfig(t, dir, "training.steps=2")
	run(t, cfg)
	ck := &Checkpoints{Root: filepath.Join(dir, "checkpoints")}
	before, _ := os.ReadFile(filepath.Join(dir, "checkpoints/global_step_2/model.safetensors"))
	tracker, _ := os.ReadFile(filepath.Join(dir, "checkpoints", ckptTracker))

	tr, err := NewTrainer(cfg)
	require.NoError(t, err)
	require.NoError(t, tr.Load(filepath.Join(dir, "checkpoints/global_step_2")))
	tr.step = 3
	ck.beforeCommit = func() error { return errors.New("disk full (injected)") }
	_, err = tr.Save(ck)
	require.ErrorContains(t, err, "injected")

	entries, _ := os.ReadDir(ck.Root)
	for _, e := range entries {
		assert.False(t, strings.HasPrefix(e.Name(), ".tmp"), "temporary %s left behind", e.Name())
		assert.NotEqual(t, "global_step_3", e.Name())
	}
	after, _ := os.ReadFile(filepath.Join(dir, "checkpoints/global_step_2/model.safetensors"))
	assert.Equal(t, before, after)
	tracker2, _ := os.ReadFile(filepath.Join(dir, "checkpoints", ckptTracker))
	assert.Equal(t, tracker, tracker2)
	d, step, err := ck.Last()
	require.NoError(t, err)
	assert.Equal(t, 2, step)
	assert.Equal(t, filepath.Join(ck.Root, "global_step_2"), d)

	// A corrupt weights file is an error naming it, and changes nothing.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "checkpoints/global_step_2/model.safetensors"), []byte("garbage!!"), 0o644))
	tr2, err := NewTrainer(cfg)
	require.NoError(t, err)
	err = tr2.Load(filepath.Join(dir, "checkpoints/global_step_2"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "model.safetensors")
	assert.Equal(t, 0, tr2.step)
}

// TestSeedFormatTrains: a seed-format JSONL (renamed keys, one image path relative to image_dir,
// images of arbitrary sizes, no response or objects fields) trains for a few steps: no warm
// start (said so), no visual-token diagnostics, a vocabulary from the training prompts, and the
// validation words outside it counted.
func TestSeedFormatTrains(t *testing.T) {
	data := t.TempDir()
	imgDir := filepath.Join(data, "imgs")
	require.NoError(t, os.MkdirAll(imgDir, 0o755))
	samples := vqa.Generate(vqa.DefaultTaskConfig(), 3, 0, 40)
	write := func(name string, ss []vqa.Sample, extraWord string) string {
		var b strings.Builder
		for i, s := range ss {
			w, h := 20+7*i, 90-2*i // wide, tall, larger and smaller than the model's 32x32
			img := image.NewRGBA(image.Rect(0, 0, w, h))
			xdraw.NearestNeighbor.Scale(img, img.Bounds(), s.Image, s.Image.Bounds(), xdraw.Src, nil)
			f := fmt.Sprintf("%s_%d.png", name, i)
			fh, err := os.Create(filepath.Join(imgDir, f))
			require.NoError(t, err)
			require.NoError(t, png.Encode(fh, img))
			require.NoError(t, fh.Close())
			q := s.Prompt
			if extraWord != "" {
				q = extraWord + " " + q
			}
			row, _ := json.Marshal(map[string]any{"question": q, "label": s.Answer, "picture": []string{f}})
			b.Write(row)
			b.WriteByte('\n')
		}
		p := filepath.Join(data, name+".jsonl")
		require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
		return p
	}
	train, val := write("train", samples[:32], ""), write("val", samples[32:], "zebra")
	dir := t.TempDir()
	cfg := tinyConfig(t, dir, "training.steps=2", "dataset.train_files="+train, "dataset.val_files="+val,
		"dataset.prompt_key=question", "dataset.answer_key=label", "dataset.image_key=picture", "dataset.image_dir="+imgDir)
	var out, errb bytes.Buffer
	s, err := Run(context.Background(), cfg, &out, &errb)
	require.NoError(t, err, errb.String())
	assert.Equal(t, 2, s.Steps)
	assert.Contains(t, errb.String(), "no warm start: the training data has no reference responses")
	assert.Contains(t, errb.String(), "8 words (1 distinct) outside the vocabulary")
	assert.Contains(t, errb.String(), "no visual-token diagnostics")
	lines, err := ReadMetrics(filepath.Join(dir, "metrics.jsonl"))
	require.NoError(t, err)
	require.Len(t, lines, 3)
	assert.Equal(t, 8.0, *lines[2].Metrics["val/oov_words"])
	_, ok := lines[1].Metrics["perception/precision"]
	assert.False(t, ok)
	_, ok = lines[0].Metrics["sft/loss"]
	assert.False(t, ok, "no warm start")
	for _, k := range []string{"reward/overall", "actor/pg_loss", "perception/score_mean"} {
		require.NotNil(t, lines[2].Metrics[k], k)
	}
}

// TestOverlongPrompts: prompts over max_prompt_length are dropped (and counted), or an error
// naming the key when filter_overlong_prompts is off.
func TestOverlongPrompts(t *testing.T) {
	_, err := NewTrainer(tinyConfig(t, t.TempDir(), "dataset.max_prompt_length=5", "dataset.filter_overlong_prompts=false"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dataset.max_prompt_length 5")
	_, err = NewTrainer(tinyConfig(t, t.TempDir(), "dataset.max_prompt_length=5"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "overlong dropped")
	tr, err := NewTrainer(tinyConfig(t, t.TempDir(), "dataset.max_prompt_length=16"))
	require.NoError(t, err)
	assert.Positive(t, tr.droppedLong)
	assert.LessOrEqual(t, tr.maxPrompt, 16)
}

// TestSignalContext: a real SIGINT to the process cancels the run's context (what Run watches
// between steps), and the handler is gone afterwards.
func TestSignalContext(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGINT to send on Windows")
	}
	var errb syncBuffer
	ctx := signalContext(&errb)
	self, err := os.FindProcess(os.Getpid())
	require.NoError(t, err)
	require.NoError(t, self.Signal(os.Interrupt))
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("SIGINT did not cancel the context")
	}
	require.Eventually(t, func() bool { return strings.Contains(errb.String(), "stopping after the current step") }, 5*time.Second, 10*time.Millisecond)
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
