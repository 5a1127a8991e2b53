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
// each step, and the wall time rank 0 waits in Reduce (the reduction the backward did not
// hide).
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
	step := func(overlap bool) (cpu, wall, wait float64) {
		runtime.GC()
		c0, _ := cputime.Process()
		w0 := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, size)
		waits := make([]float64, size)
		for r := range size {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, m, g := context.Background(), ms[r], gs[r]
				s, err := m.score(prompts, comps, 1, true, 0)
				if err != nil {
					errs[r] = err
					return
				}
				if overlap {
					final, err := g.Overlap(ctx, comms[r], 1.0/size)
					if err != nil {
						errs[r] = err
						return
					}
					m.final = final
				}
				err = s.Backward(dlp, nil)
				m.final = nil
				if err == nil {
					err = g.Collect()
				}
				t0 := time.Now()
				if err == nil {
					_, err = g.Reduce(ctx, comms[r], 1.0/size)
				}
				waits[r], errs[r] = time.Since(t0).Seconds(), err
			}()
		}
		wg.Wait()
		c1, _ := cputime.Process()
		for _, err := range errs {
			require.NoError(t, err)
		}
		for _, m := range ms {
			m.ZeroGrads()
		}
		return (c1 - c0).Seconds(), time.Since(w0).Seconds(), waits[0]
	}
	step(false) // the transposed panels and the reduction's buffers, once
	names := []string{"after", "overlapped"}
	res := map[string][3][]float64{}
	for range reps {
		for i, name := range names {
			cpu, wall, wait := step(i == 1)
			v := res[name]
			v[0], v[1], v[2] = append(v[0], cpu), append(v[1], wall), append(v[2], wait)
			res[name] = v
			t.Logf("%-10s %6.2f CPU-s %6.2f wall-s, rank 0 waits %5.2f s in Reduce (%d buckets early)", name, cpu, wall, wait, gs[0].OverlappedBuckets())
		}
	}
	med := func(x []float64) float64 {
		x = slices.Clone(x)
		slices.Sort(x)
		return x[len(x)/2]
	}
	for _, name := range names {
		v := res[name]
		t.Logf("median %-10s %6.2f CPU-s %6.2f wall-s, Reduce wait %5.2f s", name, med(v[0]), med(v[1]), med(v[2]))
	}
	a, o := res["after"], res["overlapped"]
	var rc, rw []float64
	for i := range reps {
		rc, rw = append(rc, o[0][i]/a[0][i]), append(rw, o[1][i]/a[1][i])
	}
	t.Logf("overlapped / after, per round: CPU %.3f (median %.3f), wall %.3f (median %.3f)", rc, med(rc), rw, med(rw))
}
