// Scaled dot-product attention in bfloat16 on tensor cores, head dimensions up to 128: the
// forward (FlashAttention-2's schedule) and the backward. The same sequences, layouts, masks
// and outputs as the scalar kernels of attention.cu.
#include "attention.cuh"
#include "mma.cuh"

// A block of four warps owns BQ = 64 query rows of one head, 16 per warp, with its rows of Q in
// registers as mma A fragments; it visits the keys in tiles of BK = 64 staged in shared memory
// as bfloat16. Per tile each warp computes its 16×64 scores S = Q·Kᵀ with mma (float32 sums),
// scales and masks them, updates its rows' running max m and sum l in float32 (the online
// softmax, the four lanes of a row combining through shuffles) and adds P·V into its 16×D
// float32 accumulator with mma.
//
// P is rounded to bfloat16 to enter the mma, but not once: p = hi + lo + r with hi the nearest
// bfloat16 to p and lo the nearest to p − hi, and the kernel adds both hi·V and lo·V, so
// |r| <= 2⁻⁸·|p − hi| <= 2⁻¹⁶·|p| (bfloat16 rounds to 8 significant bits): the weights keep
// about 16 bits, and the output stays within
// the float32 bounds the scalar kernels meet (l sums the float32 p). Q, K and V are bfloat16
// already, so every product is exact; what differs from the scalar forward is only the order
// of the float32 sums. Any head dimension up to 128 runs here: the staged tiles are zero beyond
// d (to the next multiple of 16) and beyond the sequence's last key.
#define ATT_MMA_BQ 64
#define ATT_MMA_BK 64
#define ATT_MMA_DM 128
// Row stride of the shared tiles in bfloat16: 8 more than DM, so that the fragment loads of a
// warp (rows g = 0..7 at 272-byte steps, 4-byte words t = 0..3) hit 32 different banks.
#define ATT_MMA_LD (ATT_MMA_DM + 8)

// att_mma_stage copies rows [r0, r0 + ROWS) of head h of x (rows of d) into dst[ROWS][LD] as
// bfloat16, zero past the sequence's n rows and in columns [d, dp). vec: d is a multiple of 8
// and x 16-byte aligned, so rows move in 16-byte pieces.
template <int ROWS>
__device__ __forceinline__ void att_mma_stage(bf16_t* dst, const bf16_t* x, int64_t row0, int64_t r0, int64_t n, int64_t heads, int64_t h,
                                              int64_t d, int dp, bool vec) {
    if (vec) {
        int pieces = dp / 8;
        for (int e = threadIdx.x; e < ROWS * pieces; e += ATT_THREADS) {
            int r = e / pieces, c = e % pieces * 8;
            uint4 w = {0, 0, 0, 0};
            if (r0 + r < n && c < d) w = *(const uint4*)(x + ((row0 + r0 + r) * heads + h) * d + c);
            *(uint4*)(dst + r * ATT_MMA_LD + c) = w;
        }
        return;
    }
    for (int e = threadIdx.x; e < ROWS * dp; e += ATT_THREADS) {
        int r = e / dp, c = e % dp;
        dst[r * ATT_MMA_LD + c] = r0 + r < n && c < d ? x[((row0 + r0 + r) * heads + h) * d + c] : (bf16_t)0;
    }
}

// att_mma_q returns element (row, col) of the query rows of head h, 0 outside the sequence or d.
__device__ __forceinline__ bf16_t att_mma_q(const bf16_t* q, int64_t q0, int64_t row, int64_t qn, int64_t hq, int64_t h, int64_t d, int64_t col) {
    return row < qn && col < d ? q[((q0 + row) * hq + h) * d + col] : (bf16_t)0;
}

// att_mma_split returns the registers of the bfloat16 pairs nearest (x, y) (hi) and nearest
// to what they leave (lo).
__device__ __forceinline__ void att_mma_split(float x, float y, unsigned int* hi, unsigned int* lo) {
    bf16_t hx = f32_to_bf16(x), hy = f32_to_bf16(y);
    *hi = mma_pack(hx, hy);
    *lo = mma_pack(f32_to_bf16(x - bf16_to_f32(hx)), f32_to_bf16(y - bf16_to_f32(hy)));
}

extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_mma_fwd_bf16(bf16_t* out, float* lse, const bf16_t* q, const bf16_t* k, const bf16_t* v,
                                                                                 const int* seqs, int64_t hq, int64_t hkv, int64_t d, float scale, int causal) {
    constexpr int BQ = ATT_MMA_BQ, BK = ATT_MMA_BK, DM = ATT_MMA_DM, LD = ATT_MMA_LD;
    // uint4 arrays: 16-byte alignment for the staging stores.
    __shared__ uint4 kraw[BK * LD / 8], vraw[BK * LD / 8];
    bf16_t *ks = (bf16_t*)kraw, *vs = (bf16_t*)vraw;
    int64_t b = blockIdx.y / hq, h = blockIdx.y % hq, hk = h / (hq / hkv);
    int64_t q0 = seqs[4 * b], qn = seqs[4 * b + 1], k0 = seqs[4 * b + 2], kn = seqs[4 * b + 3];
    // The last query tiles first: under a causal mask they see the most keys, and starting them
    // early shortens the tail of the launch.
    int64_t t0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * BQ;
    if (t0 >= qn) return;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int nk = (int)((d + 15) / 16), nn = (int)((d + 7) / 8), dp = nk * 16;
    bool vec = d % 8 == 0 && ((uintptr_t)k % 16 | (uintptr_t)v % 16) == 0;
    int64_t w0 = t0 + warp * 16, r[2] = {w0 + g, w0 + g + 8};  // the warp's first row, this lane's rows
    // Q as A fragments, one per 16 columns.
    unsigned int qa[DM / 16][4];
#pragma unroll
    for (int kk = 0; kk < DM / 16; kk++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int64_t row = r[i & 1], col = kk * 16 + 2 * t + (i >> 1) * 8;
            qa[kk][i] = mma_pack(att_mma_q(q, q0, row, qn, hq, h, d, col), att_mma_q(q, q0, row, qn, hq, h, d, col + 1));
        }
    }
    float o[DM / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
#pragma unroll
    for (int n = 0; n < DM / 8; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) o[n][i] = 0;
    int64_t kend = att_keys(t0, BQ, qn, kn, causal);
    // One past the last key the warp's rows see (all its rows are past the sequence: none).
    int64_t wend = w0 >= qn ? 0 : att_keys(w0, 16, qn, kn, causal);
    for (int64_t kt = 0; kt < kend; kt += BK) {
        __syncthreads();
        att_mma_stage<BK>(ks, k, k0, kt, kn, hkv, hk, d, dp, vec);
        att_mma_stage<BK>(vs, v, k0, kt, kn, hkv, hk, d, dp, vec);
        __syncthreads();
        if (kt >= wend) continue;  // the same for the whole warp: its mma stay together
        // S = Q·Kᵀ: n-tile j holds keys kt + 8j .. kt + 8j + 7; B[c][n] = K[n][c].
        float s[BK / 8][4];
#pragma unroll
        for (int j = 0; j < BK / 8; j++) {
#pragma unroll
            for (int i = 0; i < 4; i++) s[j][i] = 0;
            const bf16_t* kr = ks + (8 * j + g) * LD + 2 * t;
#pragma unroll
            for (int kk = 0; kk < DM / 16; kk++) {
                if (kk < nk) {
                    unsigned int bb[2] = {*(const unsigned int*)(kr + kk * 16), *(const unsigned int*)(kr + kk * 16 + 8)};
                    mma_bf16_16816(s[j], qa[kk], bb, s[j]);
                }
            }
        }
        // Scale, mask, and the online softmax of this lane's two rows (i = 0: r[0], elements 0
        // and 1 of each tile; i = 1: r[1], elements 2 and 3).
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int j = 0; j < BK / 8; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int64_t key = kt + 8 * j + 2 * t + (e & 1);
                s[j][e] = att_visible(r[e >> 1], key, qn, kn, causal) ? s[j][e] * scale : -INFINITY;
                mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
            }
        }
        float alpha[2], sum[2] = {0, 0};
#pragma unroll
        for (int i = 0; i < 2; i++) {
            // The row's four lanes are t = 0..3 of one group: lanes differing in bits 0 and 1.
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
            // A row that sees no key yet keeps m = −∞; exp(−∞ − 0) = 0 then for its p and alpha.
            float base = mx[i] == -INFINITY ? 0.f : mx[i];
            alpha[i] = expf(m[i] - base);
            m[i] = mx[i];
        }
