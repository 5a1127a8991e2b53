//go:build !amd64 || noasm

package tensor

import "github.com/mtrl-go/mtrl/internal/dispatch"

// convSIMD returns no vector conversions: this build uses the Go loops only.
func convSIMD() []dispatch.Impl[bf16Conv] { return nil }
