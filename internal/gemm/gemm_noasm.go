//go:build !amd64 || noasm

package gemm

import "github.com/mtrl-go/mtrl/internal/dispatch"

// simdImpls returns no vector implementations: this build uses the pure-Go twin.
func simdImpls() []dispatch.Impl[kernels] { return nil }
