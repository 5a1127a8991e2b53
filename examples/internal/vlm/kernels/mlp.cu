// The MLP's elementwise parts, forward and backward: the bias of every linear layer (y += b,
// db += column sums of dy) and GELU in its sigmoid form a = u·σ(1.702u), du = da·(σ + 1.702u·σ(1-σ)).
// The column sums run one thread per column over the rows in order (the reference's bits);
// GELU uses the device's expf, within 2 ulp of the host's exp.
#include "vlm.cuh"

#define VLM_GELU_K 1.702f

__device__ __forceinline__ float vlm_sigmoid(float z) { return 1.f / (1.f + expf(-z)); }

extern "C" __global__ void vlm_add_bias_f32(float* y, const float* b, int64_t n, int64_t d) {
    VLM_FOR(i, n * d) { y[i] += b[i % d]; }
}

extern "C" __global__ void vlm_col_sum_f32(float* db, const float* dy, int64_t n, int64_t d) {
    VLM_FOR(k, d) {
        float s = db[k];
        for (int64_t i = 0; i < n; i++) s += dy[i * d + k];
        db[k] = s;
    }
}

extern "C" __global__ void vlm_gelu_fwd_f32(float* a, const float* u, int64_t n) {
    VLM_FOR(i, n) { a[i] = u[i] * vlm_sigmoid(VLM_GELU_K * u[i]); }
}

// da is turned into du in place.
extern "C" __global__ void vlm_gelu_bwd_f32(float* da, const float* u, int64_t n) {
    VLM_FOR(i, n) {
        float s = vlm_sigmoid(VLM_GELU_K * u[i]);
        da[i] *= s + VLM_GELU_K * u[i] * s * (1.f - s);
    }
}
