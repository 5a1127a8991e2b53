//go:build !unix

package gemm

// MoveOffHeap reports false: without mmap the panels stay in the Go heap.
func (p *Packed) MoveOffHeap() bool { return false }
