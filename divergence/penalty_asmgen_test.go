package divergence

import (
	"testing"

	"github.com/mtrl-go/mtrl/internal/asmcheck"
)

// TestPenaltyAsmUpToDate fails when penalty_amd64.s or penalty_stub_amd64.go differ from what internal/asmgen generates:
// edit the generator, then run go generate ./divergence.
func TestPenaltyAsmUpToDate(t *testing.T) { asmcheck.UpToDate(t, "penalty", "divergence") }
