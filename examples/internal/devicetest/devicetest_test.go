package devicetest

import (
	"math"
	"runtime"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// fatal records a Fatalf and, as testing.T does, ends the goroutine.
type fatal struct {
	testing.TB
	failed bool
}

func (f *fatal) Helper() {}
func (f *fatal) Fatalf(string, ...any) {
	f.failed = true
	runtime.Goexit()
}

// TestCloseTo: the worst difference is relative to 1 + max|want|; beyond tol, a length
// mismatch or a NaN fails.
func TestCloseTo(t *testing.T) {
	want := []float32{1, -3, 0.5}
	got := []float32{1, -3 + 0.002, 0.5 - 0.001}
	if w := CloseTo(t, "x", got, want, 1e-3); math.Abs(w-0.002/4) > 1e-7 {
		t.Fatalf("worst %v, want %v", w, 0.002/4)
	}
	for _, c := range []struct {
		got []float32
		tol float64
	}{{got, 1e-4}, {got[:2], 1}, {[]float32{1, float32(math.NaN()), 0.5}, 1}} {
		f := &fatal{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			CloseTo(f, "x", c.got, want, c.tol)
		}()
		<-done
		if !f.failed {
			t.Fatalf("%v against %v within %v passed", c.got, want, c.tol)
		}
	}
}

// TestDownloaded: a CPU tensor's values come back as they are; nil gives nil.
func TestDownloaded(t *testing.T) {
	x, err := tensor.FromFloat32([]float32{1, -2.5, 3}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := Downloaded(t, x); len(got) != 3 || got[0] != 1 || got[1] != -2.5 || got[2] != 3 {
		t.Fatalf("Downloaded = %v, want [1 -2.5 3]", got)
	}
	if got := Downloaded(t, nil); got != nil {
		t.Fatalf("Downloaded(nil) = %v, want nil", got)
	}
}
