//go:build cuda

package mtrl_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
)

// TestGoldenCUDA runs every golden case with its inputs on the CUDA backend (build tag cuda):
// the same handlers as TestGolden, so the device kernels are what the reference vectors check,
// and ops without a device kernel are checked through their host staging. MTRL_CUDA_DEVICE
// selects the device (default 0); a missing device skips visibly, or fails when
// MTRL_REQUIRE_CUDA=1 (scripts/cuda-emu sets it).
func TestGoldenCUDA(t *testing.T) {
	n := 0
	if s := os.Getenv("MTRL_CUDA_DEVICE"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	be, err := cuda.New(n)
	if err != nil {
		if os.Getenv("MTRL_REQUIRE_CUDA") == "1" {
			t.Fatalf("MTRL_REQUIRE_CUDA=1 and cuda.New(%d): %v", n, err)
		}
		t.Skipf("SKIP: no CUDA device %d: %v", n, err)
	}
	defer be.Close()
	runGolden(t, be)
}
