package cu

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// selftestPTX declares the kernels of selftest/selftest.cu as nvcc would (parameter types and
// launch bounds); the emulator reads nothing else from PTX.
const selftestPTX = `
.version 7.8
.target sm_80
.address_size 64
.visible .entry cuemu_selftest_reduce(.param .u64 out, .param .u64 in) .maxntid 256, 1, 1 { ret; }
.visible .entry cuemu_selftest_atomics(.param .u64 counts) { ret; }
.visible .entry cuemu_selftest_params(.param .u64 out, .param .f32 f, .param .u32 i, .param .u64 l, .param .u8 u8) { ret; }
.visible .entry cuemu_selftest_fma(.param .u64 out, .param .f32 x, .param .f32 y, .param .f32 z) { ret; }
.visible .entry cuemu_selftest_uninit(.param .u64 out) { ret; }
.visible .entry cuemu_selftest_order(.param .u64 out) { ret; }
.visible .entry cuemu_selftest_skip_barrier(.param .u64 out) { ret; }
.visible .entry cuemu_selftest_missing_lane(.param .u64 out) { ret; }
.visible .entry cuemu_selftest_deadlock(.param .u64 out) { ret; }
.visible .entry cuemu_selftest_oob(.param .u64 out, .param .u64 in, .param .u64 n) { ret; }
.visible .entry cuemu_selftest_stale(.param .u64 out) { ret; }
.visible .entry cuemu_selftest_shfl_idx(.param .u64 out) { ret; }
.visible .entry cuemu_selftest_mixed_shuffle(.param .u64 out) { ret; }
.visible .entry cuemu_selftest_gather(.param .u64 out) { ret; }
.visible .entry cuemu_selftest_leftover(.param .u64 out) .maxntid 32, 1, 1 { ret; }
`

