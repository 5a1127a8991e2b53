//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/mtrl-go/mtrl/cuda/kernels"
	"github.com/mtrl-go/mtrl/tensor"
	"gorgonia.org/cu"
)

// Backend is one CUDA device with its own context and stream. It implements tensor.Backend and
// the fused kernel interfaces listed in the package documentation. Its methods are safe for
// concurrent use (they are serialised on the backend's OS thread).
type Backend struct {
	name   string
	device string // the driver's name for the device (DeviceName)

	mu     sync.RWMutex // held for reading by each call, for writing by Close
	closed bool

	calls  chan func()
	exited chan struct{}

	liveBytes, liveCount atomic.Int64 // storages allocated and not yet released (Allocated)
	peakBytes            atomic.Int64 // liveBytes' largest value since ResetPeak (Peak)
	traffic              trafficCounters

	// Owned by the backend's goroutine (touched only inside b.do closures).
	ctx      cu.CUContext
	stream   cu.Stream
	mods     []cu.Module
	fns      map[string]cu.Function
	sms      int
	aux      cu.DevicePtr // auxBytes of flags and small results
	scratch  cu.DevicePtr
	scratchN int64
	blas     unsafe.Pointer // the cuBLAS handle (cublas.go), created at the first GEMM
}

// auxBytes holds the error flag (8 bytes at 0) and small results (at 64).
const (
	auxBytes  = 256
	auxFlag   = 0
	auxResult = 64
)

var _ tensor.Backend = (*Backend)(nil)

// New opens CUDA device n (0-based): it creates a context owned by a new goroutine locked to an
// OS thread, a stream, and loads the embedded kernels. The backend's name is "cuda:N". Call
// Close when done.
func New(device int) (*Backend, error) {
	const op = "cuda.New"
	b := &Backend{
		name:   fmt.Sprintf("cuda:%d", device),
		calls:  make(chan func()),
		exited: make(chan struct{}),
		fns:    map[string]cu.Function{},
	}
	started := make(chan error, 1)
	go b.loop(device, started)
	if err := <-started; err != nil {
		return nil, err
	}
	_ = op
	return b, nil
}

// loop is the backend's goroutine: it owns the context for its lifetime.
func (b *Backend) loop(device int, started chan<- error) {
	runtime.LockOSThread()
	defer close(b.exited)
	if err := b.open(device); err != nil {
		b.shutdown()
		started <- err
		return
	}
	started <- nil
	for fn := range b.calls {
		fn()
	}
	b.shutdown()
}

func (b *Backend) open(device int) error {
	const op = "cuda.New"
	n, err := cu.NumDevices()
	if err != nil {
		return devErr(op, "cuDeviceGetCount", "", err)
	}
	if device < 0 || device >= n {
		return tensor.Errorf(tensor.ErrDevice, op, "device", "is %d, the machine has %d CUDA devices", device, n)
	}
	dev, err := cu.GetDevice(device)
	if err != nil {
		return devErr(op, "cuDeviceGet", "", err)
	}
	if b.device, err = dev.Name(); err != nil {
		return devErr(op, "cuDeviceGetName", "", err)
	}
	if b.sms, err = dev.Attribute(cu.MultiprocessorCount); err != nil {
		return devErr(op, "cuDeviceGetAttribute", "", err)
	}
	if b.ctx, err = dev.MakeContext(cu.SchedBlockingSync); err != nil {
		return devErr(op, "cuCtxCreate", "", err)
	}
	// A blocking stream (CU_STREAM_DEFAULT): the synchronous copies of Upload and Download, on
	// the legacy NULL stream, wait for the kernels queued here and the other way round.
	if b.stream, err = cu.MakeStream(cu.DefaultStream); err != nil {
		return devErr(op, "cuStreamCreate", "", err)
	}
	for _, k := range kernels.Modules() {
		m, err := cu.LoadData(k.PTX)
		if err != nil {
			return devErr(op, "cuModuleLoadData", k.Name, err)
		}
		b.mods = append(b.mods, m)
	}
	if b.aux, err = cu.MemAlloc(auxBytes); err != nil {
		return devErr(op, "cuMemAlloc", "", err)
	}
	return nil
}

// shutdown releases what open acquired; destroying the context frees all device memory.
func (b *Backend) shutdown() {
	if b.ctx == (cu.CUContext{}) {
		return
	}
	_ = b.stream.Synchronize()
	b.destroyBLAS()
	_ = b.ctx.Destroy()
}

