// Shared helpers of the mtrl CUDA kernels. Every kernel is extern "C", takes int64 sizes and
// offsets, accumulates in fp32 (or fp64 where the host reference does), and reduces in a fixed
// order (no floating-point atomics), so two runs on the same inputs give the same bits.
#pragma once
#include <stdint.h>

#define MTRL_BLOCK 256
#define MTRL_WARPS (MTRL_BLOCK / 32)

typedef unsigned short bf16_t;

__device__ __forceinline__ float bf16_to_f32(bf16_t h) {
    return __uint_as_float(((unsigned int)h) << 16);
}

// Round to nearest even, NaN stays a quiet NaN: tensor.BF16FromFloat32 bit for bit.
__device__ __forceinline__ bf16_t f32_to_bf16(float f) {
    unsigned int b = __float_as_uint(f);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return (bf16_t)((b >> 16) | 0x40u);
    }
    b += 0x7fffu + ((b >> 16) & 1u);
    return (bf16_t)(b >> 16);
}

template <typename T> __device__ __forceinline__ float load_f32(const T* p, int64_t i);
template <> __device__ __forceinline__ float load_f32<float>(const float* p, int64_t i) { return p[i]; }
template <> __device__ __forceinline__ float load_f32<bf16_t>(const bf16_t* p, int64_t i) { return bf16_to_f32(p[i]); }

template <typename T> __device__ __forceinline__ void store_f32(T* p, int64_t i, float v);
template <> __device__ __forceinline__ void store_f32<float>(float* p, int64_t i, float v) { p[i] = v; }
template <> __device__ __forceinline__ void store_f32<bf16_t>(bf16_t* p, int64_t i, float v) { p[i] = f32_to_bf16(v); }

// clamp as torch.clamp: NaN passes through (fminf/fmaxf would drop it).
__device__ __forceinline__ float clampf(float x, float lo, float hi) {
    return x < lo ? lo : (x > hi ? hi : x);
}

// inside reports whether a clamp to [lo, hi] passes the gradient (ends inclusive, NaN false).
__device__ __forceinline__ bool inside(float x, float lo, float hi) { return x >= lo && x <= hi; }

// Block-wide sum of doubles in a fixed order: warp butterfly, then warp 0 over the warp sums.
// Every thread gets the result. scratch holds MTRL_WARPS doubles.
__device__ __forceinline__ double block_sum_f64(double v, double* scratch) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    double r = 0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) r += scratch[w];
    return r;
}

__device__ __forceinline__ float block_sum_f32(float v, float* scratch) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float r = 0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) r += scratch[w];
    return r;
}

__device__ __forceinline__ int block_sum_i32(int v, int* scratch) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    int r = 0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) r += scratch[w];
    return r;
}

// Records the lowest bad row in *flag, 8 bytes the host sets to all ones (UINT64_MAX: no bad
// row) before the launch. Unsigned atomicMin is order-independent, so the result is
// deterministic.
__device__ __forceinline__ void flag_row(long long* flag, int64_t row) {
    atomicMin((unsigned long long*)flag, (unsigned long long)row);
}
