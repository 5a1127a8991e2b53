// Package gemm is the CPU matrix multiply of linear layers: C[M, N] = A[M, K] · Wᵀ for a weight W
// [N, K] (out × in, as Hugging Face stores nn.Linear) packed once into panels of 64 output
// columns, each K rows of 64 contiguous float32 (zero-padded past N). Packing is the only
// transpose: it is done once per weight (and again after an optimizer step), never per call.
//
// Mul splits the panels over the cores (internal/parallel). For each panel it walks K in blocks
// of KBlock rows (the panel block, 32 KiB, stays in L1) and, for every group of up to seven rows
// of A (six on AVX2), calls a register-blocked micro-kernel that keeps the 7×64 tile of C in
// registers and prefetches it before it adds into it: generated with avo (internal/asmgen, gemm
// family) for AVX-512 (one call per 64 columns) and AVX2 with FMA (four calls of 16 columns),
// with a pure-Go twin of the same loops where neither is available. A row of C is summed over each K block in ascending order (FMAs in the vector
// kernels) and the blocks are added in order, so results do not depend on GOMAXPROCS; they
// differ from a plain float32 dot product in the last bits. For at most DecodeRows rows of A
// (decode) each goroutine walks its panels one at a time over all of K: one contiguous stream of
// weight. From five row groups of seven up (M ≥ 29) the calls over a K block also prefetch the
// block two ahead, which the memory would otherwise fetch only when the first call reaches it.
//
// MulBF16 is the same for bfloat16 A and W on CPUs with AVX512_BF16 (bf16.go): W packed as
// bfloat16 pairs (half the bytes), VDPBF16PS micro-kernels (gemmbf16 family, emitted as EVEX
// bytes: Go's assembler has no mnemonic for it) with exact products and float32 sums, a pure-Go
// twin that adds in the same order, and BF16 to tell callers whether to use it or widen to
// float32 and call Mul.
package gemm