// do runs fn on the backend's thread and returns its error.
func (b *Backend) do(op string, fn func() error) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return tensor.Errorf(tensor.ErrClosed, op, "", "backend %s is closed", b.name)
	}
	errc := make(chan error, 1)
	b.calls <- func() { errc <- fn() }
	return <-errc
}

// deviceKernels carries the backend's fused kernels, which implement the op families' kernel
// interfaces (tensor.LogProbEntropyKernel, ppo.PolicyLossKernel, …). They sit on this unexported
// type, reached through Kernels, so that *Backend's own methods hold nothing unvalidated named
// like the entry points.
type deviceKernels struct{ *Backend }

// Kernels returns the backend's fused kernels, which the validated entry points of mtrl's
// packages find through tensor.KernelOf. Calling them directly skips that validation.
func (b *Backend) Kernels() any { return deviceKernels{b} }

// Name returns "cuda:N".
func (b *Backend) Name() string { return b.name }

// DeviceName is the driver's name for the device, such as "NVIDIA H200" (set by New; the CPU
// emulator's devices are "cuemu (CPU emulation)").
func (b *Backend) DeviceName() string { return b.device }

// Close waits for queued work, destroys the context (freeing every allocation of the backend)
// and stops the backend's goroutine. Tensors on the backend become unusable. Closing twice is
// a no-op.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	errc := make(chan error, 1)
	b.calls <- func() {
		if err := b.stream.Synchronize(); err != nil {
			errc <- devErr("cuda.Backend.Close", "cuStreamSynchronize", "", err)
			return
		}
		errc <- nil
	}
	err := <-errc
	close(b.calls)
	<-b.exited
	return err
}

// Sync waits until the work queued on the backend's stream has finished; it reports errors of
// earlier asynchronous kernels.
func (b *Backend) Sync() error {
	const op = "cuda.Backend.Sync"
	return b.do(op, func() error {
		if err := b.stream.Synchronize(); err != nil {
			return devErr(op, "cuStreamSynchronize", "", err)
		}
		return nil
	})
}

// storage is device memory of one backend. freed is touched only on the backend's thread
// (inside b.do closures): the check that a storage is live and its use by a copy or kernel run in
// one closure, so a concurrent Release (itself a closure) can only come before or after both.
type storage struct {
	b   *Backend
	ptr cu.DevicePtr
	n   int

	freed bool
}

func (s *storage) Backend() tensor.Backend { return s.b }
func (s *storage) Len() int                { return s.n }

// Release frees the device memory now (after the queued work that may use it has finished).
// Releasing twice, or after the backend was closed, is a no-op; operations on released storage
// fail with tensor.ErrClosed.
func (s *storage) Release() error {
	const op = "cuda.Storage.Release"
	runtime.SetFinalizer(s, nil)
	if s.ptr == 0 {
		return nil
	}
	err := s.b.do(op, func() error {
		if s.freed {
			return nil
		}
		s.freed = true
		if err := s.b.stream.Synchronize(); err != nil {
			return devErr(op, "cuStreamSynchronize", "", err)
		}
		if err := cu.MemFree(s.ptr); err != nil {
			return devErr(op, "cuMemFree", "", err)
		}
		s.b.liveBytes.Add(-int64(s.n))
		s.b.liveCount.Add(-1)
		return nil
	})
	if isClosed(err) {
		return nil // the context, and all its memory, is gone already
	}
	return err
}

func isClosed(err error) bool {
	e, ok := err.(*tensor.Error)
	return ok && e.Err == tensor.ErrClosed
}

// Alloc returns zero-filled device memory (cuMemAlloc + cuMemsetD8). Out of memory is an error
// wrapping tensor.ErrDevice. Storage not released explicitly is freed when the garbage
// collector finds it unreachable.
func (b *Backend) Alloc(bytes int) (tensor.Storage, error) {
	const op = "cuda.Backend.Alloc"
	if bytes < 0 {
		return nil, tensor.Errorf(tensor.ErrParam, op, "bytes", "is negative (%d)", bytes)
	}
	s := &storage{b: b, n: bytes}
	if bytes == 0 {
		return s, nil
	}
	err := b.do(op, func() error {
		p, err := cu.MemAlloc(int64(bytes))
		if err != nil {
			return devErr(op, "cuMemAlloc", fmt.Sprintf("%d bytes", bytes), err)
		}
		if err := cu.MemsetD8Async(p, 0, int64(bytes), b.stream); err != nil {
			_ = cu.MemFree(p)
			return devErr(op, "cuMemsetD8Async", "", err)
		}
		s.ptr = p
		live := b.liveBytes.Add(int64(bytes))
		for peak := b.peakBytes.Load(); live > peak && !b.peakBytes.CompareAndSwap(peak, live); peak = b.peakBytes.Load() {
		}
		b.liveCount.Add(1)
		return nil
	})
	if err != nil {
		return nil, err
	}
	runtime.SetFinalizer(s, func(s *storage) { _ = s.Release() })
	return s, nil
}