#pragma unroll
        for (int j = 0; j < BK / 8; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float base = m[e >> 1] == -INFINITY ? 0.f : m[e >> 1];
                s[j][e] = expf(s[j][e] - base);
                sum[e >> 1] += s[j][e];
            }
        }
#pragma unroll
        for (int i = 0; i < 2; i++) {
            sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
            sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
            l[i] = l[i] * alpha[i] + sum[i];
        }
#pragma unroll
        for (int n = 0; n < DM / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[n][e] *= alpha[e >> 1];
        // O += P·V, 16 keys at a time: the score tiles 2kk and 2kk+1 are the A fragment
        // (a[0], a[1] from tile 2kk's row pairs, a[2], a[3] from tile 2kk+1's); B[key][c] = V[key][c].
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            unsigned int ph[4], pl[4];
            att_mma_split(s[2 * kk][0], s[2 * kk][1], &ph[0], &pl[0]);
            att_mma_split(s[2 * kk][2], s[2 * kk][3], &ph[1], &pl[1]);
            att_mma_split(s[2 * kk + 1][0], s[2 * kk + 1][1], &ph[2], &pl[2]);
            att_mma_split(s[2 * kk + 1][2], s[2 * kk + 1][3], &ph[3], &pl[3]);
            const bf16_t* vr = vs + (16 * kk + 2 * t) * LD + g;
#pragma unroll
            for (int n = 0; n < DM / 8; n++) {
                if (n < nn) {
                    const bf16_t* p = vr + 8 * n;
                    unsigned int bb[2] = {mma_pack(p[0], p[LD]), mma_pack(p[8 * LD], p[9 * LD])};
                    mma_bf16_16816(o[n], ph, bb, o[n]);
                    mma_bf16_16816(o[n], pl, bb, o[n]);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (r[i] >= qn) continue;
        int64_t row = (q0 + r[i]) * hq + h;
#pragma unroll
        for (int n = 0; n < DM / 8; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int64_t col = 8 * n + 2 * t + e;
                if (col < d) store_f32(out, row * d + col, l[i] > 0 ? o[n][2 * i + e] / l[i] : 0.f);
            }
        }
        if (lse && t == 0) lse[row] = l[i] > 0 ? m[i] + logf(l[i]) : -INFINITY;
    }
}

// ---- The bfloat16 backward on tensor cores ----
//
// The scalar backward's decomposition (dQ per query tile, dK and dV per key tile over the
// group's query heads and the query tiles in order: every gradient element owned by one lane,
// no atomics), with every product on mma and the same two-bfloat16 split for the A operands
// computed in float32 (P and dS), so that the results keep the float32 bounds.

// att_mma_arow returns the A fragment of rows [r0, r0+16) and columns [c0, c0+16) of x [..][LD].
__device__ __forceinline__ void att_mma_arow(unsigned int a[4], const bf16_t* x, int r0, int c0) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const bf16_t* p = x + (r0 + g) * ATT_MMA_LD + c0 + 2 * t;
    a[0] = *(const unsigned int*)p;
    a[1] = *(const unsigned int*)(p + 8 * ATT_MMA_LD);
    a[2] = *(const unsigned int*)(p + 8);
    a[3] = *(const unsigned int*)(p + 8 * ATT_MMA_LD + 8);
}

// att_mma_bt returns the B fragment B[c][n] = x[n0 + n][c0 + c] (the rows of x as columns).
__device__ __forceinline__ void att_mma_bt(unsigned int b[2], const bf16_t* x, int n0, int c0) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const bf16_t* p = x + (n0 + g) * ATT_MMA_LD + c0 + 2 * t;
    b[0] = *(const unsigned int*)p;
    b[1] = *(const unsigned int*)(p + 8);
}

// att_mma_b returns the B fragment B[k][n] = x[k0 + k][n0 + n].
__device__ __forceinline__ void att_mma_b(unsigned int b[2], const bf16_t* x, int k0, int n0) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const bf16_t* p = x + (k0 + 2 * t) * ATT_MMA_LD + n0 + g;
    b[0] = mma_pack(p[0], p[ATT_MMA_LD]);
    b[1] = mma_pack(p[8 * ATT_MMA_LD], p[9 * ATT_MMA_LD]);
}

