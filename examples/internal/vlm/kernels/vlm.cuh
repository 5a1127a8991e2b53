// Shared helpers of the example model's kernels (examples/internal/vlm). Every kernel is
// extern "C", float32, int64 sizes; compiled with -fmad=false so each operation rounds as the
// pure-Go reference's does. No floating-point atomics: every sum runs in a fixed order, and
// the ones that the CPU reference runs sequentially run sequentially here (one thread per
// output), so those results are the reference's bits.
#pragma once
#include <stdint.h>

#define VLM_BLOCK 256

// The grid-stride loop over n elements of a 1-D launch.
#define VLM_FOR(i, n) for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

// keyLimit of the model's attention mask: image tokens (i < np) see the np image tokens, text
// token i sees tokens 0..i.
__device__ __forceinline__ int64_t vlm_key_limit(int64_t i, int64_t np) { return i + 1 > np ? i + 1 : np; }
