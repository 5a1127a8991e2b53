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

}  // extern "C"
