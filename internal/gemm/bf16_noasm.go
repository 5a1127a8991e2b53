//go:build !amd64 || noasm

package gemm

import "github.com/mtrl-go/mtrl/internal/dispatch"

// simdBF16Impls returns no vector implementations: this build uses the pure-Go twin.
func simdBF16Impls() []dispatch.Impl[kernelsBF16] { return nil }
