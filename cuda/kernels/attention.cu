// Scaled dot-product attention (tensor.Attention, AttentionLSE, AttentionDecode,
// AttentionBackward), flash-style: a block holds a tile of queries (or, in the dK/dV backward,
// of keys) in shared memory and visits the keys one tile at a time with the online softmax
// (running max m, rescaled sum l and accumulator), so no score matrix beyond a BQ×BK tile
// exists. Sequences come as seqs[4b..4b+3] = first query row, queries, first key row, keys
// (from cu_seqlens, or from the cache lengths when decoding); query i of a sequence sees keys
// j <= i + KN − QN when causal. Rows are [token, head, D] with Hq query heads over Hkv key/value
// heads (query head h reads h / (Hq/Hkv)). Sums run in a fixed order and nothing is atomic, so
// two runs give the same bits.
//
// Tiles: head dimensions up to 128 use BQ = 16 queries and BK = 32 keys per tile (16 in the
// backward), up to 256 half of that, all within 48 KiB of static shared memory; 128 threads
// per block, THREADS/BQ of them per query row, each owning D/(THREADS/BQ) output columns.
//
// Element types: every kernel comes in _f32 and _bf16, T being the dtype of Q, K, V, the outputs
// and their gradients (lse and delta are float32 in both). bfloat16 rows are widened as they are
// loaded into the float32 shared tiles; scores, softmax and sums are float32, and each output
// element is rounded to nearest even once, at its store (store_f32).
//
// For bfloat16 up to head dimension 128 the backend runs the tensor-core kernels of
// attention_mma.cu; the _d128_bf16 kernels here run only when a test asks (TestAttentionMMAOff).
#include "attention.cuh"

__device__ __forceinline__ float att_dot(const float* a, const float* b, int64_t d) {
    float s = 0;
    for (int64_t j = 0; j < d; j++) s += a[j] * b[j];
    return s;
}

// att_dot_t is att_dot over two rows of T in global memory, widened.
template <typename T>
__device__ __forceinline__ float att_dot_t(const T* a, const T* b, int64_t d) {
    float s = 0;
    for (int64_t j = 0; j < d; j++) s += load_f32(a, j) * load_f32(b, j);
    return s;
}

// att_load copies rows [r0, r0+rows) of head h of x [.., heads, d] into dst[rows][DM],
// zero-filling rows at or past n.
template <int DM, typename T>
__device__ __forceinline__ void att_load(float* dst, const T* x, int64_t row0, int64_t r0, int rows, int64_t n, int64_t heads, int64_t h, int64_t d) {
    for (int64_t e = threadIdx.x; e < rows * d; e += ATT_THREADS) {
        int64_t r = e / d, j = e % d;
        dst[r * DM + j] = r0 + r < n ? load_f32(x, ((row0 + r0 + r) * heads + h) * d + j) : 0.f;
    }
}

