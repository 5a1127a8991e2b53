package cu

import (
	"math"
	"slices"
	"testing"
)

// The opt-in modes, each with the bug it is for planted: hidden by the default emulation,
// exposed as a GPU would expose it.

// TestAllocReuse: under CUEMU_ALLOC=reuse a freed range is handed out again, the last freed
// first, with the bytes it held; by default a new allocation reads 0xff. The planted bug: a
// cache keyed by a device address (here, of a buffer's contents) serves the freed buffer's
// entry for the new one.
func TestAllocReuse(t *testing.T) {
	device(t)
	for _, reuse := range []bool{false, true} {
		config.reuse = reuse
		a := upload(t, []float32{1, 2, 3, 4})
		cache := map[DevicePtr][]float32{a: download[float32](t, a, 4)}
		if err := MemFree(a); err != nil {
			t.Fatal(err)
		}
		b := alloc(t, 16)
		got := download[float32](t, b, 4)
		_, stale := cache[b]
		if reuse {
			if b != a || !slices.Equal(got, []float32{1, 2, 3, 4}) || !stale {
				t.Errorf("reuse: new allocation %#x (freed %#x) holds %v, cache hit %v; want the freed range, its bytes and a stale hit", uintptr(b), uintptr(a), got, stale)
			}
		} else if !math.IsNaN(float64(got[0])) {
			t.Errorf("default: a new allocation holds %v, want 0xff bytes (NaN)", got)
		}
		// A range more than twice the request is not handed out for it.
		if err := MemFree(b); err != nil {
			t.Fatal(err)
		}
		if c := alloc(t, 4); reuse && c == b {
			t.Errorf("reuse: a 16-byte range handed out for 4 bytes")
		}
	}
	config.reuse = false
}

// TestSharedStale: cuemu_selftest_leftover reads in block 1 shared memory only block 0 wrote:
// by default the NaN fill reaches fmaxf and vanishes (0); under CUEMU_SHARED=stale block 1
// reads block 0's 7, as on a GPU.
func TestSharedStale(t *testing.T) {
	m := device(t)
	f := getFunction(t, m, "cuemu_selftest_leftover")
	for _, c := range []struct {
		stale bool
		want  float32
	}{{false, 0}, {true, 7}} {
		config.staleShared = c.stale
		out := alloc(t, 8)
		launch(t, f, 2, 32, args(uint64(out)))
		if got := download[float32](t, out, 2); got[0] != 7 || got[1] != c.want {
			t.Errorf("stale shared memory %v: blocks read %v, want [7 %v]", c.stale, got, c.want)
		}
	}
	config.staleShared = false
}

// TestDeferred: under CUEMU_ASYNC=deferred a stream's launches, memsets and device copies run
// at a synchronising call. The planted bug: a download after a launch on a non-blocking stream
// without synchronising it reads the value from before the launch (the legacy stream's copy
// does not wait for a non-blocking stream); by default it reads the result. A blocking stream's
// work is waited for by the copy; cuMemFree waits for all of it.
func TestDeferred(t *testing.T) {
	m := device(t)
	fma := getFunction(t, m, "cuemu_selftest_fma")
	defer func() { config.deferred = false }()
	for _, deferred := range []bool{false, true} {
		config.deferred = deferred
		for _, flags := range []StreamFlags{DefaultStream, NonBlocking} {
			s, err := MakeStream(flags)
			if err != nil {
				t.Fatal(err)
			}
			out := upload(t, []float32{0, 0})
			a := args(uint64(out), uint64(math.Float32bits(2)), uint64(math.Float32bits(3)), uint64(math.Float32bits(1)))
			if err := fma.Launch(1, 1, 1, 32, 1, 1, 0, s, a); err != nil {
				t.Fatal(err)
			}
			if err := MemcpyDtoDAsync(out+4, out, 4, s); err != nil {
				t.Fatal(err)
			}
			got := download[float32](t, out, 2)
			want := []float32{7, 7}
			if deferred && flags == NonBlocking {
				want = []float32{0, 0} // the planted bug shows
			}
			if !slices.Equal(got, want) {
				t.Errorf("deferred %v, stream flags %d: unsynchronised download %v, want %v", deferred, flags, got, want)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if got := download[float32](t, out, 2); !slices.Equal(got, []float32{7, 7}) {
				t.Errorf("deferred %v, stream flags %d: after synchronising %v, want [7 7]", deferred, flags, got)
			}
			// cuMemFree runs the queued work first (here a memset of the freed buffer).
			if err := MemsetD8Async(out, 0, 8, s); err != nil {
				t.Fatal(err)
			}
			if err := MemFree(out); err != nil {
				t.Fatal(err)
			}
		}
	}
}
