//go:build !amd64 || noasm

package hostops

import "github.com/mtrl-go/mtrl/internal/dispatch"

// simdMaskedImpls returns no vector implementations: this build uses the pure-Go loops only.
func simdMaskedImpls() []dispatch.Impl[maskedSIMD] { return nil }
