// Fused logits -> log-prob + entropy (tensor.LogProbEntropy) and its backward.
//
// Forward, two kernels:
//   logprob_stats_fwd_<dt>: grid (rows, splits). Block (r, s) reads chunk s of row r once and
//     keeps, per thread, the online-softmax state of z = x/temperature: m (running max),
//     s = sum exp(z-m), t = sum exp(z-m)*(z-m). The block combines its threads' states in a
//     fixed tree order and writes (m, s, t) to stats[r, s].
//   logprob_finish_fwd_<dt>: one thread per row combines the row's splits in order and writes
//     logp = z_y - m - log s (clamped at -FLT_MAX) and entropy = log s - t/s.
// A row that is -Inf everywhere or holds NaN or +Inf gives NaN (as the host kernel).
#include "common.cuh"
#include <float.h>

struct lpstate {
    float m, s, t;
};

__device__ __forceinline__ void lp_push(lpstate& a, float z) {
    if (z > a.m) {
        if (a.s > 0.f) {
            float d = a.m - z;
            float c = expf(d);
            a.t = c * (a.t + a.s * d);
            a.s = c * a.s;
        }
        a.m = z;
        if (isinf(z)) {  // +Inf: no distribution (s becomes NaN below at the finish)
            return;
        }
        a.s += 1.f;  // exp(0), and t gains exp(0)*0
        return;
    }
    if (a.m == -INFINITY && z == -INFINITY) return;  // nothing yet
    float u = z - a.m;                                // NaN when z is NaN
    if (u < -87.f) u = -87.f;  // as the host's floorExpArg: keeps exp(u)*u finite for z = -Inf
    float e = expf(u);
    a.s += e;
    a.t += e * u;
}

// lp_merge combines b into a (a's order first).
__device__ __forceinline__ lpstate lp_merge(lpstate a, lpstate b) {
    if (a.m != a.m || b.m != b.m) {
        lpstate r = {__int_as_float(0x7fffffff), __int_as_float(0x7fffffff), __int_as_float(0x7fffffff)};
        return r;
    }
    float m = a.m > b.m ? a.m : b.m;
    lpstate r = {m, 0.f, 0.f};
    if (m == -INFINITY) return r;
    if (a.s != 0.f || a.s != a.s) {
        float d = a.m - m;
        float c = expf(d);
        r.s += c * a.s;
        r.t += c * (a.t + a.s * d);
    }
    if (b.s != 0.f || b.s != b.s) {
        float d = b.m - m;
        float c = expf(d);
        r.s += c * b.s;
        r.t += c * (b.t + b.s * d);
    }
    return r;
}

// lp_block_merge merges the block's per-thread states (a NaN seen poisons the thread's) by a
// tree in shared memory, in thread order; the block's state is left in sm[0], ss[0], st[0].
__device__ __forceinline__ void lp_block_merge(lpstate a, bool nan, float* sm, float* ss, float* st) {
    if (nan) a.m = __int_as_float(0x7fffffff);
    sm[threadIdx.x] = a.m;
    ss[threadIdx.x] = a.s;
    st[threadIdx.x] = a.t;
    __syncthreads();
    for (int w = MTRL_BLOCK / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) {
            lpstate p = {sm[threadIdx.x], ss[threadIdx.x], st[threadIdx.x]};
            lpstate q = {sm[threadIdx.x + w], ss[threadIdx.x + w], st[threadIdx.x + w]};
            lpstate r = lp_merge(p, q);
            sm[threadIdx.x] = r.m;
            ss[threadIdx.x] = r.s;
            st[threadIdx.x] = r.t;
        }
        __syncthreads();
    }
}