// Allocated returns the device memory held by this backend's live storages (allocated and
// neither released nor collected) in bytes, and their number; the backend's own scratch
// buffers are not counted. Like torch.cuda.memory_allocated, for finding leaks.
func (b *Backend) Allocated() (bytes int64, storages int) {
	return b.liveBytes.Load(), int(b.liveCount.Load())
}

// Peak returns the largest Allocated bytes since the backend was opened or ResetPeak was
// called (torch.cuda.max_memory_allocated); ResetPeak starts it again from the bytes held now.
func (b *Backend) Peak() int64 { return b.peakBytes.Load() }

// ResetPeak sets Peak to the bytes allocated now.
func (b *Backend) ResetPeak() { b.peakBytes.Store(b.liveBytes.Load()) }

// owner checks that st is storage of b and that [off, off+n) lies inside it; it may run on
// any goroutine.
func (b *Backend) owner(op, arg string, st tensor.Storage, off, n int) (*storage, error) {
	s, ok := st.(*storage)
	if !ok || s == nil || s.b != b {
		owner := "no backend (nil storage)"
		if st != nil {
			owner = st.Backend().Name()
		}
		return nil, tensor.Errorf(tensor.ErrBackend, op, arg, "storage belongs to %s, not %s", owner, b.name)
	}
	if err := tensor.CheckRange(op, arg, s.n, off, n); err != nil {
		return nil, err
	}
	return s, nil
}

// own is owner plus the check that the storage was not released. It must run on the backend's
// thread, in the closure that then uses the storage.
func (b *Backend) own(op, arg string, st tensor.Storage, off, n int) (*storage, error) {
	s, err := b.owner(op, arg, st, off, n)
	if err != nil {
		return nil, err
	}
	if s.freed {
		return nil, tensor.Errorf(tensor.ErrClosed, op, arg, "storage was released")
	}
	return s, nil
}

// Upload copies src to device memory at byte offset off (cuMemcpyHtoD, ordered after the
// queued work).
func (b *Backend) Upload(dst tensor.Storage, off int, src []byte) error {
	const op = "cuda.Backend.Upload"
	if _, err := b.owner(op, "dst", dst, off, len(src)); err != nil || len(src) == 0 {
		return err
	}
	return b.do(op, func() error {
		d, err := b.own(op, "dst", dst, off, len(src))
		if err != nil {
			return err
		}
		if err := cu.MemcpyHtoD(d.ptr+cu.DevicePtr(off), unsafe.Pointer(unsafe.SliceData(src)), int64(len(src))); err != nil {
			return devErr(op, "cuMemcpyHtoD", "", err)
		}
		b.traffic.up.add(len(src))
		return nil
	})
}

// Download copies len(dst) bytes at byte offset off into dst, after the queued work.
func (b *Backend) Download(dst []byte, src tensor.Storage, off int) error {
	const op = "cuda.Backend.Download"
	if _, err := b.owner(op, "src", src, off, len(dst)); err != nil || len(dst) == 0 {
		return err
	}
	return b.do(op, func() error {
		s, err := b.own(op, "src", src, off, len(dst))
		if err != nil {
			return err
		}
		if err := cu.MemcpyDtoH(unsafe.Pointer(unsafe.SliceData(dst)), s.ptr+cu.DevicePtr(off), int64(len(dst))); err != nil {
			return devErr(op, "cuMemcpyDtoH", "", err)
		}
		b.traffic.down.add(len(dst))
		return nil
	})
}

