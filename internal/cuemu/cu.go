package cu

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// cuResult is a CUDA driver status, named as gorgonia.org/cu names them.
type cuResult int

// The driver statuses the emulator returns (CUresult values).
const (
	Success        cuResult = 0
	InvalidValue   cuResult = 1
	OutOfMemory    cuResult = 2
	NoDevice       cuResult = 100
	InvalidDevice  cuResult = 101
	InvalidImage   cuResult = 200
	InvalidContext cuResult = 201
	InvalidHandle  cuResult = 400
	NotFound       cuResult = 500
)

var resultNames = map[cuResult]string{
	Success: "Success", InvalidValue: "InvalidValue", OutOfMemory: "OutOfMemory",
	NoDevice: "NoDevice", InvalidDevice: "InvalidDevice", InvalidImage: "InvalidImage",
	InvalidContext: "InvalidContext", InvalidHandle: "InvalidHandle", NotFound: "NotFound",
}

func (err cuResult) Error() string { return err.String() }
func (err cuResult) String() string {
	if s, ok := resultNames[err]; ok {
		return s
	}
	return fmt.Sprintf("UnknownErrorCode:%d", int(err))
}

// emuError is a driver status with the emulator's explanation; errors.Is matches the status.
type emuError struct {
	code   cuResult
	detail string
}

func (e *emuError) Error() string        { return e.code.String() + " (cuemu: " + e.detail + ")" }
func (e *emuError) Is(target error) bool { return target == e.code }

func errorf(code cuResult, format string, args ...any) error {
	return &emuError{code, fmt.Sprintf(format, args...)}
}

// violation reports a use of the driver that is undefined behaviour on a GPU: a crash, a hang or
// silently wrong results there. The emulator makes it loud.
func violation(format string, args ...any) {
	panic("cuemu: " + fmt.Sprintf(format, args...))
}

// config is read once from the environment (see the package doc).
var config = struct {
	devices int
	sms     int
	memory  int64
	reverse bool
	// The opt-in modes that behave as a GPU does where the defaults are stricter or simpler
	// (see the package doc): freed ranges reused with their bytes, shared memory as the
	// previous block left it, operations queued until a synchronising call.
	reuse, staleShared, deferred bool
}{devices: 1, sms: 132, memory: 8 << 30}

func init() {
	envInt := func(name string, dst *int64) {
		if s := os.Getenv(name); s != "" {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil || v < 0 {
				fmt.Fprintf(os.Stderr, "cuemu: %s=%q is not a non-negative integer\n", name, s)
				os.Exit(2)
			}
			*dst = v
		}
	}
	d, s := int64(config.devices), int64(config.sms)
	envInt("CUEMU_DEVICES", &d)
	envInt("CUEMU_SMS", &s)
	envInt("CUEMU_MEMORY", &config.memory)
	config.devices, config.sms = int(d), max(1, int(s))
	switch o := os.Getenv("CUEMU_ORDER"); o {
	case "", "forward":
	case "reverse":
		config.reverse = true
	default:
		fmt.Fprintf(os.Stderr, "cuemu: CUEMU_ORDER=%q: want forward or reverse\n", o)
		os.Exit(2)
	}
	for _, m := range []struct {
		name, on string
		dst      *bool
	}{{"CUEMU_ALLOC", "reuse", &config.reuse}, {"CUEMU_SHARED", "stale", &config.staleShared}, {"CUEMU_ASYNC", "deferred", &config.deferred}} {
		switch v := os.Getenv(m.name); v {
		case "":
		case m.on:
			*m.dst = true
		default:
			fmt.Fprintf(os.Stderr, "cuemu: %s=%q: want %s or nothing\n", m.name, v, m.on)
			os.Exit(2)
		}
	}
}

// Device is a device ordinal.
type Device int

// DeviceAttribute names a device property.
type DeviceAttribute int

// The attributes the emulator reports (CUdevice_attribute values).
const (
	MaxThreadsPerBlock      DeviceAttribute = 1
	MaxSharedMemoryPerBlock DeviceAttribute = 8
	WarpSize                DeviceAttribute = 10
	MultiprocessorCount     DeviceAttribute = 16
	ComputeCapabilityMajor  DeviceAttribute = 75
	ComputeCapabilityMinor  DeviceAttribute = 76
)

// NumDevices returns CUEMU_DEVICES (default 1).
func NumDevices() (int, error) { return config.devices, nil }

// GetDevice returns device ordinal.
func GetDevice(ordinal int) (Device, error) {
	if ordinal < 0 || ordinal >= config.devices {
		return 0, errorf(InvalidDevice, "device %d of %d", ordinal, config.devices)
	}
	return Device(ordinal), nil
}

// EmulatorName is the name every emulated device reports (cuDeviceGetName).
const EmulatorName = "cuemu (CPU emulation)"

// Name returns EmulatorName: tests tell the emulator from a GPU by it, where the two promise
// different things (the emulated cuBLAS sums in one order whatever the matrix sizes).
func (dev Device) Name() (string, error) { return EmulatorName, nil }

// Attribute returns a device property: an sm_80-class device with CUEMU_SMS multiprocessors.
func (dev Device) Attribute(attrib DeviceAttribute) (int, error) {
	switch attrib {
	case MaxThreadsPerBlock:
		return 1024, nil
	case MaxSharedMemoryPerBlock:
		return 48 << 10, nil
	case WarpSize:
		return 32, nil
	case MultiprocessorCount:
		return config.sms, nil
	case ComputeCapabilityMajor:
		return 8, nil
	case ComputeCapabilityMinor:
		return 0, nil
	}
	return 0, errorf(InvalidValue, "attribute %d is not emulated", int(attrib))
}