template <typename T>
__device__ void lp_stats(float* __restrict__ stats, const T* __restrict__ logits, int64_t v,
                         int64_t chunk, float temperature) {
    __shared__ float sm[MTRL_BLOCK], ss[MTRL_BLOCK], st[MTRL_BLOCK];
    int64_t row = blockIdx.x;
    int64_t split = blockIdx.y;
    int64_t lo = split * chunk;
    int64_t hi = lo + chunk < v ? lo + chunk : v;
    const T* x = logits + row * v;
    lpstate a = {-INFINITY, 0.f, 0.f};
    bool nan = false;
    // Four independent loads in flight per thread, folded in index order.
    int64_t i = lo + threadIdx.x;
    const int64_t step = MTRL_BLOCK;
    for (; i + 3 * step < hi; i += 4 * step) {
        float z0 = load_f32<T>(x, i) / temperature;
        float z1 = load_f32<T>(x, i + step) / temperature;
        float z2 = load_f32<T>(x, i + 2 * step) / temperature;
        float z3 = load_f32<T>(x, i + 3 * step) / temperature;
        nan |= (z0 != z0) | (z1 != z1) | (z2 != z2) | (z3 != z3);
        lp_push(a, z0);
        lp_push(a, z1);
        lp_push(a, z2);
        lp_push(a, z3);
    }
    for (; i < hi; i += step) {
        float z = load_f32<T>(x, i) / temperature;
        nan |= z != z;
        lp_push(a, z);
    }
    lp_block_merge(a, nan, sm, ss, st);
    if (threadIdx.x == 0) {
        float* o = stats + (row * gridDim.y + split) * 3;
        o[0] = sm[0];
        o[1] = ss[0];
        o[2] = st[0];
    }
}

template <typename T>
__device__ void lp_finish(float* __restrict__ logp, float* __restrict__ entropy, long long* flag,
                          const float* __restrict__ stats, const T* __restrict__ logits,
                          const int* __restrict__ targets, int64_t rows, int64_t v, int64_t splits,
                          float temperature) {
    int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* p = stats + row * splits * 3;
    lpstate a = {p[0], p[1], p[2]};
    for (int64_t s = 1; s < splits; s++) {
        lpstate b = {p[3 * s], p[3 * s + 1], p[3 * s + 2]};
        a = lp_merge(a, b);
    }
    float nanv = __int_as_float(0x7fffffff);
    if (isinf(a.m)) a.s = nanv;  // all -Inf, or a +Inf logit
    // double for log and the division, as the host kernel keeps s and t in float64.
    double logS = log((double)a.s);
    int y = targets[row];
    if (logp != nullptr) {
        if (y < 0 || (int64_t)y >= v) {
            flag_row(flag, row);
            logp[row] = nanv;
        } else {
            float zy = load_f32<T>(logits, row * v + y) / temperature;
            double lv = (double)(zy - a.m) - logS;
            logp[row] = (float)(lv > -FLT_MAX ? lv : (lv != lv ? lv : -FLT_MAX));
        }
    } else if (y < 0 || (int64_t)y >= v) {
        flag_row(flag, row);
    }
    if (entropy != nullptr) {
        entropy[row] = (float)(logS - (double)a.t / (double)a.s);
    }
}

// Backward: dlogits[r, v] = (dlogp*(1[v=y] - p) - dentropy*p*(u + H)) / temperature with
// u = z_v - logZ, logZ = z_y - logp, p = exp(u). Grid (rows, chunks), elementwise.
template <typename T, typename O>
__device__ void lp_backward(O* __restrict__ dlogits, long long* flag, const T* __restrict__ logits,
                            const int* __restrict__ targets, const float* __restrict__ logp,
                            const float* __restrict__ entropy, const float* __restrict__ dlogp,
                            const float* __restrict__ dentropy, int64_t v, int64_t chunk,
                            float temperature) {
    int64_t row = blockIdx.x;
    int y = targets[row];
    bool bad = y < 0 || (int64_t)y >= v;
    if (bad && blockIdx.y == 0 && threadIdx.x == 0) flag_row(flag, row);
    float gl = dlogp != nullptr ? dlogp[row] : 0.f;
    float ge = 0.f, h = 0.f;
    if (dentropy != nullptr) {
        ge = dentropy[row];
        h = entropy[row];
    }
    const T* x = logits + row * v;
    O* out = dlogits + row * v;
    float logZ = bad ? __int_as_float(0x7fffffff) : load_f32<T>(x, y) / temperature - logp[row];
    float invT = 1.f / temperature;
    int64_t lo = (int64_t)blockIdx.y * chunk;
    int64_t hi = lo + chunk < v ? lo + chunk : v;
    for (int64_t i = lo + threadIdx.x; i < hi; i += MTRL_BLOCK) {
        float u = load_f32<T>(x, i) / temperature - logZ;
        if (u < -87.f) u = -87.f;  // as the host's floorExpArg: exp(-Inf)*(-Inf) would be NaN
        float p = expf(u);
        float g = (-gl * p - ge * p * (u + h)) * invT;
        if (i == y) g += gl * invT;
        store_f32<O>(out, i, g);
    }
}

