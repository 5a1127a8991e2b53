//go:build cuda

package main

import (
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/internal/devicetest"
	"github.com/mtrl-go/mtrl/examples/internal/probe"
	"github.com/mtrl-go/mtrl/examples/qwenvl"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
	"github.com/stretchr/testify/require"
)

// This file tells, when the Qwen2-VL device run departs from the CPU's on a GPU, where:
// compareVLPasses compares the host inputs and the log-probs of every scoring pass of the two
// runs, and bisectVLStages runs one pass's inputs through a fresh CPU model and a fresh device
// model stage by stage.

// stageTol bounds a stage's device-vs-host difference relative to the stage's scale: the
// log-probs' bound in fp32 (the tiny model's activations differ by rounding, ~1e-7); in bf16 a
// value within float32 rounding of a bfloat16 boundary rounds the other way, 2⁻⁸ of itself.
var stageTol = map[string]float64{"fp32": 1e-5, "bf16": 1e-2}

// vlRecord is what a run's model saw and computed: its scoring passes (probe.Score), copied,
// and every forward's stages (probe.Stage), with the stage count at the end of each pass.
type vlRecord struct {
	passes []probe.Pass
	ends   []int
	stages stageValues
	err    error
}

// recordVL records a run's scoring passes and stages until the returned stop.
func recordVL() (*vlRecord, func()) {
	r := &vlRecord{}
	probe.Score = func(p probe.Pass) {
		c := p
		c.IDs = slices.Clone(p.IDs)
		c.Pixels = make([][][]byte, len(p.Pixels))
		for i, row := range p.Pixels {
			for _, img := range row {
				c.Pixels[i] = append(c.Pixels[i], slices.Clone(img))
			}
		}
		c.Completions = slices.Clone(p.Completions)
		c.LogProbs = make([][]float32, len(p.LogProbs))
		for i, row := range p.LogProbs {
			c.LogProbs[i] = slices.Clone(row)
		}
		r.passes, r.ends = append(r.passes, c), append(r.ends, len(r.stages.names))
	}
	probe.Stage = r.stages.recorder(&r.err)
	return r, func() { probe.Score, probe.Stage = nil, nil }
}

// recorder returns a probe.Stage hook appending to sv, the tower's stages named by their image
// within the forward (the tower runs per sample); the first error goes to *err.
func (sv *stageValues) recorder(err *error) func(string, *tensor.Tensor) {
	image := -1
	return func(name string, x *tensor.Tensor) {
		switch {
		case name == "vision.pixels":
			image++
		case name == "lm.norm":
			image = -1
		}
		if strings.HasPrefix(name, "vision.") {
			name = fmt.Sprintf("image %d %s", image, name)
		}
		v, e := probe.Host(x)
		if e != nil && *err == nil {
			*err = fmt.Errorf("stage %s: %w", name, e)
		}
		sv.names, sv.values = append(sv.names, name), append(sv.values, v)
	}
}

// compareRunStages compares the two runs' forwards stage by stage (the generations' prefills,
// then each scoring pass: the state of the run included) and reports the first stage whose
// device values differ from the host's by more than tol of their scale, with its forward.
func compareRunStages(t *testing.T, cpu, dev *vlRecord, tol float64) {
	t.Helper()
	require.NoError(t, cpu.err)
	require.NoError(t, dev.err)
	a, b := cpu.stages, dev.stages
	if !slices.Equal(a.names, b.names) {
		n, at := differing(a.names, b.names)
		t.Errorf("the runs' forwards ran different stages (%d of %d / %d differ, first at %d)", n, len(a.names), len(b.names), at)
		return
	}
	label := func(end int) string {
		if k := slices.Index(dev.ends, end); k >= 0 {
			return passName(k, dev.passes[k])
		}
		return "a generation's prefill (validation or rollout)"
	}
	first := ""
	start, worst, worstAt := 0, 0.0, ""
	for i, n := range a.names {
		d := relDiff([][]float32{b.values[i]}, [][]float32{a.values[i]})
		if !(d <= worst) {
			worst, worstAt = d, n
		}
		if !(d <= tol) && first == "" {
			first = n
			t.Errorf("in the runs, %s: the first stage whose device values differ from the cpu's: %s (%.3g > %.3g)", label(i+1+slices.Index(a.names[i:], "lm.norm")), n, d, tol)
		}
		if n == "lm.norm" {
			t.Logf("in the runs, forward of stages %d–%d, %s: largest device-vs-cpu stage difference %.3g (%s)", start, i, label(i+1), worst, worstAt)
			start, worst, worstAt = i+1, 0, ""
		}
	}
}

