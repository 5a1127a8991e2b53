package cu

// #include <stdlib.h>
import "C"

import "unsafe"

// Support for the stand-ins of the CUDA libraries (./blas: cuBLAS), which are not part of
// gorgonia.org/cu's driver API: they check their pointers and streams as the driver calls here do.

// streamHandles maps the handles Stream.C gave out to their streams; guarded by mu.
var streamHandles = map[unsafe.Pointer]Stream{}

// C returns the stream's handle as the C APIs take it (a CUstream): nil for the null stream,
// else the address of a byte allocated for the stream.
func (s Stream) C() unsafe.Pointer {
	if s.c == nil {
		return nil
	}
	mu.Lock()
	defer mu.Unlock()
	for h, o := range streamHandles {
		if o == s {
			return h
		}
	}
	h := C.malloc(1)
	streamHandles[h] = s
	return h
}

// CurrentContext returns the id of the calling OS thread's current context; without one it
// panics, as every emulated call does.
func CurrentContext(call string) int {
	mu.Lock()
	defer mu.Unlock()
	return currentLocked(call).id
}

// CheckStream panics unless h is nil (the null stream) or a handle of Stream.C whose context
// is the calling thread's current one, and that context is live.
func CheckStream(call string, h unsafe.Pointer) {
	mu.Lock()
	defer mu.Unlock()
	c := currentLocked(call)
	if h == nil {
		return
	}
	s, ok := streamHandles[h]
	if !ok {
		violation("%s: %p is not a stream handle", call, h)
	}
	s.check(call, c)
}

// DeviceBytes checks, as a copy does, that [p, p+n) lies inside one live allocation of the
// calling thread's current context, and returns those bytes.
func DeviceBytes(call string, p DevicePtr, n int64) []byte {
	mu.Lock()
	defer mu.Unlock()
	c := currentLocked(call)
	flushLocked(c, false) // the library call runs after the work queued before it
	return checkRangeLocked(call, c, p, n)
}