// The fused LM head (tensor.LMHeadLogProbs and its backward), on the logits of one vocabulary
// chunk at a time: z [rows, vc] = hidden·W[c0:c0+vc]ᵀ, which cuBLAS writes into scratch.
//   lmhead_fold_fwd_f32: block per row; folds the chunk's z/temperature into the block's
//     (m, s, t) as lp_stats does, then merges it into the row's running state (m, s, t in
//     double, as the host's cross-tile sums) and picks up the target's logit when the chunk
//     holds it. state is [rows, 4] doubles: m, s, t, z_y.
//   lmhead_finish_fwd_f32: thread per row, logp = z_y - m - log s (clamped at -FLT_MAX) and
//     entropy = log s - t/s, as lp_finish.
//   lmhead_target_bwd_<h>[_<w>]: block per row, lse = z_y - logp with z_y = h·w_y/temperature
//     (a fixed tree over D, in double).
//   lmhead_grad_bwd_f32: the chunk's logits gradient with the formula of lp_backward, in place,
//     or only into its bfloat16 copy dzb when that is not null (what the products then read).

// lm_merge combines the state (m, s, t) of b into a, in double (a NaN m poisons the row).
__device__ __forceinline__ void lm_merge(double* a, double bm, double bs, double bt) {
    if (a[0] != a[0] || bm != bm) {
        a[0] = a[1] = a[2] = __longlong_as_double(0x7ff8000000000000LL);
        return;
    }
    double m = a[0] > bm ? a[0] : bm;
    double s = 0, t = 0;
    if (m != -INFINITY) {
        if (a[1] != 0 || a[1] != a[1]) {
            double d = a[0] - m, c = exp(d);
            s += c * a[1];
            t += c * (a[2] + a[1] * d);
        }
        if (bs != 0 || bs != bs) {
            double d = bm - m, c = exp(d);
            s += c * bs;
            t += c * (bt + bs * d);
        }
    }
    a[0] = m;
    a[1] = s;
    a[2] = t;
}

__device__ void lm_fold(double* __restrict__ state, const float* __restrict__ z,
                        const int* __restrict__ targets, int64_t c0, int64_t vc, float temperature,
                        int first) {
    __shared__ float sm[MTRL_BLOCK], ss[MTRL_BLOCK], st[MTRL_BLOCK];
    int64_t row = blockIdx.x;
    const float* x = z + row * vc;
    lpstate a = {-INFINITY, 0.f, 0.f};
    bool nan = false;
    // The thread's logits in ascending order, eight loads issued before they are pushed.
    for (int64_t i0 = threadIdx.x; i0 < vc; i0 += 8 * MTRL_BLOCK) {
        float zv[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            int64_t i = i0 + (int64_t)u * MTRL_BLOCK;
            zv[u] = i < vc ? x[i] : 0.f;
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            if (i0 + (int64_t)u * MTRL_BLOCK < vc) {
                float zi = zv[u] / temperature;
                nan |= zi != zi;
                lp_push(a, zi);
            }
        }
    }
    lp_block_merge(a, nan, sm, ss, st);
    if (threadIdx.x != 0) return;
    double* o = state + row * 4;
    if (first) {
        o[0] = sm[0];
        o[1] = ss[0];
        o[2] = st[0];
        o[3] = 0;
    } else {
        lm_merge(o, sm[0], ss[0], st[0]);
    }
    int64_t y = (int64_t)targets[row] - c0;
    if (y >= 0 && y < vc) o[3] = x[y] / temperature;
}

