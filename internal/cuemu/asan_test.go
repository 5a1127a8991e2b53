//go:build asan

package cu

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestASanCatchesOutOfBounds runs a kernel that reads one float past the end of its input, in
// a child process (AddressSanitizer ends the process it finds the read in), and checks that the
// report is a heap-buffer-overflow just past the 16-byte input. Built by `go test -asan` only,
// with -fsanitize=address in CGO_CXXFLAGS (scripts/cuda-emu sets it; cmd/go adds it to C
// files only).
func TestASanCatchesOutOfBounds(t *testing.T) {
	if os.Getenv("CUEMU_OOB_CHILD") == "1" {
		m := device(t)
		in := upload(t, []float32{1, 2, 3, 4})
		out := alloc(t, 4)
		launch(t, getFunction(t, m, "cuemu_selftest_oob"), 1, 32, args(uint64(out), uint64(in), 4))
		t.Fatal("the out-of-bounds read was not reported")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestASanCatchesOutOfBounds$")
	cmd.Env = append(os.Environ(), "CUEMU_OOB_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("child exited cleanly:\n%s", out)
	}
	for _, want := range []string{"AddressSanitizer: heap-buffer-overflow", "0 bytes to the right of 16-byte region"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("AddressSanitizer report lacks %q:\n%s", want, out)
		}
	}
}
