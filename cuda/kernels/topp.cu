// Per-row top-p selection (tensor.TopPMask) with the semantics of internal/hostops.TopPRow: of
// the positions with mask != 0 (n valid) select k = ceil(float32(float32(n) * p)) with the
// largest scores, exactly as a stable descending sort: ties go to the lower index, -0 == +0 and
// NaN ranks above every number. One block per row: a radix selection of the k-th largest order
// key (four 8-bit digits; integer histograms in shared memory, whose counts do not depend on
// the order of the additions), then one ordered pass that takes the keys above it and the
// lowest-index ties (a block-wide prefix count per tile).
#include "common.cuh"
#include <math.h>

__device__ __forceinline__ unsigned int order_key(float x) {
    if (x != x) return 0xffffffffu;
    unsigned int b = __float_as_uint(x);
    if (b == 0x80000000u) b = 0;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// topp_threshold finds a row's selection threshold: the k-th largest order key of the valid
// positions (*prefix) and how many of the positions holding it to take (*need), by a radix
// selection over four 8-bit digits. It returns false when k == 0 or k == nv, after writing the
// row's whole answer (nothing, or every valid position). Every thread gets the same results.
__device__ bool topp_threshold(float* d, const float* s, const float* m, int64_t cols, float p,
                               int* hist, int* red, unsigned int* sh_prefix, int* sh_need,
                               unsigned int* prefix_out, int* need_out) {
    int nv = 0;
    for (int64_t i = threadIdx.x; i < cols; i += MTRL_BLOCK) nv += m[i] != 0.f;
    nv = block_sum_i32(nv, red);
    float prod = __fmul_rn((float)nv, p);
    int k = (int)ceilf(prod);
    k = k < 0 ? 0 : (k > nv ? nv : k);
    if (k == 0 || k == nv) {
        for (int64_t i = threadIdx.x; i < cols; i += MTRL_BLOCK) d[i] = (k != 0 && m[i] != 0.f) ? 1.f : 0.f;
        return false;
    }
    unsigned int prefix = 0, pmask = 0;
    int need = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += MTRL_BLOCK) hist[b] = 0;
        __syncthreads();
        for (int64_t i = threadIdx.x; i < cols; i += MTRL_BLOCK) {
            if (m[i] == 0.f) continue;
            unsigned int key = order_key(s[i]);
            if ((key & pmask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int b = 255;
            while (b > 0 && hist[b] < need) {
                need -= hist[b];
                b--;
            }
            *sh_prefix = prefix | ((unsigned int)b << shift);
            *sh_need = need;
        }
        __syncthreads();
        prefix = *sh_prefix;
        need = *sh_need;
        pmask |= 255u << shift;
        __syncthreads();
    }
    *prefix_out = prefix;
    *need_out = need;
    return true;
}

extern "C" {

__global__ void __launch_bounds__(MTRL_BLOCK) topp_mask_fwd_f32(float* dst, const float* scores, const float* mask, int64_t cols, float p) {
    __shared__ int hist[256];
    __shared__ int red[MTRL_WARPS];
    __shared__ int scan[MTRL_BLOCK];
    __shared__ unsigned int sh_prefix;
    __shared__ int sh_need;
    int64_t row = blockIdx.x;
    const float* s = scores + row * cols;
    const float* m = mask + row * cols;
    float* d = dst + row * cols;

    unsigned int prefix;
    int need;
    if (!topp_threshold(d, s, m, cols, p, hist, red, &sh_prefix, &sh_need, &prefix, &need)) return;
    // prefix is the k-th largest key; need is how many of the positions holding it to take.
    int base = 0;
    for (int64_t t0 = 0; t0 < cols; t0 += MTRL_BLOCK) {
        int64_t i = t0 + threadIdx.x;
        unsigned int key = 0;
        bool valid = false;
        if (i < cols && m[i] != 0.f) {
            valid = true;
            key = order_key(s[i]);
        }
        int eq = valid && key == prefix;
        scan[threadIdx.x] = eq;
        __syncthreads();
        for (int o = 1; o < MTRL_BLOCK; o <<= 1) {  // inclusive Hillis-Steele scan
            int add = (int)threadIdx.x >= o ? scan[threadIdx.x - o] : 0;
            __syncthreads();
            scan[threadIdx.x] += add;
            __syncthreads();
        }
        int rank = base + scan[threadIdx.x] - eq;  // ties before this one in index order
        bool sel = valid && (key > prefix || (eq && rank < need));
        if (i < cols) d[i] = sel ? 1.f : 0.f;
        base += scan[MTRL_BLOCK - 1];
        __syncthreads();
    }
}


// topp_mask_tiebreak_fwd_f32 is tensor.TopPMaskTieBreak (internal/hostops.TopPRowTieBreak): as
// topp_mask_fwd_f32, but of the positions tied at the threshold it takes the need with the
// largest tiebreak order key, the lower index first among equal ones: a second radix selection
// over the tied positions by the 64-bit key (order_key(tiebreak) << 32 | ~index), unique per
// position, so exactly need of them reach its threshold.
__global__ void __launch_bounds__(MTRL_BLOCK) topp_mask_tiebreak_fwd_f32(float* dst, const float* scores, const float* tiebreak, const float* mask, int64_t cols, float p) {
    __shared__ int hist[256];
    __shared__ int red[MTRL_WARPS];
    __shared__ unsigned int sh_prefix;
    __shared__ int sh_need;
    __shared__ unsigned long long sh_prefix2;
    int64_t row = blockIdx.x;
    const float* s = scores + row * cols;
    const float* tb = tiebreak + row * cols;
    const float* m = mask + row * cols;
    float* d = dst + row * cols;
    unsigned int prefix;
    int need;
    if (!topp_threshold(d, s, m, cols, p, hist, red, &sh_prefix, &sh_need, &prefix, &need)) return;
    unsigned long long prefix2 = 0, pmask2 = 0;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += MTRL_BLOCK) hist[b] = 0;
        __syncthreads();
        for (int64_t i = threadIdx.x; i < cols; i += MTRL_BLOCK) {
            if (m[i] == 0.f || order_key(s[i]) != prefix) continue;
            unsigned long long key2 = ((unsigned long long)order_key(tb[i]) << 32) | (0xffffffffu - (unsigned int)i);
            if ((key2 & pmask2) == prefix2) atomicAdd(&hist[(key2 >> shift) & 255u], 1);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int b = 255;
            while (b > 0 && hist[b] < need) {
                need -= hist[b];
                b--;
            }
            sh_prefix2 = prefix2 | ((unsigned long long)b << shift);
            sh_need = need;
        }
        __syncthreads();
        prefix2 = sh_prefix2;
        need = sh_need;
        pmask2 |= 255ull << shift;
        __syncthreads();
    }
    for (int64_t i = threadIdx.x; i < cols; i += MTRL_BLOCK) {
        bool sel = false;
        if (m[i] != 0.f) {
            unsigned int key = order_key(s[i]);
            if (key > prefix) {
                sel = true;
            } else if (key == prefix) {
                unsigned long long key2 = ((unsigned long long)order_key(tb[i]) << 32) | (0xffffffffu - (unsigned int)i);
                sel = key2 >= prefix2;
            }
        }
        d[i] = sel ? 1.f : 0.f;
    }
}

}  // extern "C"