template <typename H, typename W>
__device__ void lm_target(float* __restrict__ lse, const H* __restrict__ hidden,
                          const W* __restrict__ weight, const int* __restrict__ targets,
                          const float* __restrict__ logp, int64_t d, float temperature) {
    __shared__ double red[MTRL_WARPS];
    int64_t row = blockIdx.x;
    const H* h = hidden + row * d;
    const W* w = weight + (int64_t)targets[row] * d;
    double acc = 0;
    for (int64_t k = threadIdx.x; k < d; k += MTRL_BLOCK) {
        acc += (double)load_f32<H>(h, k) * (double)load_f32<W>(w, k);
    }
    double zy = block_sum_f64(acc, red);
    if (threadIdx.x == 0) lse[row] = (float)zy / temperature - logp[row];
}

__device__ void lm_grad(float* __restrict__ dz, bf16_t* __restrict__ dzb, const float* __restrict__ lse,
                        const int* __restrict__ targets, const float* __restrict__ entropy,
                        const float* __restrict__ dlogp, const float* __restrict__ dentropy,
                        int64_t c0, int64_t vc, float temperature, int rnd) {
    int64_t row = blockIdx.x;
    float gl = dlogp != nullptr ? dlogp[row] : 0.f;
    float ge = 0.f, h = 0.f;
    if (dentropy != nullptr) {
        ge = dentropy[row];
        h = entropy[row];
    }
    float logZ = lse[row], invT = 1.f / temperature;
    int64_t y = (int64_t)targets[row] - c0;
    float* x = dz + row * vc;
    for (int64_t i = (int64_t)blockIdx.y * MTRL_BLOCK + threadIdx.x; i < vc; i += (int64_t)gridDim.y * MTRL_BLOCK) {
        float u = x[i] / temperature - logZ;
        if (u < -87.f) u = -87.f;  // as lp_backward
        float p = expf(u);
        float g = (-gl * p - ge * p * (u + h)) * invT;
        if (i == y) g += gl * invT;
        if (dzb != nullptr) {
            dzb[row * vc + i] = f32_to_bf16(g);  // the products read only this copy
        } else {
            x[i] = rnd ? bf16_to_f32(f32_to_bf16(g)) : g;
        }
    }
}