template <int BQ, int BK, int DM, typename T>
__device__ __forceinline__ void attention_fwd(T* out, float* lse, const T* q, const T* k, const T* v, const int* seqs,
                                              int64_t hq, int64_t hkv, int64_t d, float scale, int causal) {
    constexpr int TPR = ATT_THREADS / BQ, NA = DM / TPR;
    __shared__ float qs[BQ * DM], ks[BK * DM], vs[BK * DM], ss[BQ * BK];
    int64_t b = blockIdx.y / hq, h = blockIdx.y % hq, hk = h / (hq / hkv);
    int64_t q0 = seqs[4 * b], qn = seqs[4 * b + 1], k0 = seqs[4 * b + 2], kn = seqs[4 * b + 3];
    int64_t t0 = (int64_t)blockIdx.x * BQ;
    if (t0 >= qn) return;
    att_load<DM>(qs, q, q0, t0, BQ, qn, hq, h, d);
    int r = threadIdx.x / TPR, c = threadIdx.x % TPR;
    float m = -INFINITY, l = 0, acc[NA];
    for (int a = 0; a < NA; a++) acc[a] = 0;
    int64_t kend = att_keys(t0, BQ, qn, kn, causal);
    for (int64_t kt = 0; kt < kend; kt += BK) {
        __syncthreads();
        att_load<DM>(ks, k, k0, kt, BK, kn, hkv, hk, d);
        att_load<DM>(vs, v, k0, kt, BK, kn, hkv, hk, d);
        __syncthreads();
        for (int e = threadIdx.x; e < BQ * BK; e += ATT_THREADS) {
            int rr = e / BK, jj = e % BK;
            ss[e] = att_visible(t0 + rr, kt + jj, qn, kn, causal) ? att_dot(qs + rr * DM, ks + jj * DM, d) * scale : -INFINITY;
        }
        __syncthreads();
        float mt = m;
        for (int jj = 0; jj < BK; jj++) mt = fmaxf(mt, ss[r * BK + jj]);
        if (mt == -INFINITY) continue;  // nothing visible yet in this row
        float alpha = expf(m - mt), psum = 0;
        for (int a = 0; a < NA; a++) acc[a] *= alpha;
        for (int jj = 0; jj < BK; jj++) {
            float p = expf(ss[r * BK + jj] - mt);
            psum += p;
            for (int a = 0; a < NA; a++) {
                int64_t col = c + (int64_t)a * TPR;
                if (col < d) acc[a] += p * vs[jj * DM + col];
            }
        }
        l = l * alpha + psum;
        m = mt;
    }
    int64_t qi = t0 + r;
    if (qi >= qn) return;
    int64_t o = ((q0 + qi) * hq + h) * d;
    for (int a = 0; a < NA; a++) {
        int64_t col = c + (int64_t)a * TPR;
        if (col < d) store_f32(out, o + col, l > 0 ? acc[a] / l : 0.f);
    }
    if (lse && c == 0) lse[(q0 + qi) * hq + h] = l > 0 ? m + logf(l) : -INFINITY;
}

// attention_dq: dq_i = scale·Σ_j P_ij (dO_i·V_j − D_i) K_j, one block per query tile and head.
template <int BQ, int BK, int DM, typename T>
__device__ __forceinline__ void attention_dq(T* dq, const T* q, const T* k, const T* v, const T* dout, const float* lse,
                                             const float* delta, const int* seqs, int64_t hq, int64_t hkv, int64_t d, float scale, int causal) {
    constexpr int TPR = ATT_THREADS / BQ, NA = DM / TPR;
    __shared__ float qs[BQ * DM], dos[BQ * DM], ks[BK * DM], vs[BK * DM], ss[BQ * BK];
    int64_t b = blockIdx.y / hq, h = blockIdx.y % hq, hk = h / (hq / hkv);
    int64_t q0 = seqs[4 * b], qn = seqs[4 * b + 1], k0 = seqs[4 * b + 2], kn = seqs[4 * b + 3];
    int64_t t0 = (int64_t)blockIdx.x * BQ;
    if (t0 >= qn) return;
    att_load<DM>(qs, q, q0, t0, BQ, qn, hq, h, d);
    att_load<DM>(dos, dout, q0, t0, BQ, qn, hq, h, d);
    int r = threadIdx.x / TPR, c = threadIdx.x % TPR;
    float acc[NA];
    for (int a = 0; a < NA; a++) acc[a] = 0;
    int64_t kend = att_keys(t0, BQ, qn, kn, causal);
    for (int64_t kt = 0; kt < kend; kt += BK) {
        __syncthreads();
        att_load<DM>(ks, k, k0, kt, BK, kn, hkv, hk, d);
        att_load<DM>(vs, v, k0, kt, BK, kn, hkv, hk, d);
        __syncthreads();
        for (int e = threadIdx.x; e < BQ * BK; e += ATT_THREADS) {
            int rr = e / BK, jj = e % BK;
            int64_t qi = t0 + rr;
            float ds = 0;
            if (att_visible(qi, kt + jj, qn, kn, causal)) {
                int64_t row = (q0 + qi) * hq + h;
                float p = expf(att_dot(qs + rr * DM, ks + jj * DM, d) * scale - lse[row]);
                ds = p * (att_dot(dos + rr * DM, vs + jj * DM, d) - delta[row]);
            }
            ss[e] = ds;
        }
        __syncthreads();
        for (int jj = 0; jj < BK; jj++) {
            float ds = ss[r * BK + jj];
            for (int a = 0; a < NA; a++) {
                int64_t col = c + (int64_t)a * TPR;
                if (col < d) acc[a] += ds * ks[jj * DM + col];
            }
        }
    }
    int64_t qi = t0 + r;
    if (qi >= qn) return;
    int64_t o = ((q0 + qi) * hq + h) * d;
    for (int a = 0; a < NA; a++) {
        int64_t col = c + (int64_t)a * TPR;
        if (col < d) store_f32(dq, o + col, acc[a] * scale);
    }
}

