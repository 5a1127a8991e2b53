package cu

// #include "runtime.h"
import "C"

import (
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"unsafe"
)

// launched records the kernels this process has launched, for CUEMU_LAUNCH_LOG.
var launched sync.Map

// logLaunch appends the kernel's name to the file named by CUEMU_LAUNCH_LOG the first time the
// process launches it, so that a test script can check that its tests ran every kernel.
func logLaunch(name string) {
	path := os.Getenv("CUEMU_LAUNCH_LOG")
	if path == "" {
		return
	}
	if _, seen := launched.LoadOrStore(name, true); seen {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		violation("CUEMU_LAUNCH_LOG: %v", err)
	}
	defer f.Close()
	fmt.Fprintln(f, name)
}

// Launch runs the kernel on the emulated device: every block, to completion, before it returns
// (under CUEMU_ASYNC=deferred, a created stream's launch when the stream is synchronised).
//
// As gorgonia.org/cu's Launch does, it copies 8 bytes from every parameter pointer; the kernel
// then reads each parameter at the size the PTX declares from the start of its 8 bytes. Invalid
// launch configurations return InvalidValue as the driver does; launches that are undefined on a
// GPU (a wrong parameter count, a 4-byte parameter whose upper 4 bytes are neither zero nor its
// sign extension, a pointer outside live device memory, an execution-model violation inside the
// kernel) panic with the kernel's name.
func (fn Function) Launch(gridDimX, gridDimY, gridDimZ int, blockDimX, blockDimY, blockDimZ int, sharedMemBytes int, stream Stream, kernelParams []unsafe.Pointer) error {
	f := fn.f
	if f == nil {
		return errorf(InvalidHandle, "launch of a zero Function")
	}
	name := f.entry.name
	argv, err := f.prepare(gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, stream, kernelParams)
	if err != nil {
		return err
	}
	logLaunch(name)
	order := 0
	if config.reverse {
		order = 1
	}
	if config.staleShared {
		order |= 2
	}
	run := func() {
		var msg [2048]C.char
		var argp *C.uint64_t
		if len(argv) > 0 {
			argp = (*C.uint64_t)(unsafe.Pointer(&argv[0]))
		}
		rc := C.cuemu_launch(f.kernel.handle, C.uint(gridDimX), C.uint(gridDimY), C.uint(gridDimZ),
			C.uint(blockDimX), C.uint(blockDimY), C.uint(blockDimZ), argp, C.int(order), &msg[0], C.size_t(len(msg)))
		if rc != 0 {
			violation("kernel %s (%s), grid (%d,%d,%d), block (%d,%d,%d): %s", name, f.kernel.source,
				gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, C.GoString(&msg[0]))
		}
	}
	if !config.deferred {
		run()
		return nil
	}
	mu.Lock()
	defer mu.Unlock()
	stream.issueLocked(currentLocked("cuLaunchKernel"), run)
	return nil
}

// prepare validates a launch and returns its parameter slots.
func (f *function) prepare(gx, gy, gz, bx, by, bz, shared int, stream Stream, params []unsafe.Pointer) ([]uint64, error) {
	mu.Lock()
	defer mu.Unlock()
	c := currentLocked("cuLaunchKernel")
	e, k := f.entry, f.kernel
	if f.mod.ctx != c {
		violation("cuLaunchKernel(%s): module of context %d launched in context %d", e.name, f.mod.ctx.id, c.id)
	}
	stream.check("cuLaunchKernel("+e.name+")", c)
	// The driver's limits for sm_80 (grid x < 2^31, y and z < 65536, 1024 threads a block).
	if gx < 1 || gy < 1 || gz < 1 || gx > math.MaxInt32 || gy > 65535 || gz > 65535 {
		return nil, errorf(InvalidValue, "%s: grid (%d,%d,%d)", e.name, gx, gy, gz)
	}
	if bx < 1 || by < 1 || bz < 1 || bx > 1024 || by > 1024 || bz > 64 || bx*by*bz > 1024 {
		return nil, errorf(InvalidValue, "%s: block (%d,%d,%d)", e.name, bx, by, bz)
	}
	if m := e.maxntid; m[0] > 0 && (bx > m[0] || by > m[1] || bz > m[2]) {
		return nil, errorf(InvalidValue, "%s: block (%d,%d,%d) exceeds its .maxntid %d, %d, %d (__launch_bounds__)", e.name, bx, by, bz, m[0], m[1], m[2])
	}
	if shared != 0 {
		return nil, errorf(InvalidValue, "%s: %d bytes of dynamic shared memory: not emulated", e.name, shared)
	}
	if len(params) != len(e.params) {
		violation("cuLaunchKernel(%s): %d parameters passed, the PTX declares %d (%s)", e.name, len(params), len(e.params), strings.Join(k.params, ", "))
	}
	argv := make([]uint64, len(params))
	for i, p := range params {
		if p == nil {
			violation("cuLaunchKernel(%s): parameter %d (%s) is a nil pointer", e.name, i, k.params[i])
		}
		argv[i] = *(*uint64)(p) // as gorgonia.org/cu: 8 bytes from every parameter pointer
		switch size := e.params[i]; {
		case size < 8:
			hi := argv[i] >> (8 * size)
			signBit := argv[i] >> (8*size - 1) & 1
			if hi != 0 && !(signBit == 1 && hi == math.MaxUint64>>(8*size)) {
				violation("cuLaunchKernel(%s): parameter %d (%s) is %s, but its 8-byte slot holds %#016x: the value is not widened from %d bytes (a float64 for a float32?)",
					e.name, i, k.params[i], e.ptxType[i], argv[i], size)
			}
		case size > 8:
			violation("cuLaunchKernel(%s): parameter %d (%s) is %s, %d bytes; gorgonia.org/cu passes 8", e.name, i, k.params[i], e.ptxType[i], size)
		}
		if k.pointer[i] && argv[i] != 0 {
			a := findLocked(DevicePtr(argv[i]), 0)
			if a == nil {
				violation("cuLaunchKernel(%s): parameter %d (%s): %s", e.name, i, k.params[i], describeLocked(DevicePtr(argv[i])))
			}
			if a.ctx != c {
				violation("cuLaunchKernel(%s): parameter %d (%s) points into memory of context %d, launched in context %d", e.name, i, k.params[i], a.ctx.id, c.id)
			}
		}
	}
	return argv, nil
}
