package hostops

import (
	"testing"

	"github.com/mtrl-go/mtrl/internal/asmcheck"
)

// TestMaskedAsmUpToDate fails when masked_amd64.s or masked_stub_amd64.go differ from what internal/asmgen generates:
// edit the generator, then run go generate ./internal/hostops.
func TestMaskedAsmUpToDate(t *testing.T) { asmcheck.UpToDate(t, "masked", "hostops") }