// device opens a context current on the test's (locked) OS thread and loads the selftest module.
func device(t testing.TB) Module {
	t.Helper()
	runtime.LockOSThread()
	dev, err := GetDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := dev.MakeContext(SchedBlockingSync)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ctx.Destroy(); err != nil {
			t.Error(err)
		}
		runtime.UnlockOSThread()
	})
	m, err := LoadData(selftestPTX)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func getFunction(t testing.TB, m Module, name string) Function {
	t.Helper()
	f, err := m.Function(name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func alloc(t testing.TB, n int64) DevicePtr {
	t.Helper()
	p, err := MemAlloc(n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func upload[T any](t testing.TB, v []T) DevicePtr {
	t.Helper()
	n := int64(len(v)) * int64(unsafe.Sizeof(v[0]))
	p := alloc(t, n)
	if err := MemcpyHtoD(p, unsafe.Pointer(&v[0]), n); err != nil {
		t.Fatal(err)
	}
	return p
}

func download[T any](t *testing.T, p DevicePtr, n int) []T {
	t.Helper()
	out := make([]T, n)
	if err := MemcpyDtoH(unsafe.Pointer(&out[0]), p, int64(n)*int64(unsafe.Sizeof(out[0]))); err != nil {
		t.Fatal(err)
	}
	return out
}

// args widens each value to the 8-byte slot gorgonia.org/cu copies, as package cuda does.
func args(vs ...uint64) []unsafe.Pointer {
	out := make([]unsafe.Pointer, len(vs))
	for i := range vs {
		out[i] = unsafe.Pointer(&vs[i])
	}
	return out
}

func launch(t testing.TB, f Function, grid, block int, a []unsafe.Pointer) {
	t.Helper()
	if err := f.Launch(grid, 1, 1, block, 1, 1, 0, Stream{}, a); err != nil {
		t.Fatal(err)
	}
}

// mustPanic runs f and checks that it panics with a message containing every string of want.
func mustPanic(t *testing.T, f func(), want ...string) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Fatalf("no panic; want one containing %q", want)
		}
		for _, w := range want {
			if !strings.Contains(fmt.Sprint(r), w) {
				t.Fatalf("panic %q\nwant it to contain %q", r, w)
			}
		}
	}()
	f()
}

// inOrder runs f with the threads and blocks scheduled forward and in reverse. It stays on the
// calling goroutine (not subtests): the context is current on this goroutine's OS thread only.
func inOrder(f func(order string)) {
	old := config.reverse
	defer func() { config.reverse = old }()
	for _, reverse := range []bool{false, true} {
		config.reverse = reverse
		f(map[bool]string{false: "forward", true: "reverse"}[reverse])
	}
}

func TestBlockReduction(t *testing.T) {
	m := device(t)
	f := getFunction(t, m, "cuemu_selftest_reduce")
	const blocks, threads = 5, 256
	in := make([]float32, blocks*threads)
	want := make([]float64, blocks)
	for i := range in {
		in[i] = float32(i%37 + 1)
		want[i/threads] += float64(in[i])
	}
	inOrder(func(order string) {
		out := alloc(t, blocks*4*8)
		launch(t, f, blocks, threads, args(uint64(out), uint64(upload(t, in))))
		got := download[float64](t, out, blocks*4)
		for b := range blocks {
			for s, typ := range []string{"float", "double", "int", "unsigned"} {
				if got[4*b+s] != want[b] {
					t.Errorf("%s: block %d, %s shuffle: sum %v, want %v", order, b, typ, got[4*b+s], want[b])
				}
			}
		}
	})
}

func TestAtomics(t *testing.T) {
	m := device(t)
	counts := upload(t, []int32{0, math.MaxInt32})
	launch(t, getFunction(t, m, "cuemu_selftest_atomics"), 3, 128, args(uint64(counts)))
	if got := download[int32](t, counts, 2); got[0] != 384 || got[1] != 1000-383 {
		t.Fatalf("atomicAdd count %d (want 384), atomicMin %d (want %d)", got[0], got[1], 1000-383)
	}
}

func TestParameterWidths(t *testing.T) {
	m := device(t)
	f := getFunction(t, m, "cuemu_selftest_params")
	out := alloc(t, 4*8)
	minus7 := int64(-7)
	launch(t, f, 1, 32, args(uint64(out), uint64(math.Float32bits(1.5)), uint64(minus7), 1<<40, 200))
	if got := download[float64](t, out, 4); got[0] != 1.5 || got[1] != -7 || got[2] != 1<<40 || got[3] != 200 {
		t.Fatalf("kernel read %v, want [1.5 -7 2^40 200]", got)
	}
	mustPanic(t, func() {
		launch(t, f, 1, 32, args(uint64(out), math.Float64bits(1.5), 0, 0, 0))
	}, "cuemu_selftest_params", "parameter 1 (f)", "not widened")
	mustPanic(t, func() { launch(t, f, 1, 32, args(uint64(out), 0, 0)) }, "3 parameters passed, the PTX declares 5")
	mustPanic(t, func() { launch(t, f, 1, 32, args(12345, 0, 0, 0, 0)) }, "parameter 0 (out)", "not device memory")
}

// TestNoContraction checks the build flags: x*y+z must round after the product, as nvcc
// -fmad=false does. x*y = 1 + 2^-11 + 2^-24 rounds to 1 + 2^-11 in float32; a fused multiply-add
// would keep the 2^-24.
func TestNoContraction(t *testing.T) {
	m := device(t)
	out := alloc(t, 4)
	x := float32(1 + 1.0/4096)
	launch(t, getFunction(t, m, "cuemu_selftest_fma"), 1, 32, args(uint64(out),
		uint64(math.Float32bits(x)), uint64(math.Float32bits(x)), uint64(math.Float32bits(-1))))
	if got := download[float32](t, out, 1)[0]; got != 1.0/2048 {
		t.Fatalf("x*y+z = %g, want %g: the kernels were compiled with floating-point contraction (CGO_CXXFLAGS needs -ffp-contract=off)", got, 1.0/2048)
	}
}

func TestPoison(t *testing.T) {
	m := device(t)
	out := alloc(t, 8)
	if got := download[float32](t, out, 2); !math.IsNaN(float64(got[0])) || math.Float32bits(got[1]) != math.MaxUint32 {
		t.Fatalf("fresh device memory reads %v, want 0xff bytes", got)
	}
	if err := MemsetD8Async(out, 0, 8, Stream{}); err != nil {
		t.Fatal(err)
	}
	launch(t, getFunction(t, m, "cuemu_selftest_uninit"), 1, 32, args(uint64(out)))
	if got := download[float32](t, out, 1)[0]; !math.IsNaN(float64(got)) {
		t.Fatalf("uninitialised shared memory reads %v, want NaN", got)
	}
}

func TestReverseOrderChangesOrderDependentCode(t *testing.T) {
	m := device(t)
	f := getFunction(t, m, "cuemu_selftest_order")
	var got []int32
	inOrder(func(string) {
		out := alloc(t, 4)
		launch(t, f, 2, 64, args(uint64(out)))
		got = append(got, download[int32](t, out, 1)[0])
	})
	if len(got) != 2 || got[0] != 127 || got[1] != 0 {
		t.Fatalf("last writer forward and reversed: %v, want [127 0]", got)
	}
}

func TestExecutionModelViolations(t *testing.T) {
	m := device(t)
	out := alloc(t, 256*4)
	for _, c := range []struct {
		kernel string
		want   []string
	}{
		{"cuemu_selftest_skip_barrier", []string{"__syncthreads #1 is skipped", "threads 0-127 wait at it", "threads 128-255 exited"}},
		{"cuemu_selftest_missing_lane", []string{"warp 1 is missing lanes", "threads 37 exited"}},
		{"cuemu_selftest_mixed_shuffle", []string{"shuffle in warp 0: lane 0 is at __shfl_sync, lane 16 at __shfl_xor_sync"}},
		{"cuemu_selftest_deadlock", []string{"warp 0 is missing lanes", "threads 0-15 wait at the shuffle", "threads 16-31 wait at __syncthreads (deadlock)"}},
	} {
		f := getFunction(t, m, c.kernel)
		inOrder(func(order string) {
			block := map[string]string{"forward": "block (0,0,0)", "reverse": "block (1,0,0)"}[order]
			mustPanic(t, func() { launch(t, f, 2, 256, args(uint64(out))) }, append([]string{c.kernel, block}, c.want...)...)
		})
	}
	// The emulator recovers: the next launch runs normally.
	counts := upload(t, []int32{0, 0})
	launch(t, getFunction(t, m, "cuemu_selftest_atomics"), 1, 64, args(uint64(counts)))
	if got := download[int32](t, counts, 1)[0]; got != 64 {
		t.Fatalf("after the aborted launches: count %d, want 64", got)
	}
}

// TestShuffleFromLane checks __shfl_sync: every lane reads the value of the lane it names (taken
// modulo 32), 8- and 4-byte values, within its own warp only.
func TestShuffleFromLane(t *testing.T) {
	m := device(t)
	f := getFunction(t, m, "cuemu_selftest_shfl_idx")
	const threads = 96
	inOrder(func(order string) {
		out := alloc(t, threads*2*8)
		launch(t, f, 1, threads, args(uint64(out)))
		got := download[uint64](t, out, threads*2)
		for tid := range threads {
			warp, lane := tid/32, tid%32
			src := (7*lane + 3) % 37 % 32
			if want := uint64(warp*32+src)<<32 | uint64(src); got[2*tid] != want {
				t.Errorf("%s: thread %d: 8-byte shuffle %#x, want %#x", order, tid, got[2*tid], want)
			}
			if want := uint64(warp*32 + 31 - lane); got[2*tid+1] != want {
				t.Errorf("%s: thread %d: 4-byte shuffle %d, want %d", order, tid, got[2*tid+1], want)
			}
		}
	})
}

// TestWarpGather checks cuemu_warp_gather: every lane receives every lane of its warp, in lane
// order.
func TestWarpGather(t *testing.T) {
	m := device(t)
	f := getFunction(t, m, "cuemu_selftest_gather")
	const threads = 64
	inOrder(func(order string) {
		out := alloc(t, threads*64*8)
		launch(t, f, 1, threads, args(uint64(out)))
		got := download[int64](t, out, threads*64)
		for tid := range threads {
			for i := range 32 {
				src := int64(tid/32*32 + i)
				if a, b := got[64*tid+2*i], got[64*tid+2*i+1]; a != src || b != 1000*src {
					t.Fatalf("%s: thread %d, entry %d: {%d, %d}, want {%d, %d}", order, tid, i, a, b, src, 1000*src)
				}
			}
		}
	})
}

func TestLaunchConfiguration(t *testing.T) {
	m := device(t)
	f := getFunction(t, m, "cuemu_selftest_reduce")
	out := alloc(t, 8*4*2)
	in := alloc(t, 4*512*2)
	for _, c := range []struct{ grid, block int }{{1, 512}, {0, 32}, {1, 2048}} {
		err := f.Launch(c.grid, 1, 1, c.block, 1, 1, 0, Stream{}, args(uint64(out), uint64(in)))
		if !errors.Is(err, InvalidValue) {
			t.Errorf("grid %d block %d: %v, want InvalidValue", c.grid, c.block, err)
		}
	}
	if _, err := m.Function("no_such_kernel"); !errors.Is(err, NotFound) {
		t.Errorf("missing kernel: %v, want NotFound", err)
	}
	stale, err := LoadData(strings.Replace(selftestPTX, "cuemu_selftest_params(.param .u64 out, .param .f32 f", "cuemu_selftest_params(.param .u64 out, .param .f64 f", 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stale.Function("cuemu_selftest_params"); !errors.Is(err, InvalidImage) || !strings.Contains(err.Error(), "parameter 1 (f)") {
		t.Errorf("PTX disagreeing with the source: %v, want InvalidImage naming parameter 1 (f)", err)
	}
	if _, err := stale.Function("cuemu_selftest_stale"); !errors.Is(err, NotFound) || !strings.Contains(err.Error(), "not compiled into the emulator") {
		t.Errorf("PTX entry without a compiled kernel: %v", err)
	}
}

func TestMemoryChecks(t *testing.T) {
	m := device(t)
	p := alloc(t, 64)
	var buf [128]byte
	mustPanic(t, func() { _ = MemcpyHtoD(p+32, unsafe.Pointer(&buf[0]), 64) }, "cuMemcpyHtoD", "runs past its end")
	mustPanic(t, func() { _ = MemcpyDtoDAsync(p+8, p, 16, Stream{}) }, "overlap")
	mustPanic(t, func() { _ = MemcpyDtoDAsync(p, p, 16, Stream{}) }, "overlap")
	if err := MemcpyDtoDAsync(p+16, p, 16, Stream{}); err != nil {
		t.Fatal(err)
	}
	if err := MemFree(p); err != nil {
		t.Fatal(err)
	}
	mustPanic(t, func() { _ = MemcpyDtoH(unsafe.Pointer(&buf[0]), p, 8) }, "use after free")
	mustPanic(t, func() { _ = MemFree(p) }, "cuMemFree", "use after free")
	f := getFunction(t, m, "cuemu_selftest_order")
	mustPanic(t, func() { launch(t, f, 1, 32, args(uint64(p))) }, "cuemu_selftest_order", "parameter 0 (out)", "use after free")
	if _, err := MemAlloc(config.memory + 1); !errors.Is(err, OutOfMemory) {
		t.Fatalf("allocation beyond CUEMU_MEMORY: %v, want OutOfMemory", err)
	}
}

func TestContextThread(t *testing.T) {
	device(t)
	done := make(chan any)
	go func() {
		runtime.LockOSThread() // the test goroutine holds its own thread: this is another one
		defer runtime.UnlockOSThread()
		defer func() { done <- recover() }()
		_, _ = MemAlloc(16)
	}()
	r := <-done
	if r == nil || !strings.Contains(fmt.Sprint(r), "has no current CUDA context") {
		t.Fatalf("cuMemAlloc from a thread without a context: %v, want a panic", r)
	}
}
