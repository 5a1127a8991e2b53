// divergence: per-token KL penalties (compute_kl), their gradients, the full-distribution KL, the
// perception score and the KL-penalised rewards. Elementwise kernels use a grid-stride loop over
// int64 indices; divergence_full_fwd_f32 reduces one row per block in float64 in a fixed order.
// Kinds: 0 kl, 1 abs, 2 mse, 3 low_var_kl, 4 full (divergence.Kind).
#include "common.cuh"

#define DIFF_CLAMP 20.f
#define LOW_VAR_KL_CLAMP 10.f
#define PERCEPTION_MAX 10.f

extern "C" {

__global__ void divergence_penalty_fwd_f32(float* dst, const float* lp, const float* ref, int64_t n, int64_t kind) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float a = lp[i], b = ref[i], r;
        switch (kind) {
        case 0:
            r = a - b;
            break;
        case 1: {
            float d = a - b;
            r = d < 0.f ? -d : d;
            break;
        }
        case 2: {
            float d = a - b;
            r = 0.5f * d * d;
            break;
        }
        default: {
            float x = clampf(b - a, -DIFF_CLAMP, DIFF_CLAMP);
            r = clampf(expf(x) - x - 1.f, -LOW_VAR_KL_CLAMP, LOW_VAR_KL_CLAMP);
        }
        }
        dst[i] = r;
    }
}

// dst = dpen[i / v] * d penalty / d lp[i], exactly 0 where dpen is 0 (v = V for full, else 1).
__global__ void divergence_penalty_bwd_f32(float* dst, const float* lp, const float* ref, const float* dpen, int64_t n, int64_t v,
                                           int64_t kind) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float u = dpen[i / v];
        if (u == 0.f) {
            dst[i] = 0.f;
            continue;
        }
        float a = lp[i], b = ref[i], r;
        switch (kind) {
        case 0:
            r = 1.f;
            break;
        case 1: {
            float d = a - b;
            r = d > 0.f ? 1.f : (d < 0.f ? -1.f : (d == 0.f ? 0.f : d));
            break;
        }
        case 2:
            r = a - b;
            break;
        case 3: {
            float x0 = b - a;
            float x = clampf(x0, -DIFF_CLAMP, DIFF_CLAMP);
            float e = expf(x);
            float y = e - x - 1.f;
            r = (inside(x0, -DIFF_CLAMP, DIFF_CLAMP) && inside(y, -LOW_VAR_KL_CLAMP, LOW_VAR_KL_CLAMP)) ? 1.f - e : 0.f;
            break;
        }
        default:
            r = expf(a) * (a - b + 1.f);
        }
        dst[i] = u * r;
    }
}

// One block per row r of [rows, v]: dst[r] = sum_v exp(lp)*(lp - ref), float64 accumulation.
__global__ void __launch_bounds__(MTRL_BLOCK) divergence_full_fwd_f32(float* dst, const float* lp, const float* ref, int64_t v) {
    __shared__ double scratch[MTRL_WARPS];
    int64_t row = blockIdx.x;
    const float* l = lp + row * v;
    const float* q = ref + row * v;
    double s = 0;
    for (int64_t i = threadIdx.x; i < v; i += MTRL_BLOCK) {
        s += (double)(expf(l[i]) * (l[i] - q[i]));
    }
    s = block_sum_f64(s, scratch);
    if (threadIdx.x == 0) dst[row] = (float)s;
}

__global__ void divergence_perception_fwd_f32(float* dst, const float* old, const float* aug, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float d = clampf(aug[i] - old[i], -DIFF_CLAMP, DIFF_CLAMP);
        dst[i] = clampf(expf(d) - d - 1.f, 0.f, PERCEPTION_MAX);
    }
}

__global__ void divergence_rewards_fwd_f32(float* dst, const float* scores, const float* lp, const float* ref, int64_t n, float kl_ratio) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float kl = lp[i] - ref[i];
        dst[i] = scores[i] - kl * kl_ratio;
    }
}

}  // extern "C"