// passName says which pass of a step p is: the loop scores the old log-probs, the perturbed
// ones, the reference's and then the update's (train) passes, each in micro-batches.
func passName(k int, p probe.Pass) string {
	return fmt.Sprintf("pass %d (%s)", k, kindOf(p))
}

func kindOf(p probe.Pass) string {
	kind := "plain"
	switch {
	case p.Perturbed:
		kind = "perturbed"
	case p.Train:
		kind = "update"
	}
	return fmt.Sprintf("%s, %d rows", kind, len(p.Completions))
}

// hashOf is FNV-1a over the bytes of each part.
func hashOf[E byte | float32 | int32 | uint64 | int](parts ...[]E) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, p := range parts {
		for _, x := range p {
			var u uint64
			switch v := any(x).(type) {
			case byte:
				u = uint64(v)
			case float32:
				u = uint64(math.Float32bits(v))
			case int32:
				u = uint64(uint32(v))
			case uint64:
				u = v
			case int:
				u = uint64(v)
			}
			for i := range b {
				b[i] = byte(u >> (8 * i))
			}
			_, _ = h.Write(b[:])
		}
	}
	return h.Sum64()
}

// inputDiff describes the first difference between two passes' host inputs ("" when
// identical): the rows' ids, the 8-bit pixels, pixel_values, grids, token ids, completion
// lengths, temperature.
func inputDiff(a, b probe.Pass) string {
	sa, sb := a.Samples.([]qwenvl.Sample), b.Samples.([]qwenvl.Sample)
	switch {
	case a.Perturbed != b.Perturbed || a.Train != b.Train || a.Seed != b.Seed:
		return fmt.Sprintf("kind or seed: perturbed %v/%v train %v/%v seed %d/%d", a.Perturbed, b.Perturbed, a.Train, b.Train, a.Seed, b.Seed)
	case !slices.Equal(a.IDs, b.IDs):
		return fmt.Sprintf("row ids %v / %v", a.IDs, b.IDs)
	case !slices.Equal(a.Completions, b.Completions):
		return fmt.Sprintf("completion lengths %v / %v", a.Completions, b.Completions)
	case a.Temperature != b.Temperature:
		return fmt.Sprintf("temperature %v / %v", a.Temperature, b.Temperature)
	case len(sa) != len(sb) || len(a.Pixels) != len(b.Pixels):
		return fmt.Sprintf("%d / %d samples", len(sa), len(sb))
	}
	for i := range sa {
		if len(a.Pixels[i]) != len(b.Pixels[i]) {
			return fmt.Sprintf("row %d: %d / %d images", i, len(a.Pixels[i]), len(b.Pixels[i]))
		}
		for k := range a.Pixels[i] {
			if n, at := differing(a.Pixels[i][k], b.Pixels[i][k]); n > 0 {
				return fmt.Sprintf("row %d image %d: %d of %d 8-bit pixel values differ, first at %d (%d / %d)", i, k, n, len(a.Pixels[i][k]), at, a.Pixels[i][k][at], b.Pixels[i][k][at])
			}
		}
		x, y := sa[i], sb[i]
		if n, at := differing(x.IDs, y.IDs); n > 0 {
			return fmt.Sprintf("row %d: %d token ids differ, first at %d", i, n, at)
		}
		for _, p := range []struct {
			name string
			x, y qwenvl.Patches
		}{{"images", x.Images, y.Images}, {"videos", x.Videos, y.Videos}} {
			if !slices.Equal(p.x.Grids, p.y.Grids) {
				return fmt.Sprintf("row %d: %s' grids %v / %v", i, p.name, p.x.Grids, p.y.Grids)
			}
			if n, at := differing(bitsOf(p.x.Values), bitsOf(p.y.Values)); n > 0 {
				return fmt.Sprintf("row %d: %d of %d %s pixel_values differ, first at %d (%v / %v)", i, n, len(p.x.Values), p.name, at, p.x.Values[at], p.y.Values[at])
			}
		}
	}
	return ""
}

