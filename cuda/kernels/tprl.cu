// Statistics of the TPRL top-p selection (tprl.EntropyMask, tprl.PerceptionMask), after
// topp_mask_fwd_f32 wrote the 0/1 selection: one block per row counts the valid and selected
// positions, sums the selected and the rejected valid scores in float64 (fixed block order), and
// finds the threshold (the selected score with the smallest order key: hostops.TopPRow's K-th
// largest valid score). The host combines the rows in order (tprl.SelectionRow;
// hostops.SelectionRowStats is the pure-Go twin).
#include "common.cuh"

__device__ __forceinline__ unsigned int tprl_order_key(float x) {
    if (x != x) return 0xffffffffu;
    unsigned int b = __float_as_uint(x);
    if (b == 0x80000000u) b = 0;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The score of an order key (+0 for the zeros, a quiet NaN for the NaN key).
__device__ __forceinline__ float tprl_key_value(unsigned int k) {
    if (k == 0xffffffffu) return __uint_as_float(0x7fc00000u);
    return __uint_as_float((k & 0x80000000u) ? (k ^ 0x80000000u) : ~k);
}

extern "C" {

// stats[5i..5i+4] = valid, selected, selected sum, rejected sum, threshold (0 when none is
// selected).
__global__ void __launch_bounds__(MTRL_BLOCK) tprl_select_stats_fwd_f32(double* stats, const float* sel, const float* scores, const float* mask, int64_t cols) {
    __shared__ double scratch[MTRL_WARPS];
    __shared__ int iscratch[MTRL_WARPS];
    __shared__ unsigned int kscratch[MTRL_WARPS];
    int64_t base = (int64_t)blockIdx.x * cols;
    int nv = 0, nk = 0;
    double ss = 0, rs = 0;
    unsigned int least = 0xffffffffu;
    for (int64_t t = threadIdx.x; t < cols; t += MTRL_BLOCK) {
        if (mask[base + t] == 0.f) continue;
        float v = scores[base + t];
        nv++;
        if (sel[base + t] != 0.f) {
            nk++;
            ss += (double)v;
            unsigned int k = tprl_order_key(v);
            least = k < least ? k : least;
        } else {
            rs += (double)v;
        }
    }
    nv = block_sum_i32(nv, iscratch);
    nk = block_sum_i32(nk, iscratch);
    ss = block_sum_f64(ss, scratch);
    rs = block_sum_f64(rs, scratch);
    // Block-wide minimum of the keys (min is order-independent).
    for (int o = 16; o > 0; o >>= 1) {
        unsigned int x = __shfl_xor_sync(0xffffffffu, least, o);
        least = x < least ? x : least;
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) kscratch[warp] = least;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int l = 0xffffffffu;
        for (int w = 0; w < MTRL_WARPS; w++) l = kscratch[w] < l ? kscratch[w] : l;
        double* st = stats + 5 * (int64_t)blockIdx.x;
        st[0] = (double)nv;
        st[1] = (double)nk;
        st[2] = ss;
        st[3] = rs;
        st[4] = nk > 0 ? (double)tprl_key_value(l) : 0.0;
    }
}

// Trajectory shaping (tprl.ShapingKernel.ScaleRows): dst[i, t] = src[i, t] * f[i] in float32
// (dst may be src). The host computes the factors f [B] from per-row sums
// (ppo_rowsums_fwd_f32) with tprl's own plan and uploads them.
__global__ void __launch_bounds__(MTRL_BLOCK) tprl_scale_rows_fwd_f32(float* dst, const float* src, const float* f, int64_t n, int64_t cols) {
    for (int64_t i = (int64_t)blockIdx.x * MTRL_BLOCK + threadIdx.x; i < n; i += (int64_t)gridDim.x * MTRL_BLOCK) {
        dst[i] = src[i] * f[i / cols];
    }
}

// Union of the entropy and perception masks (tprl.UnionMask), one block per row: dst = a || b
// as 0/1 (dst may be a or b: each position is read and written by one thread) and
// stats[7i..7i+6] = valid, selected, rejected, and the float64 sums of the entropy and the
// perception score over the selected and the rejected positions (fixed block order). The host
// combines the rows in order (tprl.UnionRow; the pure-Go twin is tprl's unionHost).
__global__ void __launch_bounds__(MTRL_BLOCK) tprl_union_fwd_f32(double* stats, float* dst, const float* a, const float* b, const float* ent, const float* score, const float* mask, int64_t cols) {
    __shared__ double scratch[MTRL_WARPS];
    __shared__ int iscratch[MTRL_WARPS];
    int64_t base = (int64_t)blockIdx.x * cols;
    int nv = 0, ns = 0, nr = 0;
    double es = 0, er = 0, ps = 0, pr = 0;
    for (int64_t t = threadIdx.x; t < cols; t += MTRL_BLOCK) {
        int64_t i = base + t;
        bool on = a[i] != 0.f || b[i] != 0.f;
        if (on) {
            ns++;
            es += (double)ent[i];
            ps += (double)score[i];
        }
        if (mask[i] != 0.f) {
            nv++;
            if (!on) {
                nr++;
                er += (double)ent[i];
                pr += (double)score[i];
            }
        }
        dst[i] = on ? 1.f : 0.f;
    }
    nv = block_sum_i32(nv, iscratch);
    ns = block_sum_i32(ns, iscratch);
    nr = block_sum_i32(nr, iscratch);
    es = block_sum_f64(es, scratch);
    er = block_sum_f64(er, scratch);
    ps = block_sum_f64(ps, scratch);
    pr = block_sum_f64(pr, scratch);
    if (threadIdx.x == 0) {
        double* st = stats + 7 * (int64_t)blockIdx.x;
        st[0] = (double)nv;
        st[1] = (double)ns;
        st[2] = (double)nr;
        st[3] = es;
        st[4] = er;
        st[5] = ps;
        st[6] = pr;
    }
}

}  // extern "C"