// ContextFlags are cuCtxCreate's flags (accepted and ignored).
type ContextFlags byte

// SchedBlockingSync is CU_CTX_SCHED_BLOCKING_SYNC.
const SchedBlockingSync ContextFlags = 4

// context is one emulated CUDA context.
type context struct {
	id     int
	device Device
	owner  int // the OS thread it was created on (and is current on)
	live   bool
	queues []*queue // its streams' (CUEMU_ASYNC=deferred)
}

// CUContext is a context handle.
type CUContext struct{ c *context }

func (ctx CUContext) String() string {
	if ctx.c == nil {
		return "0x0"
	}
	return fmt.Sprintf("cuemu-context-%d", ctx.c.id)
}

var (
	mu       sync.Mutex           // guards everything below and the allocation table
	contexts int                  // contexts created so far
	current  = map[int]*context{} // OS thread id -> its current context
)

// MakeContext creates a context on dev and makes it current on the calling OS thread.
func (dev Device) MakeContext(flags ContextFlags) (CUContext, error) {
	if int(dev) < 0 || int(dev) >= config.devices {
		return CUContext{}, errorf(InvalidDevice, "device %d of %d", int(dev), config.devices)
	}
	mu.Lock()
	defer mu.Unlock()
	contexts++
	c := &context{id: contexts, device: dev, owner: syscall.Gettid(), live: true}
	current[c.owner] = c
	return CUContext{c}, nil
}

// Destroy frees every allocation of the context and makes the calling thread context-less.
func (ctx *CUContext) Destroy() error {
	mu.Lock()
	defer mu.Unlock()
	c := ctx.c
	if c == nil || !c.live {
		return errorf(InvalidContext, "Destroy of a context that is not live")
	}
	tid := syscall.Gettid()
	if tid != c.owner {
		violation("cuCtxDestroy on OS thread %d of context %d, which was created and is current on thread %d", tid, c.id, c.owner)
	}
	flushLocked(c, false)
	freeContextLocked(c)
	c.live = false
	delete(current, c.owner)
	*ctx = CUContext{}
	return nil
}

// currentLocked returns the calling OS thread's context, or panics: every emulated call needs
// one, as every real driver call does (the real one returns InvalidContext, which callers that
// drop errors would never see).
func currentLocked(call string) *context {
	tid := syscall.Gettid()
	c := current[tid]
	if c == nil {
		owners := ""
		for t, o := range current {
			owners += fmt.Sprintf(" context %d is current on thread %d;", o.id, t)
		}
		violation("%s on OS thread %d, which has no current CUDA context (a goroutine not locked to its context's thread?);%s", call, tid, owners)
	}
	return c
}

// StreamFlags are cuStreamCreate's flags.
type StreamFlags byte

// The stream flags: CU_STREAM_DEFAULT (a blocking stream: the legacy null stream's work and
// its own wait for each other) and CU_STREAM_NON_BLOCKING.
const (
	DefaultStream StreamFlags = 0
	NonBlocking   StreamFlags = 1
)

// Stream is a stream handle: its context and, for a created stream, its queue. By default the
// emulator runs every operation when it is issued; under CUEMU_ASYNC=deferred a created
// stream's launches, memsets and device copies wait in its queue until a synchronising call.
type Stream struct {
	c *context
	q *queue
}

// queue is one stream's work not yet run (CUEMU_ASYNC=deferred).
type queue struct {
	blocking bool
	ops      []func()
}

// MakeStream creates a stream in the current context.
func MakeStream(flags StreamFlags) (Stream, error) {
	mu.Lock()
	defer mu.Unlock()
	c := currentLocked("cuStreamCreate")
	q := &queue{blocking: flags&NonBlocking == 0}
	c.queues = append(c.queues, q)
	return Stream{c, q}, nil
}

// Synchronize runs the stream's queued work (the null stream's: every blocking stream's).
func (s Stream) Synchronize() error {
	mu.Lock()
	defer mu.Unlock()
	c := currentLocked("cuStreamSynchronize")
	s.check("cuStreamSynchronize", c)
	if s.q == nil {
		flushLocked(c, true)
	} else {
		s.q.runLocked()
	}
	return nil
}

// issueLocked runs op now, or under CUEMU_ASYNC=deferred queues it on s: the null stream's
// operations first wait for every blocking stream's, as the legacy stream does.
func (s Stream) issueLocked(c *context, op func()) {
	switch {
	case !config.deferred:
		op()
	case s.q == nil:
		flushLocked(c, true)
		op()
	default:
		s.q.ops = append(s.q.ops, op)
	}
}

func (q *queue) runLocked() {
	for len(q.ops) > 0 {
		op := q.ops[0]
		q.ops = q.ops[1:]
		op()
	}
}

// flushLocked runs the queued work of c's streams, of the blocking ones only when blocking:
// what a synchronous copy on the legacy stream waits for.
func flushLocked(c *context, blocking bool) {
	for _, q := range c.queues {
		if q.blocking || !blocking {
			q.runLocked()
		}
	}
}

// check panics when s belongs to another context than c (the null stream belongs to all).
func (s Stream) check(call string, c *context) {
	if s.c != nil && s.c != c {
		violation("%s: stream of context %d used in context %d", call, s.c.id, c.id)
	}
}
