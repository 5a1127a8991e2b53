package ppo

import (
	"testing"

	"github.com/mtrl-go/mtrl/internal/asmcheck"
)

// TestPolicyAsmUpToDate fails when policy_amd64.s or policy_stub_amd64.go differ from what internal/asmgen generates:
// edit the generator, then run go generate ./ppo.
func TestPolicyAsmUpToDate(t *testing.T) { asmcheck.UpToDate(t, "policy", "ppo") }
