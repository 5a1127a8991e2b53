// Masked reductions (tensor.MaskedSum): sum(v*m) and sum(m) over all elements, skipping
// positions with m == 0 (so NaN under a zero mask does not propagate), accumulated in float64 as
// the host kernel does. Two passes with a fixed split: masked_sum_partial_fwd_f32 reduces chunk b
// into partial[2b:2b+2]; masked_sum_final_fwd_f32 (one block) reduces the partials in a fixed
// tree. The chunking depends only on n, so the result does not change from run to run.
#include "common.cuh"

extern "C" {

__global__ void __launch_bounds__(MTRL_BLOCK) masked_sum_partial_fwd_f32(double* partial, const float* v, const float* m, int64_t n, int64_t chunk) {
    __shared__ double scratch[MTRL_WARPS];
    int64_t lo = (int64_t)blockIdx.x * chunk;
    int64_t hi = lo + chunk < n ? lo + chunk : n;
    double s = 0, c = 0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += MTRL_BLOCK) {
        float w = m[i];
        if (w != 0.f) {
            s += (double)(v[i] * w);
            c += (double)w;
        }
    }
    s = block_sum_f64(s, scratch);
    c = block_sum_f64(c, scratch);
    if (threadIdx.x == 0) {
        partial[2 * (int64_t)blockIdx.x] = s;
        partial[2 * (int64_t)blockIdx.x + 1] = c;
    }
}

__global__ void __launch_bounds__(MTRL_BLOCK) masked_sum_final_fwd_f32(double* out, const double* partial, int64_t g) {
    __shared__ double scratch[MTRL_WARPS];
    double s = 0, c = 0;
    for (int64_t i = threadIdx.x; i < g; i += MTRL_BLOCK) {
        s += partial[2 * i];
        c += partial[2 * i + 1];
    }
    s = block_sum_f64(s, scratch);
    c = block_sum_f64(c, scratch);
    if (threadIdx.x == 0) {
        out[0] = s;
        out[1] = c;
    }
}

}  // extern "C"

// The other masked statistics (tensor.MaskedStatsKernel). Row means: one block per row, float64
// accumulation in a fixed block order, dst = float(sum) / (float(count) + 1e-8) as hostops.MeanOf.
extern "C" {

__global__ void __launch_bounds__(MTRL_BLOCK) masked_meanrows_fwd_f32(float* dst, const float* v, const float* m, int64_t cols) {
    __shared__ double scratch[MTRL_WARPS];
    int64_t base = (int64_t)blockIdx.x * cols;
    double s = 0, c = 0;
    for (int64_t t = threadIdx.x; t < cols; t += MTRL_BLOCK) {
        float w = m[base + t];
        if (w != 0.f) {
            s += (double)(v[base + t] * w);
            c += (double)w;
        }
    }
    s = block_sum_f64(s, scratch);
    c = block_sum_f64(c, scratch);
    if (threadIdx.x == 0) dst[blockIdx.x] = (float)s / ((float)c + 1e-8f);
}

// Squared deviations from the float32 mean: partial[2b] = sum float((v-mean)*(v-mean)*m) over
// chunk b (m != 0), partial[2b+1] = 0, so masked_sum_final_fwd_f32 finishes it.
__global__ void __launch_bounds__(MTRL_BLOCK) masked_sqdev_partial_fwd_f32(double* partial, const float* v, const float* m, int64_t n, int64_t chunk, float mean) {
    __shared__ double scratch[MTRL_WARPS];
    int64_t lo = (int64_t)blockIdx.x * chunk;
    int64_t hi = lo + chunk < n ? lo + chunk : n;
    double s = 0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += MTRL_BLOCK) {
        float w = m[i];
        if (w != 0.f) {
            float c = v[i] - mean;
            s += (double)(c * c * w);
        }
    }
    s = block_sum_f64(s, scratch);
    if (threadIdx.x == 0) {
        partial[2 * (int64_t)blockIdx.x] = s;
        partial[2 * (int64_t)blockIdx.x + 1] = 0;
    }
}

// dst = (v - mean) * scale at every position (dst may be v).
__global__ void __launch_bounds__(MTRL_BLOCK) masked_whiten_fwd_f32(float* dst, const float* v, int64_t n, float mean, float scale) {
    for (int64_t i = (int64_t)blockIdx.x * MTRL_BLOCK + threadIdx.x; i < n; i += (int64_t)gridDim.x * MTRL_BLOCK) {
        dst[i] = (v[i] - mean) * scale;
    }
}

}  // extern "C"