// attention_mma_dq_bwd_bf16: dQ_i = scale·Σ_j dS_ij K_j with dS_ij = P_ij (dO_i·V_j − D_i), one
// block per 64 query rows (16 per warp, Q and dO in registers) and head, over 32-key tiles.
extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_mma_dq_bwd_bf16(bf16_t* dq, const bf16_t* q, const bf16_t* k, const bf16_t* v, const bf16_t* dout,
                                                                                    const float* lse, const float* delta, const int* seqs, int64_t hq, int64_t hkv,
                                                                                    int64_t d, float scale, int causal) {
    constexpr int BQ = ATT_MMA_BQ, BK = 32, DM = ATT_MMA_DM;
    __shared__ uint4 kraw[BK * ATT_MMA_LD / 8], vraw[BK * ATT_MMA_LD / 8];
    bf16_t *ks = (bf16_t*)kraw, *vs = (bf16_t*)vraw;
    int64_t b = blockIdx.y / hq, h = blockIdx.y % hq, hk = h / (hq / hkv);
    int64_t q0 = seqs[4 * b], qn = seqs[4 * b + 1], k0 = seqs[4 * b + 2], kn = seqs[4 * b + 3];
    int64_t t0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * BQ;  // the longest tiles first (causal)
    if (t0 >= qn) return;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int nk = (int)((d + 15) / 16), nn = (int)((d + 7) / 8), dp = nk * 16;
    bool vec = d % 8 == 0 && ((uintptr_t)k % 16 | (uintptr_t)v % 16) == 0;
    int64_t w0 = t0 + warp * 16, r[2] = {w0 + g, w0 + g + 8};
    unsigned int qa[DM / 16][4], da[DM / 16][4];
#pragma unroll
    for (int kk = 0; kk < DM / 16; kk++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int64_t row = r[i & 1], col = kk * 16 + 2 * t + (i >> 1) * 8;
            qa[kk][i] = mma_pack(att_mma_q(q, q0, row, qn, hq, h, d, col), att_mma_q(q, q0, row, qn, hq, h, d, col + 1));
            da[kk][i] = mma_pack(att_mma_q(dout, q0, row, qn, hq, h, d, col), att_mma_q(dout, q0, row, qn, hq, h, d, col + 1));
        }
    }
    float rl[2], rd[2], acc[DM / 8][4];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        rl[i] = r[i] < qn ? lse[(q0 + r[i]) * hq + h] : 0.f;
        rd[i] = r[i] < qn ? delta[(q0 + r[i]) * hq + h] : 0.f;
    }
#pragma unroll
    for (int n = 0; n < DM / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[n][e] = 0;
    int64_t kend = att_keys(t0, BQ, qn, kn, causal);
    int64_t wend = w0 >= qn ? 0 : att_keys(w0, 16, qn, kn, causal);
    for (int64_t kt = 0; kt < kend; kt += BK) {
        __syncthreads();
        att_mma_stage<BK>(ks, k, k0, kt, kn, hkv, hk, d, dp, vec);
        att_mma_stage<BK>(vs, v, k0, kt, kn, hkv, hk, d, dp, vec);
        __syncthreads();
        if (kt >= wend) continue;  // the same for the whole warp
        float s[BK / 8][4], dpv[BK / 8][4];
#pragma unroll
        for (int j = 0; j < BK / 8; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) s[j][e] = dpv[j][e] = 0;
#pragma unroll
            for (int kk = 0; kk < DM / 16; kk++) {
                if (kk < nk) {
                    unsigned int bb[2];
                    att_mma_bt(bb, ks, 8 * j, kk * 16);
                    mma_bf16_16816(s[j], qa[kk], bb, s[j]);
                    att_mma_bt(bb, vs, 8 * j, kk * 16);
                    mma_bf16_16816(dpv[j], da[kk], bb, dpv[j]);
                }
            }
        }
        // dS in place of S.
#pragma unroll
        for (int j = 0; j < BK / 8; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int64_t key = kt + 8 * j + 2 * t + (e & 1);
                float p = att_visible(r[e >> 1], key, qn, kn, causal) ? expf(s[j][e] * scale - rl[e >> 1]) : 0.f;
                s[j][e] = p * (dpv[j][e] - rd[e >> 1]);
            }
        }
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            unsigned int ph[4], pl[4];
            att_mma_split(s[2 * kk][0], s[2 * kk][1], &ph[0], &pl[0]);
            att_mma_split(s[2 * kk][2], s[2 * kk][3], &ph[1], &pl[1]);
            att_mma_split(s[2 * kk + 1][0], s[2 * kk + 1][1], &ph[2], &pl[2]);
            att_mma_split(s[2 * kk + 1][2], s[2 * kk + 1][3], &ph[3], &pl[3]);
