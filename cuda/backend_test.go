//go:build cuda

package cuda_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
)

// TestReleaseWhileQueued releases storage while other goroutines queue kernels and copies that
// use it. Every call must return (a release that waited for the backend's thread while holding
// a lock the thread needed used to deadlock here), with success or ErrClosed, and never touch
// freed memory (the emulator panics on that; run it with -race too).
func TestReleaseWhileQueued(t *testing.T) {
	b := device(t)
	const n = 4096
	vals := make([]float32, n)
	for round := range 20 {
		x := up(t, b, vals, n)
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := tensor.Must(tensor.New(b, tensor.Float32, n))
				defer d.Release()
				for range 8 {
					err := divergence.Penalty(d, x, x, divergence.KL)
					if err == nil {
						_, err = tensor.To(tensor.CPU(), x)
					}
					if err == nil {
						err = tensor.CopyInto(d, x)
					}
					if err != nil && !errors.Is(err, tensor.ErrClosed) {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.Gosched()
			if err := x.Release(); err != nil {
				errs <- err
			}
		}()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
		if _, err := tensor.To(tensor.CPU(), x); !errors.Is(err, tensor.ErrClosed) {
			t.Fatalf("round %d: reading released storage: %v, want ErrClosed", round, err)
		}
	}
	// The backend is still usable.
	y := up(t, b, []float32{1, 2, 3}, 3)
	if got := host(t, y); got[2] != 3 {
		t.Fatalf("after the releases: %v", got)
	}
}

// TestNoLeakedTemporaries runs the token-perception update (Prepare, MicroBatch, Config.Apply)
// on the device and checks that once the caller has released what it owns, the backend holds
// exactly the storages it held before: no temporary is left for the garbage collector.
func TestNoLeakedTemporaries(t *testing.T) {
	b := device(t)
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // a finalizer would hide a leak
	const rows, cols, micro = 8, 96, 4
	r := rand.New(rand.NewPCG(5, 6))
	old, aug, logp := randn(r, rows*cols, 1), randn(r, rows*cols, 1), randn(r, rows*cols, 1)
	for i := range old {
		old[i] = -float32(math.Abs(float64(old[i])))
		aug[i] = old[i] - float32(math.Abs(float64(aug[i])))*0.1
		logp[i] = old[i] + logp[i]*0.01
	}
	adv, ent := randn(r, rows*cols, 1), randn(r, rows*cols, 1)
	m := mask01(r, rows*cols, 0.9)
	mask, oldT, augT, advT := up(t, b, m, rows, cols), up(t, b, old, rows, cols), up(t, b, aug, rows, cols), up(t, b, adv, rows, cols)
	logpT, entT := up(t, b, logp, rows, cols), up(t, b, ent, rows, cols)
	grad := tensor.Must(tensor.New(b, tensor.Float32, rows, cols))
	_, before := b.Allocated()
	cfg := tprl.UpdateConfig{
		Tokens: tprl.Config{EnableEntropyFiltering: true, TopPEntropyTokens: 0.5, EnablePerceptionFiltering: true,
			TopPPerceptionTokens: 0.4, EnableTrajectoryReweighting: true, TrajectoryScalingMin: 0.8},
		Policy: ppo.DefaultPolicyConfig(ppo.Vanilla),
	}
	rowsOf := func(x *tensor.Tensor, lo, hi int) *tensor.Tensor { return tensor.Must(x.Rows(lo, hi)) }
	for range 3 {
		upd, err := cfg.Prepare(tprl.MiniBatch{ResponseMask: mask, OldLogProbs: oldT, AugLogProbs: augT, Advantages: advT})
		if err != nil {
			t.Fatal(err)
		}
		for lo := 0; lo < rows; lo += micro {
			res, err := upd.MicroBatch(rowsOf(grad, lo, lo+micro), tprl.MicroInputs{LogProbs: rowsOf(logpT, lo, lo+micro), Entropy: rowsOf(entT, lo, lo+micro)}, lo, lo+micro)
			if err != nil {
				t.Fatal(err)
			}
			if err := res.Release(); err != nil {
				t.Fatal(err)
			}
		}
		if err := upd.Release(); err != nil { // the mini-batch's perception score
			t.Fatal(err)
		}
		res, err := cfg.Tokens.Apply(tprl.Batch{ResponseMask: mask, Entropy: entT, OldLogProbs: oldT, AugLogProbs: augT, Advantages: advT, MicroBatchSize: micro})
		if err != nil {
			t.Fatal(err)
		}
		if err := res.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if _, after := b.Allocated(); after != before {
		t.Fatalf("%d device storages live before the updates, %d after", before, after)
	}
}

// TestTraffic: the backend counts every host<->device copy, tensor copies and a kernel's own
// result download (MaskedSum's two float64s) alike; device-to-device copies are not traffic.
func TestTraffic(t *testing.T) {
	b := device(t)
	b.ResetTraffic()
	x := up(t, b, make([]float32, 100), 100)             // 400 bytes up
	y := tensor.Must(tensor.New(b, tensor.Float32, 100)) // zeroed on the device: no copy
	if err := tensor.CopyInto(y, x); err != nil {        // device to device
		t.Fatal(err)
	}
	if _, err := tensor.To(tensor.CPU(), tensor.Must(y.Rows(0, 10))); err != nil { // 40 bytes down
		t.Fatal(err)
	}
	if _, _, err := tensor.MaskedSum(x, y); err != nil { // 16 bytes down
		t.Fatal(err)
	}
	u, d := b.Traffic()
	if u != (cuda.Traffic{Copies: 1, Bytes: 400, Largest: 400}) {
		t.Errorf("up: %+v, want 1 copy of 400 bytes", u)
	}
	if d.Copies < 2 || d.Bytes < 56 || d.Largest != 40 {
		t.Errorf("down: %+v, want the 40-byte download and the sum's 16 bytes at least", d)
	}
	b.ResetTraffic()
	if u, d := b.Traffic(); u != (cuda.Traffic{}) || d != (cuda.Traffic{}) {
		t.Errorf("after ResetTraffic: %+v, %+v", u, d)
	}
}

// TestPeak: Peak is the most bytes Allocated held at once since ResetPeak.
func TestPeak(t *testing.T) {
	b := device(t)
	b.ResetPeak()
	base, _ := b.Allocated()
	x := tensor.Must(tensor.New(b, tensor.Float32, 1000)) // +4000
	y := tensor.Must(tensor.New(b, tensor.Float32, 500))  // +2000
	if err := y.Release(); err != nil {
		t.Fatal(err)
	}
	z := tensor.Must(tensor.New(b, tensor.Float32, 100)) // +400, below the peak
	if p := b.Peak(); p != base+6000 {
		t.Errorf("Peak %d, want %d + 6000", p, base)
	}
	b.ResetPeak()
	if p, now := b.Peak(), base+4400; p != now {
		t.Errorf("after ResetPeak: Peak %d, want the %d bytes held", p, now)
	}
	_, _ = x.Release(), z.Release()
}
