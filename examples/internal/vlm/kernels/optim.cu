// The optimizer step on the device: AdamW (the example trainer's adamw.go, elementwise in its
// float32 order with a float64 square root, so its bits), the squared L2 norm of a gradient for
// clipping and the non-finite check (float64 partial sums in a fixed block tree; the host adds
// the per-parameter results in parameter order), and the clip scaling.
#include "vlm.cuh"

extern "C" __global__ void vlm_adamw_f32(float* w, const float* g, float* m, float* v, int64_t n, float b1, float b2,
                                         float step_size, float inv_sqrt_bc2, float eps, float shrink) {
    VLM_FOR(j, n) {
        float gj = g[j];
        m[j] = b1 * m[j] + (1.f - b1) * gj;
        v[j] = b2 * v[j] + (1.f - b2) * gj * gj;
        float denom = (float)sqrt((double)v[j]) * inv_sqrt_bc2 + eps;
        w[j] = w[j] * shrink - step_size * m[j] / denom;
    }
}

// out[0] = Σ g² in float64 over n values: one block of VLM_BLOCK threads, each a strided
// partial sum, then a fixed pairwise tree in shared memory.
extern "C" __global__ void __launch_bounds__(VLM_BLOCK) vlm_sumsq_f32(double* out, const float* g, int64_t n) {
    __shared__ double part[VLM_BLOCK];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += VLM_BLOCK) s += (double)g[i] * (double)g[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = VLM_BLOCK / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = part[0];
}

extern "C" __global__ void vlm_scale_f32(float* g, int64_t n, float s) {
    VLM_FOR(i, n) { g[i] *= s; }
}

// Gradient bookkeeping that stays on the device: zeroing (ZeroGrad, after an optimizer step)
// and the in-order sum of micro-batch gradients (acc += g, the trainer's host accumulation).
extern "C" __global__ void vlm_zero_f32(float* x, int64_t n) {
    VLM_FOR(i, n) { x[i] = 0.f; }
}

extern "C" __global__ void vlm_add_f32(float* acc, const float* g, int64_t n) {
    VLM_FOR(i, n) { acc[i] += g[i]; }
}
