// Package tensor is mtrl's one tensor type and the contract its backends implement.
//
// A Tensor is a dense row-major array of float32, bfloat16, int32 or uint8 in storage owned by a
// Backend. The CPU backend (CPU) wraps ordinary Go slices without copying, so code holding a
// []float32 pays nothing:
//
//	logits, _ := tensor.FromFloat32(data, 256, 151936) // [N, V], shares data
//	v, _ := logits.Float32s()                          // the same slice back
//
// # Backends
//
// Backend is a small core (allocate, upload, download, copy, sync, close) that every backend
// implements in full. Compute is optional: each op family declares an interface such as
// LogProbEntropyKernel, and a backend that implements it gets the call. Otherwise the
// validated entry point stages the tensors through host memory (OnHost) and runs the pure-Go
// kernel. The CPU backend has no kernels of its own; on it OnHost is free. A new backend is
// thus correct on day one and fast one op family at a time. The CUDA backend lives in package
// cuda behind the cuda build tag; tensortest is the conformance suite every backend runs.
//
// # Ops
//
//   - LogProbEntropy / LogProbEntropyBackward: the fused pass over logits [..., V] that yields
//     the target token's log-probability and the entropy, online softmax, no [N, V] temporary.
//   - MaskedSum, MaskedMean, MaskedMeanRows, MaskedVar, MaskedWhiten: the reference's masked
//     statistics (masked_mean = sum(v*m)/(sum(m)+1e-8) in float32).
//   - TopPMask, TopPCount: per-row top-p selection with k = ceil(float32(n)*float32(p)) and
//     stable ties (lower index wins).
//   - ResponseMask: 1 up to and including the first end-of-sequence token.
//
// Shapes in docs use [B, T, V]: sequences, response tokens, vocabulary. Masks are float32 0/1
// tensors with the values' shape; token ids are int32.
//
// # Errors
//
// Every entry point validates shapes, dtypes, backends and parameters before any work and
// returns an *Error that names the op and the argument and wraps one of the sentinels (ErrShape,
// ErrDType, ErrBackend, ErrParam, ErrNotFinite, ErrDevice), so errors.Is works. Data never
// causes a panic. NaN and Inf propagate; CheckFinite is the opt-in check.
//
// # Determinism
//
// CPU kernels run in parallel over rows with chunk boundaries that depend only on the problem
// size (internal/parallel), and every reduction is sequential within a chunk, so results are
// bit-identical for any GOMAXPROCS.
package tensor
