package cu

// #include <string.h>
// #include "runtime.h"
import "C"

import (
	"cmp"
	"fmt"
	"slices"
	"unsafe"
)

// DevicePtr is a device address: in the emulator, the address of host memory from cuemu_alloc.
type DevicePtr uintptr

// allocation is one live cuMemAlloc.
type allocation struct {
	base DevicePtr
	ptr  unsafe.Pointer // the same address as C memory, so that Go may point into it
	size int64
	cap  int64 // the C allocation's size (CUEMU_ALLOC=reuse hands out a range again)
	ctx  *context
}

var (
	live  []*allocation // sorted by base; guarded by mu
	freed []*allocation // the most recent frees, for messages about dangling pointers
	used  = map[Device]int64{}
	// spare are the freed ranges of each context that CUEMU_ALLOC=reuse hands out again, the
	// most recent last, with the bytes they held.
	spare = map[*context][]*allocation{}
)

const keepFreed = 256

func byBase(a *allocation, p DevicePtr) int { return cmp.Compare(a.base, p) }

// MemAlloc allocates bytesize bytes of device memory filled with 0xff bytes.
func MemAlloc(bytesize int64) (DevicePtr, error) {
	mu.Lock()
	defer mu.Unlock()
	c := currentLocked("cuMemAlloc")
	if bytesize <= 0 {
		return 0, errorf(InvalidValue, "cuMemAlloc of %d bytes", bytesize)
	}
	if used[c.device]+bytesize > config.memory {
		return 0, errorf(OutOfMemory, "cuMemAlloc of %d bytes with %d of %d in use (CUEMU_MEMORY)", bytesize, used[c.device], config.memory)
	}
	var a *allocation
	if config.reuse {
		a = reuseLocked(c, bytesize)
	}
	if a == nil {
		p := C.cuemu_alloc(C.size_t(bytesize))
		if p == nil {
			return 0, errorf(OutOfMemory, "the host allocator refused %d bytes", bytesize)
		}
		a = &allocation{base: DevicePtr(uintptr(p)), ptr: p, size: bytesize, cap: bytesize, ctx: c}
	}
	i, _ := slices.BinarySearchFunc(live, a.base, byBase)
	live = slices.Insert(live, i, a)
	used[c.device] += bytesize
	return a.base, nil
}

// MemFree frees an allocation; freeing anything but the base of a live allocation of the current
// context is a violation.
func MemFree(dptr DevicePtr) error {
	mu.Lock()
	defer mu.Unlock()
	c := currentLocked("cuMemFree")
	i, ok := slices.BinarySearchFunc(live, dptr, byBase)
	if !ok {
		violation("cuMemFree(%#x): %s", uintptr(dptr), describeLocked(dptr))
	}
	a := live[i]
	if a.ctx != c {
		violation("cuMemFree(%#x): allocation of context %d freed in context %d", uintptr(dptr), a.ctx.id, c.id)
	}
	flushLocked(c, false) // cuMemFree waits for the device's work
	releaseLocked(i)
	return nil
}

// reuseLocked returns, under CUEMU_ALLOC=reuse, the most recently freed range of c that holds
// n bytes and is at most twice that (a GPU's allocator hands freed ranges out again, last freed
// first, with whatever they held), or nil.
func reuseLocked(c *context, n int64) *allocation {
	s := spare[c]
	for i := len(s) - 1; i >= 0; i-- {
		if f := s[i]; f.cap >= n && f.cap <= 2*n {
			spare[c] = slices.Delete(s, i, i+1)
			return &allocation{base: f.base, ptr: f.ptr, size: n, cap: f.cap, ctx: c}
		}
	}
	return nil
}

// releaseLocked frees live[i]; under CUEMU_ALLOC=reuse a freed range of a live context is kept
// for reuseLocked.
func releaseLocked(i int) {
	a := live[i]
	live = slices.Delete(live, i, i+1)
	used[a.ctx.device] -= a.size
	if config.reuse && a.ctx.live {
		spare[a.ctx] = append(spare[a.ctx], a)
	} else {
		C.cuemu_free(a.ptr)
	}
	freed = append(freed, a)
	if len(freed) > keepFreed {
		freed = freed[len(freed)-keepFreed:]
	}
}

// freeContextLocked frees every allocation of c (cuCtxDestroy).
func freeContextLocked(c *context) {
	c.live = false // nothing is kept for reuse
	for i := len(live) - 1; i >= 0; i-- {
		if live[i].ctx == c {
			releaseLocked(i)
		}
	}
	for _, a := range spare[c] {
		C.cuemu_free(a.ptr)
	}
	delete(spare, c)
}

// findLocked returns the live allocation holding [p, p+n) (n may be 0: p may then be its end).
func findLocked(p DevicePtr, n int64) *allocation {
	i, _ := slices.BinarySearchFunc(live, p, byBase)
	// live[i-1] is the last allocation starting at or below p (or live[i] starts at p).
	for _, j := range []int{i, i - 1} {
		if j < 0 || j >= len(live) {
			continue
		}
		a := live[j]
		if p >= a.base && int64(p-a.base)+n <= a.size {
			return a
		}
	}
	return nil
}

