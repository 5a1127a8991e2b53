package parallel

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// TestPanicReachesCaller: a panic in a worker goroutine is re-raised in For's caller, where
// it can be recovered (a panic left in a worker would end the process).
func TestPanicReachesCaller(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	got := func() (r any) {
		defer func() { r = recover() }()
		For(64, 1, func(lo, hi int) {
			if lo == 37 {
				panic("chunk 37")
			}
		})
		return nil
	}()
	if got != "chunk 37" {
		t.Fatalf("recovered %v, want the worker's panic", got)
	}
	var n atomic.Int64
	For(10, 3, func(lo, hi int) { n.Add(int64(hi - lo)) }) // For still works afterwards
	if n.Load() != 10 {
		t.Fatalf("visited %d of 10", n.Load())
	}
}
