// Shared helpers of the example model's kernels (examples/internal/vlm: the sampler and the
// optimizer; its layers run the SDK's ops). Every kernel is extern "C", float32, int64 sizes;
// compiled with -fmad=false so each operation rounds as the host's does. No floating-point
// atomics: every sum runs in a fixed order, and the ones that the host runs sequentially run
// sequentially here (one thread per output), so those results are the host's bits.
#pragma once
#include <stdint.h>

#define VLM_BLOCK 256

// The grid-stride loop over n elements of a 1-D launch.
#define VLM_FOR(i, n) for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)