func bitsOf(x []float32) []uint32 {
	out := make([]uint32, len(x))
	for i, v := range x {
		out[i] = math.Float32bits(v)
	}
	return out
}

// differing counts the indices where a and b differ (a length difference counts as one at the
// shorter length) and returns the first.
func differing[E comparable](a, b []E) (n, first int) {
	first = -1
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			if n++; first < 0 {
				first = i
			}
		}
	}
	if len(a) != len(b) {
		if n++; first < 0 {
			first = min(len(a), len(b))
		}
	}
	return n, first
}

// relDiff is max|got − want| / (1 + max|want|) over the rows (NaN-aware: a NaN gives +Inf).
func relDiff(got, want [][]float32) float64 {
	scale, worst := 0.0, 0.0
	for _, r := range want {
		for _, w := range r {
			scale = max(scale, math.Abs(float64(w)))
		}
	}
	for i := range want {
		if i >= len(got) || len(got[i]) != len(want[i]) {
			return math.Inf(1)
		}
		for j, w := range want[i] {
			d := math.Abs(float64(got[i][j]) - float64(w))
			if d != d {
				d = math.Inf(1)
			}
			worst = max(worst, d)
		}
	}
	return worst / (1 + scale)
}

// compareVLPasses compares the CPU run's and the device run's scoring passes one by one: the
// host inputs must be identical (a difference is host-side logic: the perturbation, the
// processor, the batching), the log-probs within tol of their scale. It logs one line per
// pass with the inputs' hashes, which a difference between two GPU runs can be read against.
func compareVLPasses(t *testing.T, cpu, dev []probe.Pass, tol float64) {
	t.Helper()
	if len(cpu) != len(dev) {
		t.Errorf("scoring passes: cpu %d, device %d", len(cpu), len(dev))
	}
	firstLogp := -1
	for k := range min(len(cpu), len(dev)) {
		a, b := cpu[k], dev[k]
		name := passName(k, b)
		if d := inputDiff(a, b); d != "" {
			t.Errorf("%s: the host inputs differ between the cpu and the device run: %s", name, d)
			continue
		}
		s := b.Samples.([]qwenvl.Sample)
		var pix [][]byte
		for _, row := range b.Pixels {
			pix = append(pix, row...)
		}
		var vals [][]float32
		var ids [][]int32
		for _, x := range s {
			vals, ids = append(vals, x.Images.Values), append(ids, x.IDs)
		}
		d := relDiff(b.LogProbs, a.LogProbs)
		t.Logf("%s: inputs identical (ids %v, pixels %016x, pixel_values %016x, tokens %016x); log-probs device vs cpu %.3g",
			name, b.IDs, hashOf(pix...), hashOf(vals...), hashOf(ids...), d)
		if !(d <= tol) && firstLogp < 0 {
			firstLogp = k
			t.Errorf("%s: the first pass whose log-probs differ (%.3g > %.3g) on identical inputs", name, d, tol)
		}
	}
}

// stageValues are a forward's intermediate results on the host, in the order computed.
type stageValues struct {
	names  []string
	values [][]float32
}

// traced runs score with probe.Stage recording every stage.
func traced(t *testing.T, score func() (*qwenvl.Scores, error)) (stageValues, [][]float32) {
	t.Helper()
	var sv stageValues
	var err error
	probe.Stage = sv.recorder(&err)
	defer func() { probe.Stage = nil }()
	s, serr := score()
	require.NoError(t, serr)
	require.NoError(t, err)
	return sv, s.LogProbs
}

