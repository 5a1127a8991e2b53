package hflm

import (
	"context"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/internal/cputime"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// TestMeasureOverlap is docs/2026-11-memory.md's overlap measurement (off by default: two
// replicas of Qwen2.5-0.5B's shapes with HFLM_BENCH_LAYERS layers, gigabytes): HFLM_OVERLAP=1.
// Two in-process ranks each run the forward and backward of measureBatch and the bucketed
// reduction of the gradient (25 MiB buckets), after the backward or during it, interleaved
// for HFLM_OVERLAP_REPS rounds (3). It logs the process's CPU-seconds and the wall time of
// each step and of its Reduce once both backwards are done (the reduction the backward did
// not hide).
func TestMeasureOverlap(t *testing.T) {
	if os.Getenv("HFLM_OVERLAP") == "" {
		t.Skip("set HFLM_OVERLAP=1 (docs/2026-11-memory.md)")
	}
	reps := 3
	if s := os.Getenv("HFLM_OVERLAP_REPS"); s != "" {
		var err error
		reps, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	const size = 2
	comms, err := collective.NewGroup(size)
	require.NoError(t, err)
	var ms [size]*Model
	var gs [size]*loop.BucketedGradients
	for r := range size {
		ms[r] = build05B(t)
		ps, err := ms[r].Params()
		require.NoError(t, err)
		gs[r], err = loop.NewBucketedGradients(ps, loop.ReduceConfig{}, r, size)
		require.NoError(t, err)
	}
	prompts, comps, dlp := measureBatch(4, ms[0].Config.VocabSize)
	t.Logf("Qwen2.5-0.5B shapes, %d of 24 layers, %d ranks in one process, %d buckets of 25 MiB; GOMAXPROCS %d",
		ms[0].Config.NumHiddenLayers, size, gs[0].Buckets(), runtime.GOMAXPROCS(0))
	// step runs the two ranks' forward and backward (phase 0), then, once both are done,
	// their Reduce (phase 1), and returns each phase's process CPU-seconds and wall time.
	step := func(overlap bool) (cpu, wall [2]float64) {
		runtime.GC()
		errs := make([]error, size)
		phase := func(p int, fn func(r int) error) {
			c0, _ := cputime.Process()
			w0 := time.Now()
			var wg sync.WaitGroup
			for r := range size {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if errs[r] == nil {
						errs[r] = fn(r)
					}
				}()
			}
			wg.Wait()
			c1, _ := cputime.Process()
			cpu[p], wall[p] = (c1 - c0).Seconds(), time.Since(w0).Seconds()
		}
		ctx := context.Background()
		phase(0, func(r int) error {
			m, g := ms[r], gs[r]
			s, err := m.score(prompts, comps, 1, true, 0)
			if err != nil {
				return err
			}
			if overlap {
				if m.final, err = g.Overlap(ctx, comms[r], 1.0/size); err != nil {
					return err
				}
			}
			err = s.Backward(dlp, nil)
			m.final = nil
			if err == nil {
				err = g.Collect()
			}
			return err
		})
		phase(1, func(r int) error {
			_, err := gs[r].Reduce(ctx, comms[r], 1.0/size)
			return err
		})
		for _, err := range errs {
			require.NoError(t, err)
		}
		for _, m := range ms {
			m.ZeroGrads()
		}
		return cpu, wall
	}
	step(false) // the transposed panels and the reduction's buffers, once
	names := []string{"after", "overlapped"}
	// per mode: CPU-s and wall-s of the step, and of its phase 1 (what is left of the reduction)
	res := map[string][4][]float64{}
	for range reps {
		for i, name := range names {
			cpu, wall := step(i == 1)
			v := res[name]
			v[0], v[1] = append(v[0], cpu[0]+cpu[1]), append(v[1], wall[0]+wall[1])
			v[2], v[3] = append(v[2], cpu[1]), append(v[3], wall[1])
			res[name] = v
			t.Logf("%-10s step %6.2f CPU-s %6.2f wall-s; forward+backward %6.2f CPU-s %6.2f wall-s, then Reduce %5.2f CPU-s %5.2f wall-s (%d buckets started early)",
				name, cpu[0]+cpu[1], wall[0]+wall[1], cpu[0], wall[0], cpu[1], wall[1], gs[0].OverlappedBuckets())
		}
	}
	med := func(x []float64) float64 {
		x = slices.Clone(x)
		slices.Sort(x)
		return x[len(x)/2]
	}
	for _, name := range names {
		v := res[name]
		t.Logf("median %-10s step %6.2f CPU-s %6.2f wall-s; Reduce after the backward %5.2f CPU-s %5.2f wall-s", name, med(v[0]), med(v[1]), med(v[2]), med(v[3]))
	}
	a, o := res["after"], res["overlapped"]
	var rc, rw []float64
	for i := range reps {
		rc, rw = append(rc, o[0][i]/a[0][i]), append(rw, o[1][i]/a[1][i])
	}
	t.Logf("overlapped / after, per round: CPU %.3f (median %.3f), wall %.3f (median %.3f)", rc, med(rc), rw, med(rw))
}
