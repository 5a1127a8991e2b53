// The LM head's data movement: the text rows of the sequence [B, S, D] to [B, L, D] before the
// final LayerNorm, and their gradient back (the image rows of dx get zero). The head's product
// and bias are gemm.cu and mlp.cu's.
#include "vlm.cuh"

extern "C" __global__ void vlm_text_rows_fwd_f32(float* xt, const float* x, int64_t b, int64_t l, int64_t s, int64_t np, int64_t d) {
    VLM_FOR(idx, b * l * d) {
        int64_t k = idx % d, t = (idx / d) % l, r = idx / (d * l);
        xt[idx] = x[(r * s + np + t) * d + k];
    }
}

extern "C" __global__ void vlm_text_rows_bwd_f32(float* dx, const float* dxt, int64_t b, int64_t l, int64_t s, int64_t np, int64_t d) {
    VLM_FOR(idx, b * s * d) {
        int64_t k = idx % d, i = (idx / d) % s, r = idx / (d * s);
        dx[idx] = i < np ? 0.f : dxt[(r * l + i - np) * d + k];
    }
}