// bisectVLStages runs the inputs of pass p (the device run's) through a fresh model loaded by
// cfg on the host and on device 0, in the order given (the loop's: the plain pass before the
// perturbed one), and reports the first stage (pixel upload, patch embedding, each vision
// block's q/k/v, attention, residual and output, the merger, the token and the scattered
// embeddings, each language-model layer's attention and output, the final norm, the
// log-probs) whose device values differ from the host's by more than tol of their scale. It
// also compares the fresh models' log-probs with those the runs logged (run: the cpu run's and
// the device run's), which separates the inputs and kernels (fresh models differ too) from
// the state of the run (only the run's device pass differs).
func bisectVLStages(t *testing.T, cfg Config, tol float64, passes []struct{ cpu, dev probe.Pass }) {
	t.Helper()
	b, err := cuda.New(0)
	require.NoError(t, err)
	defer func() { _ = b.Close() }()
	models := map[string]*qwenvl.Model{}
	for _, on := range []struct {
		name string
		b    tensor.Backend
	}{{"cpu", tensor.CPU()}, {"device", b}} {
		m, err := cfg.loadVL(on.b)
		require.NoError(t, err)
		if mc := cfg.Worker.Actor.Model; mc.LoraRank > 0 {
			require.NoError(t, m.AddLoRA(mc.loraConfig()))
		}
		models[on.name] = m
	}
	freshDev := make([][][]float32, len(passes))
	for k, p := range passes {
		name := "fresh models, " + kindOf(p.dev)
		samples := p.dev.Samples.([]qwenvl.Sample)
		run := func(m *qwenvl.Model) (stageValues, [][]float32) {
			return traced(t, func() (*qwenvl.Scores, error) {
				return m.Score(samples, p.dev.Completions, p.dev.Temperature, false)
			})
		}
		hs, hl := run(models["cpu"])
		ds, dl := run(models["device"])
		freshDev[k] = dl
		require.Equal(t, hs.names, ds.names, "%s: the stages the host and the device ran", name)
		first := ""
		var order []string // the stages' names without the image, the largest over the images
		worst := map[string]float64{}
		for i, n := range hs.names {
			d := relDiff([][]float32{ds.values[i]}, [][]float32{hs.values[i]})
			if !(d <= tol) && first == "" {
				first = fmt.Sprintf("%s (%.3g > %.3g)", n, d, tol)
			}
			if _, short, ok := strings.Cut(n, " vision."); ok {
				n = "vision." + short
			}
			if _, seen := worst[n]; !seen {
				order = append(order, n)
			}
			if w, seen := worst[n]; !seen || !(d <= w) {
				worst[n] = d
			}
		}
		var line []string
		for _, n := range order {
			line = append(line, fmt.Sprintf("%s %.2g", strings.TrimPrefix(strings.TrimPrefix(n, "vision."), "lm."), worst[n]))
		}
		lp := relDiff(dl, hl)
		line = append(line, fmt.Sprintf("log-probs %.2g", lp))
		if !(lp <= tol) && first == "" {
			first = fmt.Sprintf("log-probs (%.3g > %.3g)", lp, tol)
		}
		t.Logf("%s: device vs cpu by stage (the tower's over its %d images, then the language model's): %s", name, len(samples), strings.Join(line, ", "))
		if first != "" {
			t.Errorf("%s: the first stage whose device values differ from the host's: %s", name, first)
		}
		t.Logf("%s: log-probs: fresh device vs the device run's %.3g, fresh cpu vs the cpu run's %.3g, the device run's vs fresh cpu %.3g",
			name, relDiff(dl, p.dev.LogProbs), relDiff(hl, p.cpu.LogProbs), relDiff(p.dev.LogProbs, hl))
	}
	// The run generates before it scores: the same passes after a greedy Generate of the first
	// pass's prompts on the device model must give the same bits (the kernels are
	// deterministic); a difference is state a generation leaves (a cache, a reused buffer).
	first := passes[0].dev
	var prompts []qwenvl.Sample
	for i, s := range first.Samples.([]qwenvl.Sample) {
		q := s
		q.IDs = s.IDs[:len(s.IDs)-first.Completions[i]]
		prompts = append(prompts, q)
	}
	rngs := make([]*rand.Rand, len(prompts))
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(1, uint64(i)))
	}
	_, err = models["device"].Generate(prompts, hflm.Sampling{MaxNewTokens: 4}, rngs)
	require.NoError(t, err)
	for k, p := range passes {
		s, err := models["device"].Score(p.dev.Samples.([]qwenvl.Sample), p.dev.Completions, p.dev.Temperature, false)
		require.NoError(t, err)
		d := relDiff(s.LogProbs, freshDev[k])
		t.Logf("fresh device model, %s: log-probs after a Generate vs before: %.3g", kindOf(p.dev), d)
		if d != 0 {
			t.Errorf("fresh device model, %s: a Generate changed the log-probs by %.3g: state the generation left", kindOf(p.dev), d)
		}
	}
}

