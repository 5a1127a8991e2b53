// One warp-wide tensor-core multiply-accumulate, D = A·B + C, with A 16×16 and B 16×8 in
// bfloat16 and C, D 16×8 in float32: the PTX instruction
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (sm_80 and newer).
//
// Fragments, as the PTX ISA's "Matrix Fragments for mma.m16n8k16 with floating point type"
// lays them out, with g = lane >> 2 (groupID) and t = lane % 4 (threadID_in_group); each .b32
// register holds two bfloat16, the lower-numbered element in its low 16 bits:
//
//	a[0]: A[g][2t, 2t+1]      a[1]: A[g+8][2t, 2t+1]
//	a[2]: A[g][2t+8, 2t+9]    a[3]: A[g+8][2t+8, 2t+9]
//	b[0]: B[2t, 2t+1][g]      b[1]: B[2t+8, 2t+9][g]
//	c[0], c[1]: C[g][2t, 2t+1]    c[2], c[3]: C[g+8][2t, 2t+1]   (d likewise)
//
// Every lane of the warp must call it together (the instruction is .sync.aligned).
//
// Under nvcc for sm_80+ it is the instruction itself. Elsewhere (the CPU emulator, which runs
// no PTX) it is a software model of it built from one warp exchange (cuemu_warp_gather: every
// lane's fragments to every lane; sixteen __shfl_sync would do, sixteen times slower there):
// each lane computes each of its D elements as c + a_0·b_0 + a_1·b_1 + … + a_15·b_15, summed
// left to right in float32. Every product of two bfloat16 is exact in float32 (8-bit
// significands), so the model's only roundings are those 16 additions; the hardware adds in an
// order (and with internal precision) the ISA leaves unspecified, so the two agree to within
// the float32 summation bound of a length-16 dot product, not bit for bit.
#pragma once
#include "common.cuh"

// mma_pack returns the .b32 register holding lo (bits 0-15) and hi (bits 16-31).
__device__ __forceinline__ unsigned int mma_pack(bf16_t lo, bf16_t hi) {
    return (unsigned int)lo | ((unsigned int)hi << 16);
}

#if !defined(__CUDA_ARCH__)
// mma_lo and mma_hi widen the bfloat16 in bits 0-15 and 16-31 of r.
__device__ __forceinline__ float mma_lo(unsigned int r) { return __uint_as_float(r << 16); }
__device__ __forceinline__ float mma_hi(unsigned int r) { return __uint_as_float(r & 0xffff0000u); }
#endif

__device__ __forceinline__ void mma_bf16_16816(float d[4], const unsigned int a[4], const unsigned int b[2], const float c[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
#elif defined(__CUDA_ARCH__)
#error "mma_bf16_16816 needs sm_80 or newer"
#else
    // Every lane's fragments to every lane, then each lane reads its rows of A and columns of B
    // from them: A[row][k] is half k % 2 of register (row >= 8) + 2·(k >= 8) of lane
    // 4·(row % 8) + (k % 8) / 2; B[k][n] is half k % 2 of register (k >= 8) of lane 4n + (k % 8) / 2.
    struct Frags {
        unsigned int a[4], b[2];
    } mine = {{a[0], a[1], a[2], a[3]}, {b[0], b[1]}}, all[32];
    cuemu_warp_gather(mine, all);
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float out[4];
    for (int e = 0; e < 4; e++) {
        int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        float acc = c[e];
        for (int k = 0; k < 16; k++) {
            unsigned int ra = all[4 * (row % 8) + (k % 8) / 2].a[(row >= 8) + 2 * (k >= 8)];
            unsigned int rb = all[4 * col + (k % 8) / 2].b[k >= 8];
            acc += (k % 2 ? mma_hi(ra) : mma_lo(ra)) * (k % 2 ? mma_hi(rb) : mma_lo(rb));
        }
        out[e] = acc;
    }
    for (int e = 0; e < 4; e++) d[e] = out[e];
#endif
}