// describeLocked says what p is, for a violation message.
func describeLocked(p DevicePtr) string {
	for _, a := range live {
		if p >= a.base && p <= a.base+DevicePtr(a.size) {
			return fmt.Sprintf("%#x is inside a live allocation of %d bytes at %#x, but the range runs past its end", uintptr(p), a.size, uintptr(a.base))
		}
	}
	for j := len(freed) - 1; j >= 0; j-- {
		a := freed[j]
		if p >= a.base && p < a.base+DevicePtr(a.size) {
			return fmt.Sprintf("%#x is inside a freed allocation of %d bytes at %#x (use after free)", uintptr(p), a.size, uintptr(a.base))
		}
	}
	return fmt.Sprintf("%#x is not device memory", uintptr(p))
}

// checkRangeLocked panics unless [p, p+n) lies inside one live allocation of c, and returns the
// range's bytes.
func checkRangeLocked(call string, c *context, p DevicePtr, n int64) []byte {
	if n < 0 {
		violation("%s: negative byte count %d", call, n)
	}
	a := findLocked(p, n)
	if a == nil {
		violation("%s: [%#x, +%d): %s", call, uintptr(p), n, describeLocked(p))
	}
	if a.ctx != c {
		violation("%s: [%#x, +%d) belongs to context %d, the current one is %d", call, uintptr(p), n, a.ctx.id, c.id)
	}
	return unsafe.Slice((*byte)(unsafe.Add(a.ptr, int(p-a.base))), n)
}

func hostBytes(p unsafe.Pointer, n int64) []byte { return unsafe.Slice((*byte)(p), n) }

// MemcpyHtoD copies ByteCount bytes from host memory to device memory.
func MemcpyHtoD(dstDevice DevicePtr, srcHost unsafe.Pointer, ByteCount int64) error {
	mu.Lock()
	defer mu.Unlock()
	c := currentLocked("cuMemcpyHtoD")
	flushLocked(c, true) // a synchronous copy runs on the legacy stream
	copy(checkRangeLocked("cuMemcpyHtoD", c, dstDevice, ByteCount), hostBytes(srcHost, ByteCount))
	return nil
}

// MemcpyDtoH copies ByteCount bytes from device memory to host memory.
func MemcpyDtoH(dstHost unsafe.Pointer, srcDevice DevicePtr, ByteCount int64) error {
	mu.Lock()
	defer mu.Unlock()
	c := currentLocked("cuMemcpyDtoH")
	flushLocked(c, true)
	copy(hostBytes(dstHost, ByteCount), checkRangeLocked("cuMemcpyDtoH", c, srcDevice, ByteCount))
	return nil
}

// MemcpyDtoDAsync copies between device ranges; overlapping ranges (a range onto itself
// included) are a violation: the CUDA documentation leaves them undefined.
func MemcpyDtoDAsync(dstDevice, srcDevice DevicePtr, ByteCount int64, hStream Stream) error {
	mu.Lock()
	defer mu.Unlock()
	c := currentLocked("cuMemcpyDtoDAsync")
	hStream.check("cuMemcpyDtoDAsync", c)
	dst := checkRangeLocked("cuMemcpyDtoDAsync (dst)", c, dstDevice, ByteCount)
	src := checkRangeLocked("cuMemcpyDtoDAsync (src)", c, srcDevice, ByteCount)
	if ByteCount > 0 && dstDevice < srcDevice+DevicePtr(ByteCount) && srcDevice < dstDevice+DevicePtr(ByteCount) {
		violation("cuMemcpyDtoDAsync: source [%#x, +%d) and destination [%#x, +%d) overlap (undefined on a GPU)",
			uintptr(srcDevice), ByteCount, uintptr(dstDevice), ByteCount)
	}
	hStream.issueLocked(c, func() { copy(dst, src) })
	return nil
}

// MemsetD8Async sets N bytes to uc.
func MemsetD8Async(dstDevice DevicePtr, uc byte, N int64, hStream Stream) error {
	mu.Lock()
	defer mu.Unlock()
	c := currentLocked("cuMemsetD8Async")
	hStream.check("cuMemsetD8Async", c)
	if b := checkRangeLocked("cuMemsetD8Async", c, dstDevice, N); N > 0 {
		hStream.issueLocked(c, func() { C.memset(unsafe.Pointer(&b[0]), C.int(uc), C.size_t(N)) })
	}
	return nil
}

// deviceRangeLocked panics unless [p, p+n) lies inside one live allocation of a context on
// dev, and returns the range's bytes: the check of the NCCL stand-in, whose communicators
// belong to a device, not to the calling thread's context.
func deviceRangeLocked(call string, dev Device, p DevicePtr, n int64) []byte {
	if n < 0 {
		violation("%s: negative byte count %d", call, n)
	}
	if config.deferred { // a collective runs after the work queued on its device
		for _, a := range live {
			if a.ctx.device == dev {
				flushLocked(a.ctx, false)
			}
		}
	}
	a := findLocked(p, n)
	if a == nil {
		violation("%s: [%#x, +%d): %s", call, uintptr(p), n, describeLocked(p))
	}
	if a.ctx.device != dev {
		violation("%s: [%#x, +%d) is memory of device %d, the communicator's is %d", call, uintptr(p), n, int(a.ctx.device), int(dev))
	}
	return unsafe.Slice((*byte)(unsafe.Add(a.ptr, int(p-a.base))), n)
}
