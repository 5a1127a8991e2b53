//go:build unix

package gemm

import (
	"runtime"
	"syscall"
	"unsafe"
)

// MoveOffHeap moves the panels into anonymous memory outside the Go heap, unmapped when p is
// collected, and reports whether it did. A weight held for a process's life (a frozen base)
// then no longer counts towards the collector's heap goal, which GOGC sets in proportion to
// the live heap: 2 GB of frozen panels would otherwise let 2 GB of garbage accumulate between
// collections. The panels must only be reached through p (slices of them die with it). On Linux
// the memory is advised for transparent huge pages, which decode streams faster.
func (p *Packed) MoveOffHeap() bool {
	n := len(p.panels)
	if n == 0 || p.offHeap {
		return p.offHeap
	}
	b, err := syscall.Mmap(-1, 0, 4*n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return false
	}
	adviseHugePages(b)
	v := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), n)
	copy(v, p.panels)
	p.panels, p.offHeap = v, true
	runtime.SetFinalizer(p, func(p *Packed) { _ = syscall.Munmap(b) })
	return true
}
