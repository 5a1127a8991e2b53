package kernels

import (
	"testing"

	"github.com/mtrl-go/mtrl/internal/kernelbuild"
)

// TestGenerated is the drift check of the committed PTX.
func TestGenerated(t *testing.T) {
	kernelbuild.Check(t, ".", "go generate ./examples/internal/vlm/kernels")
}