// attention_dkdv: for one key tile and key/value head, dV_j = Σ P_ij dO_i and
// dK_j = scale·Σ dS_ij Q_i over the group's query heads in order, then the query tiles in
// order: each element of dK and dV is owned by one thread (no atomics).
template <int BQ, int BK, int DM, typename T>
__device__ __forceinline__ void attention_dkdv(T* dk, T* dv, const T* q, const T* k, const T* v, const T* dout,
                                               const float* lse, const float* delta, const int* seqs, int64_t hq, int64_t hkv, int64_t d,
                                               float scale, int causal) {
    constexpr int TPR = ATT_THREADS / BK, NA = DM / TPR;
    __shared__ float qs[BQ * DM], dos[BQ * DM], ks[BK * DM], vs[BK * DM], ps[BQ * BK], ss[BQ * BK];
    int64_t b = blockIdx.y / hkv, hk = blockIdx.y % hkv, g = hq / hkv;
    int64_t q0 = seqs[4 * b], qn = seqs[4 * b + 1], k0 = seqs[4 * b + 2], kn = seqs[4 * b + 3];
    int64_t kt = (int64_t)blockIdx.x * BK;
    if (kt >= kn) return;
    att_load<DM>(ks, k, k0, kt, BK, kn, hkv, hk, d);
    att_load<DM>(vs, v, k0, kt, BK, kn, hkv, hk, d);
    int r = threadIdx.x / TPR, c = threadIdx.x % TPR;
    float ak[NA], av[NA];
    for (int a = 0; a < NA; a++) ak[a] = av[a] = 0;
    // The first query that sees key kt: kt <= qi + kn − qn.
    int64_t first = causal ? kt - (kn - qn) : 0;
    first = first < 0 ? 0 : first / BQ * BQ;
    for (int64_t h = hk * g; h < (hk + 1) * g; h++) {
        for (int64_t t0 = first; t0 < qn; t0 += BQ) {
            __syncthreads();
            att_load<DM>(qs, q, q0, t0, BQ, qn, hq, h, d);
            att_load<DM>(dos, dout, q0, t0, BQ, qn, hq, h, d);
            __syncthreads();
            for (int e = threadIdx.x; e < BQ * BK; e += ATT_THREADS) {
                int rr = e / BK, jj = e % BK;
                int64_t qi = t0 + rr;
                float p = 0, ds = 0;
                if (att_visible(qi, kt + jj, qn, kn, causal)) {
                    int64_t row = (q0 + qi) * hq + h;
                    p = expf(att_dot(qs + rr * DM, ks + jj * DM, d) * scale - lse[row]);
                    ds = p * (att_dot(dos + rr * DM, vs + jj * DM, d) - delta[row]);
                }
                ps[e] = p;
                ss[e] = ds;
            }
            __syncthreads();
            for (int ii = 0; ii < BQ; ii++) {
                float p = ps[ii * BK + r], ds = ss[ii * BK + r];
                for (int a = 0; a < NA; a++) {
                    int64_t col = c + (int64_t)a * TPR;
                    if (col < d) {
                        av[a] += p * dos[ii * DM + col];
                        ak[a] += ds * qs[ii * DM + col];
                    }
                }
            }
        }
    }
    int64_t kj = kt + r;
    if (kj >= kn) return;
    int64_t o = ((k0 + kj) * hkv + hk) * d;
    for (int a = 0; a < NA; a++) {
        int64_t col = c + (int64_t)a * TPR;
        if (col < d) {
            store_f32(dk, o + col, ak[a] * scale);
            store_f32(dv, o + col, av[a]);
        }
    }
}

