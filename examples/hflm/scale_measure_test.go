package hflm

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/internal/cputime"
	"github.com/mtrl-go/mtrl/tensor"
)

// The measurements of docs/2026-11-memory.md, on Qwen2.5-0.5B's shapes with random weights and
// HFLM_BENCH_LAYERS layers (bench05B). They are off by default (minutes, gigabytes):
//
//	HFLM_SCALE=kept     activation bytes a training pass keeps, per mode (exact counts)
//	HFLM_SCALE=rss:CFG  two training steps in this process, then the second's peak RSS (one
//	                    process per CFG: comma-separated fp32|bf16, ckpt, padded, budget=N;
//	                    run with a low GOGC so that the peak is live memory, not garbage)
//	HFLM_SCALE=time     padded / packed step time per CPU-second, interleaved

// measureBatch is rows (HFLM_SCALE_ROWS, default 4) prompts of 64–128 tokens with short answers (16–96 tokens) in T = 512
// response columns.
func measureBatch(rows, vocab int) (prompts, comps [][]int32, dlp [][]float32) {
	r := rand.New(rand.NewPCG(11, 12))
	for range rows {
		p, c := make([]int32, 64+r.IntN(65)), make([]int32, 16+r.IntN(81))
		for i := range p {
			p[i] = int32(r.IntN(vocab))
		}
		g := make([]float32, len(c))
		for i := range c {
			c[i] = int32(r.IntN(vocab))
			g[i] = float32(r.NormFloat64()) / 1000
		}
		prompts, comps, dlp = append(prompts, p), append(comps, c), append(dlp, g)
	}
	return prompts, comps, dlp
}

const measureT = 512

// keptBytes is what a training pass holds for its backward: the layers' activations, the final
// norm's input, the LM head's inputs and outputs and the packed ids.
func keptBytes(s *Scores) int64 {
	n := int64(0)
	add := func(t *tensor.Tensor) {
		if t != nil {
			n += int64(t.Len() * t.DType().Size())
		}
	}
	for _, l := range s.a.layers {
		for _, t := range []*tensor.Tensor{l.xIn, l.h1, l.q, l.k, l.v, l.attn, l.lse, l.xMid, l.h2, l.gate, l.up, l.act} {
			add(t)
		}
	}
	for _, t := range []*tensor.Tensor{s.a.xLast, s.a.hidden, s.lmIn.Hidden, s.lmIn.Targets, s.lp, s.ent, s.a.in.ids, s.a.in.pos, s.a.in.cu} {
		add(t)
	}
	return n
}

// scaleMode is one configuration of a measurement.
type scaleMode struct {
	dt           tensor.DType
	ckpt, padded bool
	budget       int // tokens per micro-batch (0: the whole batch in one)
	name         string
}

func parseMode(s string) (scaleMode, error) {
	m := scaleMode{dt: tensor.Float32, name: s}
	for _, f := range strings.Split(s, ",") {
		switch {
		case f == "fp32":
		case f == "bf16":
			m.dt = tensor.BFloat16
		case f == "ckpt":
			m.ckpt = true
		case f == "padded":
			m.padded = true
		case strings.HasPrefix(f, "budget="):
			n, err := strconv.Atoi(strings.TrimPrefix(f, "budget="))
			if err != nil {
				return m, err
			}
			m.budget = n
		default:
			return m, fmt.Errorf("unknown mode %q", f)
		}
	}
	return m, nil
}

// step runs the forward and (with backward) the backward of the batch, in token-budget
// micro-batches when set, and returns the last pass's scores.
func (md scaleMode) step(t testing.TB, m *Model, prompts, comps [][]int32, dlp [][]float32, backward bool) *Scores {
	require.NoError(t, m.SetMixedPrecision(md.dt))
	m.SetCheckpointing(md.ckpt)
	padT := 0
	if md.padded {
		padT = measureT
	}
	var last *Scores
	for lo := 0; lo < len(prompts); {
		hi, tokens := lo, 0
		for hi < len(prompts) && (hi == lo || md.budget == 0 || tokens+len(prompts[hi])+len(comps[hi]) <= md.budget) {
			tokens += len(prompts[hi]) + len(comps[hi])
			hi++
		}
		s, err := m.score(prompts[lo:hi], comps[lo:hi], 1, true, padT)
		require.NoError(t, err)
		if backward {
			require.NoError(t, s.Backward(dlp[lo:hi], nil))
		}
		last, lo = s, hi
	}
	return last
}