// Copy copies n bytes between two storages of this backend, queued on the stream. Overlapping
// ranges of one storage behave as Go's copy (and the CPU backend): the result is the source as
// it was before the copy. cuMemcpyDtoD leaves overlap undefined, so such a copy goes through
// the backend's scratch memory.
func (b *Backend) Copy(dst tensor.Storage, dstOff int, src tensor.Storage, srcOff, n int) error {
	const op = "cuda.Backend.Copy"
	if _, err := b.owner(op, "dst", dst, dstOff, n); err != nil {
		return err
	}
	if _, err := b.owner(op, "src", src, srcOff, n); err != nil || n == 0 {
		return err
	}
	return b.do(op, func() error {
		d, err := b.own(op, "dst", dst, dstOff, n)
		if err != nil {
			return err
		}
		s, err := b.own(op, "src", src, srcOff, n)
		if err != nil {
			return err
		}
		to, from := d.ptr+cu.DevicePtr(dstOff), s.ptr+cu.DevicePtr(srcOff)
		switch {
		case to == from:
			return nil
		case d == s && max(dstOff, srcOff) < min(dstOff, srcOff)+n:
			tmp, err := b.scratchPtr(op, int64(n))
			if err != nil {
				return err
			}
			if err := cu.MemcpyDtoDAsync(tmp, from, int64(n), b.stream); err != nil {
				return devErr(op, "cuMemcpyDtoDAsync", "", err)
			}
			from = tmp
		}
		if err := cu.MemcpyDtoDAsync(to, from, int64(n), b.stream); err != nil {
			return devErr(op, "cuMemcpyDtoDAsync", "", err)
		}
		return nil
	})
}

// devErr wraps a driver error as tensor.ErrDevice, naming the driver call and the kernel.
func devErr(op, call, kernel string, err error) error {
	detail := call
	if kernel != "" {
		detail += " (" + kernel + ")"
	}
	return &tensor.Error{Op: op, Detail: detail + " failed", Err: fmt.Errorf("%w: %w", tensor.ErrDevice, err)}
}

// ---- Inside closures (on the backend's thread) ----

// fn finds a kernel by its extern "C" name.
func (b *Backend) fn(name string) (cu.Function, error) {
	if f, ok := b.fns[name]; ok {
		return f, nil
	}
	for _, m := range b.mods {
		if f, err := m.Function(name); err == nil {
			b.fns[name] = f
			return f, nil
		}
	}
	return cu.Function{}, fmt.Errorf("kernel %s not found in the embedded modules: %w", name, tensor.ErrDevice)
}

// arg is one kernel parameter: gorgonia.org/cu copies 8 bytes from every parameter pointer,
// so every value is widened to a uint64 (float32 in the low 4 bytes, little-endian).
type arg = uint64

// launchHook, when set (by tests only), sees the name of every kernel launch: how a test shows
// which kernel served an op.
var launchHook atomic.Pointer[func(name string)]

func ptrArg(p cu.DevicePtr) arg { return arg(p) }
func intArg(v int) arg          { return arg(int64(v)) }
func f32Arg(v float32) arg      { return arg(math.Float32bits(v)) }

// launch queues kernel name on the stream with a 1-D block of threads.
func (b *Backend) launch(op, name string, gridX, gridY, threads, shared int, args ...arg) error {
	if h := launchHook.Load(); h != nil {
		(*h)(name)
	}
	f, err := b.fn(name)
	if err != nil {
		return devErr(op, "cuModuleGetFunction", name, err)
	}
	params := make([]unsafe.Pointer, len(args))
	for i := range args {
		params[i] = unsafe.Pointer(&args[i])
	}
	if err := f.Launch(gridX, gridY, 1, threads, 1, 1, shared, b.stream, params); err != nil {
		return devErr(op, "cuLaunchKernel", name, err)
	}
	return nil
}

// scratchPtr returns at least n bytes of device scratch, reused across calls (the stream
// orders its uses). Growing it waits for the queued work before freeing the old buffer.
func (b *Backend) scratchPtr(op string, n int64) (cu.DevicePtr, error) {
	if n <= b.scratchN {
		return b.scratch, nil
	}
	if b.scratch != 0 {
		if err := b.stream.Synchronize(); err != nil {
			return 0, devErr(op, "cuStreamSynchronize", "", err)
		}
		if err := cu.MemFree(b.scratch); err != nil {
			return 0, devErr(op, "cuMemFree", "", err)
		}
		b.scratch, b.scratchN = 0, 0
	}
	n = max(n, 1<<20)
	p, err := cu.MemAlloc(n)
	if err != nil {
		return 0, devErr(op, "cuMemAlloc", fmt.Sprintf("%d bytes of scratch", n), err)
	}
	b.scratch, b.scratchN = p, n
	return p, nil
}

// resetFlag sets the 8-byte error flag to "no bad row" (all ones).
func (b *Backend) resetFlag(op string) error {
	if err := cu.MemsetD8Async(b.aux+auxFlag, 0xff, 8, b.stream); err != nil {
		return devErr(op, "cuMemsetD8Async", "", err)
	}
	return nil
}

