package cputime

import "testing"

// TestProcessAdvances: spinning for a while shows up as CPU time.
func TestProcessAdvances(t *testing.T) {
	before, ok := Process()
	if !ok {
		t.Skip("SKIP: no CPU time on this platform")
	}
	x := 1.0
	for i := range 50_000_000 {
		x += float64(i & 7)
	}
	after, _ := Process()
	if after <= before || x == 0 {
		t.Fatalf("CPU time went from %v to %v over a busy loop", before, after)
	}
}
