package cuda

import (
	"testing"

	"github.com/mtrl-go/mtrl/internal/kernelbuild"
)

// TestExampleKernelsGenerated is the drift check of testdata's committed PTX (the
// bring-your-own-kernels Example's kernel).
func TestExampleKernelsGenerated(t *testing.T) {
	kernelbuild.Check(t, "testdata", "go generate ./cuda")
}
