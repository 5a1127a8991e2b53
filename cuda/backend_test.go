//go:build cuda

package cuda_test

import (
	"errors"
	"runtime"
	"sync"
	"testing"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/tensor"
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