extern "C" {

__global__ void __launch_bounds__(MTRL_BLOCK) logprob_stats_fwd_f32(float* stats, const float* logits, int64_t v, int64_t chunk, float temperature) {
    lp_stats<float>(stats, logits, v, chunk, temperature);
}
__global__ void __launch_bounds__(MTRL_BLOCK) logprob_stats_fwd_bf16(float* stats, const bf16_t* logits, int64_t v, int64_t chunk, float temperature) {
    lp_stats<bf16_t>(stats, logits, v, chunk, temperature);
}
__global__ void logprob_finish_fwd_f32(float* logp, float* entropy, long long* flag, const float* stats, const float* logits, const int* targets, int64_t rows, int64_t v, int64_t splits, float temperature) {
    lp_finish<float>(logp, entropy, flag, stats, logits, targets, rows, v, splits, temperature);
}
__global__ void logprob_finish_fwd_bf16(float* logp, float* entropy, long long* flag, const float* stats, const bf16_t* logits, const int* targets, int64_t rows, int64_t v, int64_t splits, float temperature) {
    lp_finish<bf16_t>(logp, entropy, flag, stats, logits, targets, rows, v, splits, temperature);
}
__global__ void __launch_bounds__(MTRL_BLOCK) logprob_entropy_bwd_f32(float* dlogits, long long* flag, const float* logits, const int* targets, const float* logp, const float* entropy, const float* dlogp, const float* dentropy, int64_t v, int64_t chunk, float temperature) {
    lp_backward<float, float>(dlogits, flag, logits, targets, logp, entropy, dlogp, dentropy, v, chunk, temperature);
}
__global__ void __launch_bounds__(MTRL_BLOCK) logprob_entropy_bwd_bf16(bf16_t* dlogits, long long* flag, const bf16_t* logits, const int* targets, const float* logp, const float* entropy, const float* dlogp, const float* dentropy, int64_t v, int64_t chunk, float temperature) {
    lp_backward<bf16_t, bf16_t>(dlogits, flag, logits, targets, logp, entropy, dlogp, dentropy, v, chunk, temperature);
}
__global__ void __launch_bounds__(MTRL_BLOCK) logprob_entropy_bwd_bf16_f32(float* dlogits, long long* flag, const bf16_t* logits, const int* targets, const float* logp, const float* entropy, const float* dlogp, const float* dentropy, int64_t v, int64_t chunk, float temperature) {
    lp_backward<bf16_t, float>(dlogits, flag, logits, targets, logp, entropy, dlogp, dentropy, v, chunk, temperature);
}
__global__ void __launch_bounds__(MTRL_BLOCK) logprob_entropy_bwd_f32_bf16(bf16_t* dlogits, long long* flag, const float* logits, const int* targets, const float* logp, const float* entropy, const float* dlogp, const float* dentropy, int64_t v, int64_t chunk, float temperature) {
    lp_backward<float, bf16_t>(dlogits, flag, logits, targets, logp, entropy, dlogp, dentropy, v, chunk, temperature);
}

__global__ void __launch_bounds__(MTRL_BLOCK) lmhead_fold_fwd_f32(double* state, const float* z, const int* targets, int64_t c0, int64_t vc, float temperature, int first) {
    lm_fold(state, z, targets, c0, vc, temperature, first);
}
__global__ void lmhead_finish_fwd_f32(float* logp, float* entropy, const double* state, int64_t rows) {
    int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const double* a = state + row * 4;
    double s = a[1];
    if (isinf(a[0])) s = __longlong_as_double(0x7ff8000000000000LL);  // all -Inf, or a +Inf logit
    double logS = log(s);
    double lv = (a[3] - a[0]) - logS;
    logp[row] = (float)(lv > -FLT_MAX ? lv : (lv != lv ? lv : -FLT_MAX));
    entropy[row] = (float)(logS - a[2] / s);
}
__global__ void __launch_bounds__(MTRL_BLOCK) lmhead_target_bwd_f32(float* lse, const float* hidden, const float* weight, const int* targets, const float* logp, int64_t d, float temperature) {
    lm_target<float, float>(lse, hidden, weight, targets, logp, d, temperature);
}
__global__ void __launch_bounds__(MTRL_BLOCK) lmhead_target_bwd_bf16(float* lse, const bf16_t* hidden, const bf16_t* weight, const int* targets, const float* logp, int64_t d, float temperature) {
    lm_target<bf16_t, bf16_t>(lse, hidden, weight, targets, logp, d, temperature);
}
__global__ void __launch_bounds__(MTRL_BLOCK) lmhead_target_bwd_f32_bf16(float* lse, const float* hidden, const bf16_t* weight, const int* targets, const float* logp, int64_t d, float temperature) {
    lm_target<float, bf16_t>(lse, hidden, weight, targets, logp, d, temperature);
}
__global__ void __launch_bounds__(MTRL_BLOCK) lmhead_grad_bwd_f32(float* dz, bf16_t* dzb, const float* lse, const int* targets, const float* entropy, const float* dlogp, const float* dentropy, int64_t c0, int64_t vc, float temperature, int rnd) {
    lm_grad(dz, dzb, lse, targets, entropy, dlogp, dentropy, c0, vc, temperature, rnd);
}

}  // extern "C"