// readFlag waits for the queued work and returns the lowest row a kernel flagged, or -1.
func (b *Backend) readFlag(op, kernel string) (int64, error) {
	var v uint64
	if err := cu.MemcpyDtoH(unsafe.Pointer(&v), b.aux+auxFlag, 8); err != nil {
		return 0, devErr(op, "cuMemcpyDtoH", kernel, err)
	}
	b.traffic.down.add(8)
	if v == math.MaxUint64 {
		return -1, nil
	}
	return int64(v), nil
}

// ptrOf returns the device address of t's first element (0 for a nil tensor). It must run
// inside a closure only for reading; the tensors were validated by the entry point.
func (b *Backend) ptrOf(op, arg string, t *tensor.Tensor) (cu.DevicePtr, error) {
	if t == nil {
		return 0, nil
	}
	st, off := t.Storage()
	s, err := b.own(op, arg, st, off*t.DType().Size(), t.Len()*t.DType().Size())
	if err != nil {
		return 0, err
	}
	return s.ptr + cu.DevicePtr(off*t.DType().Size()), nil
}

// ptrs resolves several tensors at once (nil stays 0).
func (b *Backend) ptrs(op string, names []string, ts ...*tensor.Tensor) ([]cu.DevicePtr, error) {
	out := make([]cu.DevicePtr, len(ts))
	for i, t := range ts {
		p, err := b.ptrOf(op, names[i], t)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// grid1D is the grid of an elementwise grid-stride kernel over n elements.
func (b *Backend) grid1D(n int) int {
	g := (n + blockSize - 1) / blockSize
	return max(1, min(g, b.sms*32))
}

// blockSize is MTRL_BLOCK of the kernels.
const blockSize = 256

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// elementwise launches a grid-stride kernel over n elements (nothing for n == 0).
func (b *Backend) elementwise(op, name string, n int, args ...arg) error {
	if n == 0 {
		return nil
	}
	return b.launch(op, name, b.grid1D(n), 1, blockSize, 0, args...)
}

// download copies n bytes at device address p into host memory at dst, after the queued work.
func (b *Backend) download(op string, dst unsafe.Pointer, p cu.DevicePtr, n int) error {
	if n == 0 {
		return nil
	}
	if err := cu.MemcpyDtoH(dst, p, int64(n)); err != nil {
		return devErr(op, "cuMemcpyDtoH", "", err)
	}
	b.traffic.down.add(n)
	return nil
}

// upload copies n bytes of host memory at src to device address p, ordered after the queued
// work (the stream is blocking, so later kernels see the data).
func (b *Backend) upload(op string, p cu.DevicePtr, src unsafe.Pointer, n int) error {
	if n == 0 {
		return nil
	}
	if err := cu.MemcpyHtoD(p, src, int64(n)); err != nil {
		return devErr(op, "cuMemcpyHtoD", "", err)
	}
	b.traffic.up.add(n)
	return nil
}

// Traffic counts the copies between host and device memory of one direction: every copy the
// backend makes, tensor uploads and downloads (tensor.CopyInto, tensor.To, host staging by
// tensor.OnHost) and the kernels' own small results (sums, flags, row statistics) alike.
type Traffic struct {
	Copies  int64 // number of copies
	Bytes   int64 // bytes moved
	Largest int64 // bytes of the largest copy
}

// Traffic returns the host-to-device (up) and device-to-host (down) copies since the backend
// was opened or the last ResetTraffic. Callers use it to check what crosses per step.
func (b *Backend) Traffic() (up, down Traffic) {
	return b.traffic.up.get(), b.traffic.down.get()
}

// ResetTraffic zeroes the counters of Traffic.
func (b *Backend) ResetTraffic() {
	b.traffic.up.reset()
	b.traffic.down.reset()
}

type trafficCounters struct{ up, down trafficCounter }

type trafficCounter struct{ copies, bytes, largest atomic.Int64 }

func (c *trafficCounter) add(n int) {
	c.copies.Add(1)
	c.bytes.Add(int64(n))
	for {
		l := c.largest.Load()
		if int64(n) <= l || c.largest.CompareAndSwap(l, int64(n)) {
			return
		}
	}
}

func (c *trafficCounter) get() Traffic {
	return Traffic{Copies: c.copies.Load(), Bytes: c.bytes.Load(), Largest: c.largest.Load()}
}

func (c *trafficCounter) reset() {
	c.copies.Store(0)
	c.bytes.Store(0)
	c.largest.Store(0)
}
