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
// combines them in chunk order gets the same bits on any machine. A panic in fn reaches For's
// caller, as it would from a plain loop.
func For(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	chunks := n / grain
	if n%grain != 0 {
		chunks++
	}
	workers := min(runtime.GOMAXPROCS(0), chunks)
	if workers <= 1 {
		for lo := 0; lo < n; lo += grain {
			fn(lo, min(lo+grain, n))
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var panicOnce sync.Once
	var panicked any
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A panic in fn is re-raised in the caller's goroutine, where it can be recovered;
			// left in the worker it would end the process.
			defer func() {
				if r := recover(); r != nil {
					panicOnce.Do(func() { panicked = r })
					next.Store(int64(chunks))
				}
			}()
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
	if panicked != nil {
		panic(panicked)
	}
}

// Grain picks a chunk size of whole rows so that each chunk holds about target elements.
func Grain(rowLen, target int) int {
	if rowLen <= 0 {
		return 1
	}
	return max(1, target/rowLen)
}