// logPerception logs the perception metrics of both runs' first step in full: the host's own
// values, which a GPU machine's CPU run (another CPU, other kernels) can be set against.
func logPerception(t *testing.T, cpu, dev string) {
	t.Helper()
	for _, r := range []struct{ name, dir string }{{"cpu", cpu}, {"device", dev}} {
		ls, err := ReadMetrics(filepath.Join(r.dir, "metrics.jsonl"))
		require.NoError(t, err)
		for _, l := range ls {
			var parts []string
			for _, k := range []string{"actor/sensitivity_score_mean", "actor/dynamic_scaling_max", "actor/global_sensitivity_score_max", "actor/grad_norm"} {
				if v := l.Metrics[k]; v != nil {
					parts = append(parts, fmt.Sprintf("%s %.9g", k, *v))
				}
			}
			if len(parts) > 0 {
				t.Logf("%s run, step %d: %s", r.name, l.Step, strings.Join(parts, ", "))
			}
		}
	}
}

// compareShaping runs the step's token selection and advantage shaping (tprl.Config.Apply of
// the run's configuration: the perception filter, the sensitivity scores, the scaling factors
// and their metrics) on the device run's own per-token tensors on the host and on the device:
// the perception metrics' last stage, after the perception score. A difference here with
// equal perception scores is the tprl kernels', not the model's.
func compareShaping(t *testing.T, cfg Config, s stepTokens, tol float64) {
	t.Helper()
	tc := cfg.Tokens()
	if !tc.EnablePerceptionFiltering && !tc.Shaping() {
		return
	}
	b, err := cuda.New(0)
	require.NoError(t, err)
	defer func() { _ = b.Close() }()
	apply := func(on tensor.Backend) (*tprl.Result, map[string][]float32) {
		put := func(v []float32) *tensor.Tensor {
			x := tensor.Must(tensor.FromFloat32(slices.Clone(v), s.rows, s.cols))
			if on != tensor.CPU() {
				x = tensor.Must(tensor.To(on, x))
			}
			return x
		}
		res, err := tc.Apply(tprl.Batch{ResponseMask: put(s.mask), Entropy: put(s.entropy), PerceptionScore: put(s.perception),
			Advantages: put(s.advantages), Random: tprl.RandomKey{Seed: 1}})
		require.NoError(t, err)
		out := map[string][]float32{}
		for name, x := range map[string]*tensor.Tensor{"loss token mask": res.LossTokenMask, "perception mask": res.PerceptionMask,
			"advantages": res.Advantages, "sensitivity": res.Sensitivity, "scaling factors": res.ScalingFactors} {
			if x != nil {
				out[name] = devicetest.Downloaded(t, x)
			}
		}
		return res, out
	}
	h, ht := apply(tensor.CPU())
	d, dt := apply(b)
	defer func() { _ = d.Release() }()
	var line []string
	for _, k := range slices.Sorted(maps.Keys(h.Metrics)) {
		hv, dv := h.Metrics[k], d.Metrics[k]
		worst := 0.0
		if len(hv) != len(dv) {
			worst = math.Inf(1)
		}
		for i := range min(len(hv), len(dv)) {
			if x := math.Abs(dv[i]-hv[i]) / (1 + math.Abs(hv[i])); !(x <= worst) {
				worst = x
			}
		}
		line = append(line, fmt.Sprintf("%s %.2g", strings.TrimPrefix(k, "actor/"), worst))
		if !(worst <= tol) {
			t.Errorf("tprl.Config.Apply on the device run's tensors: %s cpu %v, device %v", k, hv, dv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(ht)) {
		d := relDiff([][]float32{dt[k]}, [][]float32{ht[k]})
		line = append(line, fmt.Sprintf("%s %.2g", k, d))
		if !(d <= tol) {
			t.Errorf("tprl.Config.Apply on the device run's tensors: %s differ by %.3g", k, d)
		}
	}
	t.Logf("tprl.Config.Apply on the device run's tensors, device vs cpu: %s", strings.Join(line, ", "))
}
