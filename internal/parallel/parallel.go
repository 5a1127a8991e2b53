// Package parallel runs loops over rows on all cores with a chunking that depends only on the
// problem size, so results never depend on GOMAXPROCS.
package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// For runs fn over [0, n) split into chunks of grain items (the last may be shorter). Chunks run
// concurrently on up to GOMAXPROCS goroutines; each index is visited exactly once. Because chunk
// boundaries depend only on n and grain, a caller that keeps one partial result per chunk and
// combines them in chunk order gets the same bits on any machine.
func For(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	chunks := (n + grain - 1) / grain
	workers := min(runtime.GOMAXPROCS(0), chunks)
	if workers <= 1 {
		for lo := 0; lo < n; lo += grain {
			fn(lo, min(lo+grain, n))
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				lo := c * grain
				fn(lo, min(lo+grain, n))
			}
		}()
	}
	wg.Wait()
}

// Grain picks a chunk size of whole rows so that each chunk holds about target elements.
func Grain(rowLen, target int) int {
	if rowLen <= 0 {
		return 1
	}
	return max(1, target/rowLen)
}
