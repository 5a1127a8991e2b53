// Package hostops holds the pure-Go kernels on plain slices that the validated tensor ops and the
// algorithm packages share: masked reductions with the reference's float32 numerics, per-row top-p
// selection, and a fast float32 exp. Nothing here validates its input; callers do.
package hostops
