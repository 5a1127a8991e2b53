//go:build !amd64 || noasm

package hostops

// simdMaskedImpls returns no vector implementations: this build uses the pure-Go loops only.
func simdMaskedImpls() []maskedImpl { return nil }
