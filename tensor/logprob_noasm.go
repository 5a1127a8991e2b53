//go:build !amd64 || noasm

package tensor

// simdImpls returns no vector implementations: this build uses the pure-Go loops only.
func simdImpls() []lpImpl { return nil }
