package tensor

import (
	"testing"

	"github.com/mtrl-go/mtrl/internal/asmcheck"
)

// TestLogProbAsmUpToDate fails when logprob_amd64.s or logprob_stub_amd64.go differ from what internal/asmgen generates:
// edit the generator, then run go generate ./tensor.
func TestLogProbAsmUpToDate(t *testing.T) { asmcheck.UpToDate(t, "logprob", "tensor") }