extern "C" {

__global__ void __launch_bounds__(ATT_THREADS) attention_fwd_d128_f32(float* out, float* lse, const float* q, const float* k, const float* v, const int* seqs,
                                                                       int64_t hq, int64_t hkv, int64_t d, float scale, int causal) {
    attention_fwd<16, 32, 128>(out, lse, q, k, v, seqs, hq, hkv, d, scale, causal);
}

__global__ void __launch_bounds__(ATT_THREADS) attention_fwd_d256_f32(float* out, float* lse, const float* q, const float* k, const float* v, const int* seqs,
                                                                       int64_t hq, int64_t hkv, int64_t d, float scale, int causal) {
    attention_fwd<8, 16, 256>(out, lse, q, k, v, seqs, hq, hkv, d, scale, causal);
}

// delta[row] = dO_row · O_row (float32, in order), the D_i of the backward; one thread per row
// of [T·Hq].
__global__ void __launch_bounds__(MTRL_BLOCK) attention_delta_bwd_f32(float* delta, const float* out, const float* dout, int64_t rows, int64_t d) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows) delta[i] = att_dot_t(dout + i * d, out + i * d, d);
}

__global__ void __launch_bounds__(ATT_THREADS) attention_dq_bwd_d128_f32(float* dq, const float* q, const float* k, const float* v, const float* dout, const float* lse,
                                                                          const float* delta, const int* seqs, int64_t hq, int64_t hkv, int64_t d, float scale, int causal) {
    attention_dq<16, 16, 128>(dq, q, k, v, dout, lse, delta, seqs, hq, hkv, d, scale, causal);
}

__global__ void __launch_bounds__(ATT_THREADS) attention_dq_bwd_d256_f32(float* dq, const float* q, const float* k, const float* v, const float* dout, const float* lse,
                                                                          const float* delta, const int* seqs, int64_t hq, int64_t hkv, int64_t d, float scale, int causal) {
    attention_dq<8, 8, 256>(dq, q, k, v, dout, lse, delta, seqs, hq, hkv, d, scale, causal);
}

__global__ void __launch_bounds__(ATT_THREADS) attention_dkdv_bwd_d128_f32(float* dk, float* dv, const float* q, const float* k, const float* v, const float* dout,
                                                                            const float* lse, const float* delta, const int* seqs, int64_t hq, int64_t hkv, int64_t d,
                                                                            float scale, int causal) {
    attention_dkdv<16, 16, 128>(dk, dv, q, k, v, dout, lse, delta, seqs, hq, hkv, d, scale, causal);
}

__global__ void __launch_bounds__(ATT_THREADS) attention_dkdv_bwd_d256_f32(float* dk, float* dv, const float* q, const float* k, const float* v, const float* dout,
                                                                            const float* lse, const float* delta, const int* seqs, int64_t hq, int64_t hkv, int64_t d,
                                                                            float scale, int causal) {
    attention_dkdv<8, 8, 256>(dk, dv, q, k, v, dout, lse, delta, seqs, hq, hkv, d, scale, causal);
}

// cache[b, starts[b] + t, :] = kv[b, t, :] for rows of row elements (starts checked on the host):
// a copy, never a conversion.
__global__ void __launch_bounds__(MTRL_BLOCK) attention_kvwrite_fwd_f32(float* cache, const float* kv, const int* starts, int64_t bn, int64_t smax, int64_t tn, int64_t row) {
    int64_t total = bn * tn * row;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t j = e % row, t = (e / row) % tn, b = e / (row * tn);
        cache[(b * smax + starts[b] + t) * row + j] = kv[e];
    }
}