// vmKiB reads a field of /proc/self/status in KiB.
func vmKiB(t testing.TB, field string) int64 {
	data, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, field+":") {
			v, err := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			require.NoError(t, err)
			return v
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

func TestMeasureScale(t *testing.T) {
	what := os.Getenv("HFLM_SCALE")
	if what == "" {
		t.Skip("set HFLM_SCALE=kept, rss:MODE or time (docs/2026-11-memory.md)")
	}
	m := bench05B(t)
	var err error
	layers := m.Config.NumHiddenLayers
	rows := 4
	if s := os.Getenv("HFLM_SCALE_ROWS"); s != "" {
		rows, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	prompts, comps, dlp := measureBatch(rows, m.Config.VocabSize)
	tokens, answers, longest := 0, 0, 0
	for i := range prompts {
		tokens += len(prompts[i]) + len(comps[i])
		answers += len(comps[i])
		longest = max(longest, len(prompts[i]))
	}
	t.Logf("Qwen2.5-0.5B shapes, %d of 24 layers; %d rows, %d tokens packed (%d answer tokens), %d padded (T = %d)", layers, rows, tokens, answers, rows*(longest+measureT), measureT)
	switch {
	case what == "kept":
		for _, s := range []string{"fp32", "fp32,ckpt", "bf16", "bf16,ckpt", "fp32,padded", "fp32,padded,ckpt"} {
			md, err := parseMode(s)
			require.NoError(t, err)
			sc := md.step(t, m, prompts, comps, dlp, false) // what the forward kept
			t.Logf("kept %-18s %8.1f MiB", s, float64(keptBytes(sc))/(1<<20))
		}
	case strings.HasPrefix(what, "rss:"):
		md, err := parseMode(strings.TrimPrefix(what, "rss:"))
		require.NoError(t, err)
		opt, _, err := m.Training(0)
		require.NoError(t, err)
		// A first step allocates what every step reuses (AdamW's moments, the weights'
		// transposed panels); the second is measured.
		md.step(t, m, prompts, comps, dlp, true)
		_, err = opt.Step(1e-6, 1)
		require.NoError(t, err)
		m.ZeroGrads()
		runtime.GC()
		debug.FreeOSMemory()
		mib := func(kib int64) float64 { return float64(kib) / 1024 }
		resetPeak := func() { // VmHWM := VmRSS
			require.NoError(t, os.WriteFile("/proc/self/clear_refs", []byte("5"), 0))
		}
		before := vmKiB(t, "VmRSS")
		resetPeak()
		md.step(t, m, prompts, comps, dlp, true)
		pass := vmKiB(t, "VmHWM")
		runtime.GC()
		debug.FreeOSMemory()
		beforeOpt := vmKiB(t, "VmRSS")
		resetPeak()
		_, err = opt.Step(1e-6, 1)
		require.NoError(t, err)
		step := vmKiB(t, "VmHWM")
		t.Logf("rss %-22s before %7.1f MiB; forward+backward peak %7.1f (+%.1f); AdamW and repack peak %7.1f (+%.1f over %.1f)",
			md.name, mib(before), mib(pass), mib(pass-before), mib(step), mib(step-beforeOpt), mib(beforeOpt))
	case what == "time":
		modes := []string{"fp32", "fp32,padded"}
		if extra := os.Getenv("HFLM_SCALE_MODES"); extra != "" {
			modes = strings.Split(extra, ";")
		}
		reps := 3
		if s := os.Getenv("HFLM_SCALE_REPS"); s != "" {
			reps, _ = strconv.Atoi(s)
		}
		cpu := map[string][]float64{}
		for range reps {
			for _, s := range modes { // interleaved: one of each per round
				md, err := parseMode(s)
				require.NoError(t, err)
				// Switching the dtype repacks the weights: not part of the step. (The step's
				// backward packs the transposed weights after a switch, as after every
				// optimizer step's Repack in training.)
				require.NoError(t, m.SetMixedPrecision(md.dt))
				c0, _ := cputime.Process()
				w0 := time.Now()
				md.step(t, m, prompts, comps, dlp, true)
				c1, _ := cputime.Process()
				cpu[s] = append(cpu[s], (c1 - c0).Seconds())
				t.Logf("%-16s %6.2f CPU-s %6.2f wall-s", s, (c1 - c0).Seconds(), time.Since(w0).Seconds())
				m.ZeroGrads()
			}
		}
		for _, s := range modes[1:] {
			var ratios []float64
			for i := range reps {
				ratios = append(ratios, cpu[s][i]/cpu[modes[0]][i])
			}
			slices.Sort(ratios)
			t.Logf("%s / %s per CPU-second, per round: %.2f (median %.2f)", s, modes[0], ratios, ratios[reps/2])
		}
		for _, s := range modes {
			slices.Sort(cpu[s])
			t.Logf("median %-16s %6.2f CPU-s", s, cpu[s][reps/2])
		}
	default:
		t.Fatalf("HFLM_SCALE=%q: want kept, rss:MODE or time", what)
	}
}
