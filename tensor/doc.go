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
//   - The transformer ops, forward and backward (docs/ops.md): MatMul, PackWeight and Linear,
//     RMSNorm, LayerNorm, RoPE (with Qwen2-VL's multimodal sections), Attention (flash-style,
//     grouped-query, packed variable-length sequences, KV-cache decode), Activate and SwiGLU,
//     Embedding, AdamWStep, ClipGradNorm and the fused LM head LMHeadLogProbs. Package nntest
//     is their conformance suite.
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
//
// # Performance
//
// On amd64 the vocabulary-wide loops of LogProbEntropy and LogProbEntropyBackward run in
// assembly kernels generated with avo (internal/asmgen, its own module; go generate ./tensor
// rebuilds logprob_amd64.s and a test fails if the committed file is stale). The CPU's features
// are detected at start-up: AVX-512F (16 lanes), else AVX2 with FMA (8 lanes), else the pure-Go
// loops, which stay the reference and are what other architectures and -tags noasm build.
// bfloat16 logits are widened in registers. The online softmax keeps its structure: the kernel
// folds a block of 4096 logits while it loads the next block and takes its maximum, and Go
// rescales the running sums in float64 between blocks.
//
// Numerics of the kernels: exp uses k = round(u*log2e), Cody-Waite ln2 hi/lo and a degree-7
// polynomial with FMAs on AVX-512, an 8-entry 2^(j/8) table (one VPERMD) and a degree-4
// polynomial on AVX2, and a 128-entry 2^(j/128) table with a degree-2 polynomial in the pure-Go
// loops (hostops.ExpNonPosTable); all are within about 1.3 float32 ulp (worst relative error
// 7.6e-8, 1.4e-7 and 1.45e-7). Sums are float32 per lane and combined in a fixed order, so
// results are bit-identical across runs and GOMAXPROCS but differ from the pure-Go path in the
// last bits (about 1e-7 relative in logp and entropy, 2e-6 in small gradients).
//
// Large float32 gradients (32 MiB and up) are written with non-temporal stores. The measured
// throughput of each path is in the dated pages under docs/ (see docs/README.md).
//
// The masked reductions (MaskedSum, MaskedMean, MaskedVar, MaskedWhiten) use vector kernels of
// the same kind (internal/hostops): each product is rounded to float32 as in the reference and
// added into float64 lanes combined in a fixed order. Top-p selection is an O(T) radix select per
// row with exactly the stable-sort result (internal/hostops.TopPRow).
package tensor