#pragma unroll
            for (int n = 0; n < DM / 8; n++) {
                if (n < nn) {
                    unsigned int bb[2];
                    att_mma_b(bb, ks, 16 * kk, 8 * n);
                    mma_bf16_16816(acc[n], ph, bb, acc[n]);
                    mma_bf16_16816(acc[n], pl, bb, acc[n]);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (r[i] >= qn) continue;
        int64_t row = (q0 + r[i]) * hq + h;
#pragma unroll
        for (int n = 0; n < DM / 8; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int64_t col = 8 * n + 2 * t + e;
                if (col < d) store_f32(dq, row * d + col, acc[n][2 * i + e] * scale);
            }
        }
    }
}

// attention_mma_dkdv_bwd_bf16: dV_j = Σ_i P_ij dO_i and dK_j = scale·Σ_i dS_ij Q_i, one block per
// 64 keys (16 per warp; K, V staged once) and key/value head, over the group's query heads in
// order and their 16-query tiles in order.
extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_mma_dkdv_bwd_bf16(bf16_t* dk, bf16_t* dv, const bf16_t* q, const bf16_t* k, const bf16_t* v,
                                                                                      const bf16_t* dout, const float* lse, const float* delta, const int* seqs,
                                                                                      int64_t hq, int64_t hkv, int64_t d, float scale, int causal) {
    constexpr int BK = ATT_MMA_BK, BQ = 16, DM = ATT_MMA_DM;
    __shared__ uint4 kraw[BK * ATT_MMA_LD / 8], vraw[BK * ATT_MMA_LD / 8], qraw[BQ * ATT_MMA_LD / 8], oraw[BQ * ATT_MMA_LD / 8];
    __shared__ float ls[BQ], ds[BQ];
    bf16_t *ks = (bf16_t*)kraw, *vs = (bf16_t*)vraw, *qs = (bf16_t*)qraw, *os = (bf16_t*)oraw;
    int64_t b = blockIdx.y / hkv, hk = blockIdx.y % hkv, grp = hq / hkv;
    int64_t q0 = seqs[4 * b], qn = seqs[4 * b + 1], k0 = seqs[4 * b + 2], kn = seqs[4 * b + 3];
    int64_t kt = (int64_t)blockIdx.x * BK;  // causal: the first key tiles see the most queries
    if (kt >= kn) return;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int nk = (int)((d + 15) / 16), nn = (int)((d + 7) / 8), dp = nk * 16;
    bool vec = d % 8 == 0 && ((uintptr_t)k % 16 | (uintptr_t)v % 16 | (uintptr_t)q % 16 | (uintptr_t)dout % 16) == 0;
    att_mma_stage<BK>(ks, k, k0, kt, kn, hkv, hk, d, dp, vec);
    att_mma_stage<BK>(vs, v, k0, kt, kn, hkv, hk, d, dp, vec);
    int64_t kw0 = kt + warp * 16, kr[2] = {kw0 + g, kw0 + g + 8};
    float ak[DM / 8][4], av[DM / 8][4];
#pragma unroll
    for (int n = 0; n < DM / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) ak[n][e] = av[n][e] = 0;
    // The first query that sees key kt: kt <= qi + kn − qn.
    int64_t first = causal ? kt - (kn - qn) : 0;
    first = first < 0 ? 0 : first / BQ * BQ;
    for (int64_t h = hk * grp; h < (hk + 1) * grp; h++) {
        for (int64_t t0 = first; t0 < qn; t0 += BQ) {
            __syncthreads();
            att_mma_stage<BQ>(qs, q, q0, t0, qn, hq, h, d, dp, vec);
            att_mma_stage<BQ>(os, dout, q0, t0, qn, hq, h, d, dp, vec);
            if (threadIdx.x < BQ) {
                int64_t qi = t0 + threadIdx.x;
                ls[threadIdx.x] = qi < qn ? lse[(q0 + qi) * hq + h] : 0.f;
                ds[threadIdx.x] = qi < qn ? delta[(q0 + qi) * hq + h] : 0.f;
            }
            __syncthreads();
            // The warp's keys are all past the sequence, or (causal) after the tile's last query's.
            if (kw0 >= kn || (causal && kw0 > t0 + BQ - 1 + kn - qn)) continue;
            // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: rows are the warp's 16 keys, n-tile j queries t0 + 8j...
            float s[2][4], dpv[2][4];
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[j][e] = dpv[j][e] = 0;
#pragma unroll
            for (int kk = 0; kk < DM / 16; kk++) {
                if (kk < nk) {
                    unsigned int ka[4], va[4];
                    att_mma_arow(ka, ks, warp * 16, kk * 16);
                    att_mma_arow(va, vs, warp * 16, kk * 16);
#pragma unroll
                    for (int j = 0; j < 2; j++) {
                        unsigned int bb[2];
                        att_mma_bt(bb, qs, 8 * j, kk * 16);
                        mma_bf16_16816(s[j], ka, bb, s[j]);
                        att_mma_bt(bb, os, 8 * j, kk * 16);
                        mma_bf16_16816(dpv[j], va, bb, dpv[j]);
                    }
                }
            }
            // Pᵀ in s, dSᵀ in dpv.
#pragma unroll
            for (int j = 0; j < 2; j++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int c = 8 * j + 2 * t + (e & 1);
                    float p = att_visible(t0 + c, kr[e >> 1], qn, kn, causal) ? expf(s[j][e] * scale - ls[c]) : 0.f;
                    s[j][e] = p;
                    dpv[j][e] = p * (dpv[j][e] - ds[c]);
                }
            }
            unsigned int ph[4], pl[4], sh[4], sl[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                att_mma_split(s[i >> 1][2 * (i & 1)], s[i >> 1][2 * (i & 1) + 1], &ph[i], &pl[i]);
                att_mma_split(dpv[i >> 1][2 * (i & 1)], dpv[i >> 1][2 * (i & 1) + 1], &sh[i], &sl[i]);
            }
#pragma unroll
            for (int n = 0; n < DM / 8; n++) {
                if (n < nn) {
                    unsigned int bb[2];
                    att_mma_b(bb, os, 0, 8 * n);
                    mma_bf16_16816(av[n], ph, bb, av[n]);
                    mma_bf16_16816(av[n], pl, bb, av[n]);
                    att_mma_b(bb, qs, 0, 8 * n);
                    mma_bf16_16816(ak[n], sh, bb, ak[n]);
                    mma_bf16_16816(ak[n], sl, bb, ak[n]);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (kr[i] >= kn) continue;
        int64_t row = ((k0 + kr[i]) * hkv + hk) * d;
#pragma unroll
        for (int n = 0; n < DM / 8; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int64_t col = 8 * n + 2 * t + e;
                if (col < d) {
                    store_f32(dk, row + col, ak[n][2 * i + e] * scale);
                    store_f32(dv, row + col, av[n][2 * i + e]);
                }
            }
        }
    }
}

// attention_mma_check_bf16 runs one mma_bf16_16816 on one warp for the tests: d = a·b + c with
// a 16×16 and b 16×8 row-major bfloat16, c and d 16×8 row-major float32, each lane loading and
// storing its fragments as the PTX ISA lays them out (mma.cuh).
extern "C" __global__ void __launch_bounds__(32) attention_mma_check_bf16(float* d, const bf16_t* a, const bf16_t* b, const float* c) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    unsigned int af[4], bf[2];
    float cf[4], df[4];
    for (int i = 0; i < 4; i++) {
        int row = g + (i & 1) * 8, col = 2 * t + (i >> 1) * 8;
        af[i] = mma_pack(a[row * 16 + col], a[row * 16 + col + 1]);
    }
    for (int i = 0; i < 2; i++) bf[i] = mma_pack(b[(2 * t + 8 * i) * 8 + g], b[(2 * t + 8 * i + 1) * 8 + g]);
    for (int i = 0; i < 4; i++) cf[i] = c[(g + (i >> 1) * 8) * 8 + 2 * t + (i & 1)];
    mma_bf16_16816(df, af, bf, cf);
    for (int i = 0; i < 4; i++) d[(g + (i >> 1) * 8) * 8 + 2 * t + (i & 1)] = df[i];
}

