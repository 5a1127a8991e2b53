//go:build !amd64 || noasm

package tensor

import "github.com/mtrl-go/mtrl/internal/dispatch"

// attnSIMDImpls returns no vector implementations: this build uses the pure-Go row loops.
func attnSIMDImpls() []dispatch.Impl[attnSIMD] { return nil }
