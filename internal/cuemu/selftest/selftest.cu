// Kernels that exercise the emulator itself (internal/cuemu's tests): the execution model on
// correct code, and each violation it must catch. They are compiled into the emulator next to
// mtrl's kernels; no PTX exists for them (the tests load hand-written entry declarations).
#include <stdint.h>

extern "C" {

// Block sums through every shuffle type, shared memory and barriers: out[b] for block b gets
// sum(in[b*blockDim.x + t]) as float, double, int and unsigned (four slots).
__global__ void __launch_bounds__(256) cuemu_selftest_reduce(double* out, const float* in) {
    __shared__ double sd[8];
    __shared__ float sf[8];
    __shared__ int si[8];
    __shared__ unsigned int su[8];
    float v = in[blockIdx.x * blockDim.x + threadIdx.x];
    float f = v;
    double d = v;
    int i = (int)v;
    unsigned int u = (unsigned int)v;
    for (int o = 16; o > 0; o >>= 1) {
        f += __shfl_xor_sync(0xffffffffu, f, o);
        d += __shfl_xor_sync(0xffffffffu, d, o);
        i += __shfl_xor_sync(0xffffffffu, i, o);
        u += __shfl_xor_sync(0xffffffffu, u, o);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sd[warp] = d;
        sf[warp] = f;
        si[warp] = i;
        su[warp] = u;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double rd = 0, rf = 0, ri = 0, ru = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
            rd += sd[w];
            rf += sf[w];
            ri += si[w];
            ru += su[w];
        }
        double* o = out + 4 * blockIdx.x;
        o[0] = rf;
        o[1] = rd;
        o[2] = ri;
        o[3] = ru;
    }
}

// Atomics: counts[0] += 1 per thread, counts[1] = min over threads of (1000 - tid).
__global__ void cuemu_selftest_atomics(int* counts) {
    atomicAdd(&counts[0], 1);
    atomicMin(&counts[1], 1000 - (int)(blockIdx.x * blockDim.x + threadIdx.x));
}

// Every parameter size the backend passes: out = {f, (double)i, (double)l, (double)u8}.
__global__ void cuemu_selftest_params(double* out, float f, int i, int64_t l, unsigned char u8) {
    if (threadIdx.x == 0) {
        out[0] = f;
        out[1] = i;
        out[2] = (double)l;
        out[3] = u8;
    }
}

// x*y+z rounded twice (as nvcc -fmad=false): with contraction it would round once.
__global__ void cuemu_selftest_fma(float* out, float x, float y, float z) {
    if (threadIdx.x == 0) out[0] = x * y + z;
}

// Reads shared memory nobody wrote: the emulator fills it with 0xff bytes (NaN).
__global__ void cuemu_selftest_uninit(float* out) {
    __shared__ float s[4];
    if (threadIdx.x == 0) out[0] = s[threadIdx.x + 1];
}

// A planted bug: the blocks after the first read shared memory only block 0 wrote. fmaxf drops
// the NaN the emulator fills shared memory with, so by default they read 0; under
// CUEMU_SHARED=stale they read block 0's 7, as a GPU's next block on the multiprocessor would.
__global__ void cuemu_selftest_leftover(float* out) {
    __shared__ float s[32];
    if (blockIdx.x == 0) s[threadIdx.x] = 7.0f;
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = fmaxf(s[1], 0.0f);
}

// Order-dependent code: every thread writes its own index to one place without a barrier, so
// the value left depends on which thread ran last.
__global__ void cuemu_selftest_order(int* out) {
    out[0] = (int)(blockIdx.x * blockDim.x + threadIdx.x);
}

// Threads 128 and up return before a barrier the others wait at.
__global__ void cuemu_selftest_skip_barrier(int* out) {
    if (threadIdx.x >= 128) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

// Lane 5 of warp 1 exits before a full-warp shuffle.
__global__ void cuemu_selftest_missing_lane(int* out) {
    if (threadIdx.x == 37) return;
    int v = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
    out[threadIdx.x] = v;
}

// Half of warp 0 shuffles while the other half waits at a barrier: a deadlock.
__global__ void cuemu_selftest_deadlock(int* out) {
    if (threadIdx.x < 16) {
        out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
    } else {
        __syncthreads();
    }
}

// __shfl_sync from an arbitrary lane: out[tid] = the 8-byte value (tid << 32 | src) read from
// lane src = (7·lane + 3) % 37 of the warp, which the device takes modulo 32 (37 > 31 on purpose),
// then the 4-byte value of lane 31 − lane.
__global__ void cuemu_selftest_shfl_idx(unsigned long long* out) {
    int lane = threadIdx.x & 31;
    unsigned long long mine = (unsigned long long)threadIdx.x << 32 | (unsigned)lane;
    unsigned long long v = __shfl_sync(0xffffffffu, mine, (7 * lane + 3) % 37);
    int w = __shfl_sync(0xffffffffu, (int)threadIdx.x, 31 - lane);
    out[2 * threadIdx.x] = v;
    out[2 * threadIdx.x + 1] = (unsigned long long)w;
}

// cuemu_warp_gather: out[32·tid + i] = the value lane i of the thread's warp contributed,
// {tid, 1000·tid} (a 16-byte struct).
__global__ void cuemu_selftest_gather(long long* out) {
    struct V {
        long long a, b;
    } mine = {(long long)threadIdx.x, 1000 * (long long)threadIdx.x}, all[32];
    cuemu_warp_gather(mine, all);
    for (int i = 0; i < 32; i++) out[64 * threadIdx.x + 2 * i] = all[i].a, out[64 * threadIdx.x + 2 * i + 1] = all[i].b;
}

// Lanes 0-15 of warp 0 reach __shfl_sync while lanes 16-31 reach __shfl_xor_sync.
__global__ void cuemu_selftest_mixed_shuffle(int* out) {
    int lane = threadIdx.x & 31;
    out[threadIdx.x] = lane < 16 ? __shfl_sync(0xffffffffu, lane, 0) : __shfl_xor_sync(0xffffffffu, lane, 1);
}

// Reads one element past the end of in (n elements): caught only under AddressSanitizer.
__global__ void cuemu_selftest_oob(float* out, const float* in, int64_t n) {
    if (threadIdx.x == 0) out[0] = in[n];
}

}  // extern "C"
