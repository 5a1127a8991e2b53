// Advantage estimators (package advantage). The recurrences (GAE, REINFORCE++, ReMax returns)
// run one thread per row from t = T-1 down to 0 in float32 (float64 for ReMax's cumulative sum),
// as the pure-Go kernels do; the row scores of the outcome estimators are float64 block sums;
// the group statistics are finished on the host and broadcast back per row. Whitening reuses the
// masked statistics of masked.cu.
#include "common.cuh"

extern "C" {

// GAE raw advantages and returns (ret may be null): g = fl32(gamma), gl = fl32(gamma*lam).
__global__ void __launch_bounds__(MTRL_BLOCK) advantage_gae_fwd_f32(float* adv, float* ret, const float* r, const float* v, const float* m, int64_t rows, int64_t cols, float g, float gl) {
    int64_t row = (int64_t)blockIdx.x * MTRL_BLOCK + threadIdx.x;
    if (row >= rows) return;
    int64_t base = row * cols;
    float nv = 0.f, lg = 0.f;
    for (int64_t t = cols - 1; t >= 0; t--) {
        int64_t i = base + t;
        float x = r[i] + g * nv - v[i] + gl * lg;
        if (m[i] != 0.f) {
            nv = v[i];
            lg = x;
        }
        adv[i] = lg;
        if (ret) ret[i] = lg + v[i];
    }
}

// REINFORCE++ discounted returns with reset after EOS (ret may be null).
__global__ void __launch_bounds__(MTRL_BLOCK) advantage_reinforce_fwd_f32(float* adv, float* ret, const float* r, const float* m, int64_t rows, int64_t cols, float g) {
    int64_t row = (int64_t)blockIdx.x * MTRL_BLOCK + threadIdx.x;
    if (row >= rows) return;
    int64_t base = row * cols;
    float run = 0.f;
    for (int64_t t = cols - 1; t >= 0; t--) {
        int64_t i = base + t;
        run = r[i] + g * run;
        adv[i] = run;
        if (ret) ret[i] = run;
        run *= m[i];
    }
}

// Row scores: scores[i] = float(sum_t r[i,t]) over every position, float64 block sum.
__global__ void __launch_bounds__(MTRL_BLOCK) advantage_scores_fwd_f32(float* scores, const float* r, int64_t cols) {
    __shared__ double scratch[MTRL_WARPS];
    int64_t base = (int64_t)blockIdx.x * cols;
    double s = 0;
    for (int64_t t = threadIdx.x; t < cols; t += MTRL_BLOCK) s += (double)r[base + t];
    s = block_sum_f64(s, scratch);
    if (threadIdx.x == 0) scores[blockIdx.x] = (float)s;
}

// adv[i,t] = a[i] * m[i,t]; ret (may be null) receives a copy.
__global__ void __launch_bounds__(MTRL_BLOCK) advantage_broadcast_fwd_f32(float* adv, float* ret, const float* a, const float* m, int64_t n, int64_t cols) {
    for (int64_t i = (int64_t)blockIdx.x * MTRL_BLOCK + threadIdx.x; i < n; i += (int64_t)gridDim.x * MTRL_BLOCK) {
        float x = a[i / cols] * m[i];
        adv[i] = x;
        if (ret) ret[i] = x;
    }
}

// ReMax returns: ret[i,t] = float(sum_{s >= t} float(r*m)) accumulated in float64, one thread per row.
__global__ void __launch_bounds__(MTRL_BLOCK) advantage_remax_ret_fwd_f32(float* ret, const float* r, const float* m, int64_t rows, int64_t cols) {
    int64_t row = (int64_t)blockIdx.x * MTRL_BLOCK + threadIdx.x;
    if (row >= rows) return;
    int64_t base = row * cols;
    double run = 0;
    for (int64_t t = cols - 1; t >= 0; t--) {
        run += (double)(r[base + t] * m[base + t]);
        ret[base + t] = (float)run;
    }
}

// ReMax advantage: a[i] = scores[i] - baselines[i] computed in place into scores.
__global__ void __launch_bounds__(MTRL_BLOCK) advantage_remax_fwd_f32(float* scores, const float* baselines, int64_t rows) {
    int64_t i = (int64_t)blockIdx.x * MTRL_BLOCK + threadIdx.x;
    if (i < rows) scores[i] = scores[i] - baselines[i];
}

}  // extern "C"
