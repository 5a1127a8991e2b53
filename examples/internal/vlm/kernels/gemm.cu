// The model's matrix products, forward and backward alike (the backward of y = x·W is two
// products with transposed operands): C = op(A)·op(B) + beta·C on row-major float32, op(A)
// [m, k] (A stored [k, m] when ta), op(B) [k, n] (B stored [n, k] when tb).
//
// A 16×16 output tile per block of 16×16 threads; the k loop walks 16-wide tiles of A and B
// staged in shared memory. Each output is one thread's sum over p = 0..k-1 in order, started
// from 0, then added to beta·C (beta 0 writes the sum, so C may hold garbage).
#include "vlm.cuh"

#define VLM_TILE 16

extern "C" __global__ void __launch_bounds__(VLM_TILE * VLM_TILE)
vlm_gemm_f32(float* c, const float* a, const float* b, int64_t m, int64_t n, int64_t k, int ta, int tb, float beta) {
    __shared__ float as[VLM_TILE][VLM_TILE + 1];
    __shared__ float bs[VLM_TILE][VLM_TILE + 1];
    int tx = threadIdx.x % VLM_TILE, ty = threadIdx.x / VLM_TILE;
    int64_t i = (int64_t)blockIdx.y * VLM_TILE + ty; // output row
    int64_t j = (int64_t)blockIdx.x * VLM_TILE + tx; // output column
    float acc = 0.f;
    for (int64_t p0 = 0; p0 < k; p0 += VLM_TILE) {
        int64_t pa = p0 + tx, pb = p0 + ty;
        float av = 0.f, bv = 0.f;
        if (i < m && pa < k) av = ta ? a[pa * m + i] : a[i * k + pa];
        if (j < n && pb < k) bv = tb ? b[j * k + pb] : b[pb * n + j];
        as[ty][tx] = av;
        bs[ty][tx] = bv;
        __syncthreads();
        int64_t kk = k - p0 < VLM_TILE ? k - p0 : VLM_TILE;
        for (int q = 0; q < kk; q++) acc += as[ty][q] * bs[q][tx];
        __syncthreads();
    }
    if (i < m && j < n) {
        float* cp = c + i * n + j;
        *cp = beta == 0.f ? acc : beta * *cp + acc;
    }
}