__global__ void __launch_bounds__(ATT_THREADS) attention_fwd_d128_bf16(bf16_t* out, float* lse, const bf16_t* q, const bf16_t* k, const bf16_t* v, const int* seqs,
                                                                       int64_t hq, int64_t hkv, int64_t d, float scale, int causal) {
    attention_fwd<16, 32, 128>(out, lse, q, k, v, seqs, hq, hkv, d, scale, causal);
}

__global__ void __launch_bounds__(ATT_THREADS) attention_fwd_d256_bf16(bf16_t* out, float* lse, const bf16_t* q, const bf16_t* k, const bf16_t* v, const int* seqs,
                                                                       int64_t hq, int64_t hkv, int64_t d, float scale, int causal) {
    attention_fwd<8, 16, 256>(out, lse, q, k, v, seqs, hq, hkv, d, scale, causal);
}

// delta[row] = dO_row · O_row (float32, in order), the D_i of the backward; one thread per row
// of [T·Hq].
__global__ void __launch_bounds__(MTRL_BLOCK) attention_delta_bwd_bf16(float* delta, const bf16_t* out, const bf16_t* dout, int64_t rows, int64_t d) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows) delta[i] = att_dot_t(dout + i * d, out + i * d, d);
}

__global__ void __launch_bounds__(ATT_THREADS) attention_dq_bwd_d128_bf16(bf16_t* dq, const bf16_t* q, const bf16_t* k, const bf16_t* v, const bf16_t* dout, const float* lse,
                                                                          const float* delta, const int* seqs, int64_t hq, int64_t hkv, int64_t d, float scale, int causal) {
    attention_dq<16, 16, 128>(dq, q, k, v, dout, lse, delta, seqs, hq, hkv, d, scale, causal);
}

__global__ void __launch_bounds__(ATT_THREADS) attention_dq_bwd_d256_bf16(bf16_t* dq, const bf16_t* q, const bf16_t* k, const bf16_t* v, const bf16_t* dout, const float* lse,
                                                                          const float* delta, const int* seqs, int64_t hq, int64_t hkv, int64_t d, float scale, int causal) {
    attention_dq<8, 8, 256>(dq, q, k, v, dout, lse, delta, seqs, hq, hkv, d, scale, causal);
}

__global__ void __launch_bounds__(ATT_THREADS) attention_dkdv_bwd_d128_bf16(bf16_t* dk, bf16_t* dv, const bf16_t* q, const bf16_t* k, const bf16_t* v, const bf16_t* dout,
                                                                            const float* lse, const float* delta, const int* seqs, int64_t hq, int64_t hkv, int64_t d,
                                                                            float scale, int causal) {
    attention_dkdv<16, 16, 128>(dk, dv, q, k, v, dout, lse, delta, seqs, hq, hkv, d, scale, causal);
}

__global__ void __launch_bounds__(ATT_THREADS) attention_dkdv_bwd_d256_bf16(bf16_t* dk, bf16_t* dv, const bf16_t* q, const bf16_t* k, const bf16_t* v, const bf16_t* dout,
                                                                            const float* lse, const float* delta, const int* seqs, int64_t hq, int64_t hkv, int64_t d,
                                                                            float scale, int causal) {
    attention_dkdv<8, 8, 256>(dk, dv, q, k, v, dout, lse, delta, seqs, hq, hkv, d, scale, causal);
}

// cache[b, starts[b] + t, :] = kv[b, t, :] for rows of row elements (starts checked on the host):
// a copy, never a conversion.
__global__ void __launch_bounds__(MTRL_BLOCK) attention_kvwrite_fwd_bf16(bf16_t* cache, const bf16_t* kv, const int* starts, int64_t bn, int64_t smax, int64_t tn, int64_t row) {
    int64_t total = bn * tn * row;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t j = e % row, t = (e / row) % tn, b = e / (row * tn);
        cache[(b * smax + starts[b] + t) * row + j] = kv[e];
    }
}

}  // extern "C"
