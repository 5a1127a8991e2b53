//go:build !amd64 || noasm

package tensor

import "github.com/mtrl-go/mtrl/internal/dispatch"

// simdImpls returns no vector implementations: this build uses the pure-Go loops only.
func simdImpls() []dispatch.Impl[lpSIMD] { return nil }
