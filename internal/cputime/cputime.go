// Package cputime reads the CPU time the process has used, for benchmarks on shared machines:
// work per CPU-second is far less sensitive to other users' load than work per wall-second,
// which time-slicing on an oversubscribed machine can cut by any factor.
package cputime

import "time"

// Process returns the user plus system CPU time of the process so far, summed over its
// threads; ok is false where the platform does not report it.
func Process() (d time.Duration, ok bool) { return process() }
