// cuemu.h: the part of the CUDA execution model that mtrl's kernels use, for compiling the
// unchanged .cu sources as C++ on the CPU. The generator (gen/) puts this header in front of
// every kernel source; runtime.cc runs each thread of a block as a fiber.
//
// What a kernel sees:
//   - __global__/__device__/__forceinline__/__noinline__/__launch_bounds__: plain C++ (the launch
//     bounds are checked by the Go side from the PTX's .maxntid);
//   - __shared__ statics: one copy per process in the section "cuemu_shared", filled with 0xff
//     bytes before every block (uninitialised shared memory reads as NaN / -1);
//   - threadIdx, blockIdx, blockDim, gridDim: the running fiber's coordinates;
//   - __syncthreads(): a block barrier every live thread must reach (a thread that exits instead
//     aborts the launch);
//   - __shfl_xor_sync and __shfl_sync (any source lane) on 4- and 8-byte types: a warp exchange
//     all 32 lanes must reach, every lane with the same kind of shuffle; cuemu_warp_gather (not
//     CUDA), every lane's value to every lane, for emulator models of warp-wide instructions;
//   - atomicAdd/Min/Max/Exch/CAS: plain read-modify-write (the threads of a launch never run at
//     the same time, so every update is atomic);
//   - bit casts (__int_as_float, …) and the round-to-nearest arithmetic intrinsics (__fmul_rn,
//     …); expf/exp/log and the rest of <math.h> are the host C library's.
//
// Build with -ffp-contract=off (scripts/cuda-emu sets it through CGO_CXXFLAGS), the host
// equivalent of nvcc -fmad=false.
#pragma once

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>
#include <utility>

struct uint3 {
    unsigned int x, y, z;
};
typedef uint3 dim3;

// uint4 is CUDA's 16-byte vector type (16-byte aligned, so a kernel may load one in a single
// access).
struct alignas(16) uint4 {
    unsigned int x, y, z, w;
};

namespace cuemu {

struct Block {
    uint3 idx, dim, grid;
};

// Thread is the state of one fiber that a kernel can see; the scheduler's bookkeeping lives in
// runtime.cc.
struct Thread {
    uint3 idx;
    const Block* block;
};

// current is the running fiber. Launches are serialised process-wide, so a plain global is
// enough; it is reloaded after every call that may switch fibers.
extern Thread* current;

void syncthreads();
// shfl_xor exchanges size bytes at v with lane (lane ^ lane_mask) of the warp.
void shfl_xor(void* v, int size, unsigned mask, int lane_mask, int width);
// shfl_idx exchanges size bytes at v for those of lane src_lane % 32 of the warp.
void shfl_idx(void* v, int size, unsigned mask, int src_lane, int width);
// warp_gather copies the size bytes at in of every lane of the warp, in lane order, to out.
void warp_gather(const void* in, int size, void* out);

}  // namespace cuemu

#define threadIdx (::cuemu::current->idx)
#define blockIdx (::cuemu::current->block->idx)
#define blockDim (::cuemu::current->block->dim)
#define gridDim (::cuemu::current->block->grid)

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ __attribute__((section("cuemu_shared"))) static

static inline void __syncthreads() { ::cuemu::syncthreads(); }

template <typename T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    static_assert(std::is_trivially_copyable<T>::value && (sizeof(T) == 4 || sizeof(T) == 8),
                  "__shfl_xor_sync: 4- or 8-byte types only");
    ::cuemu::shfl_xor(&v, (int)sizeof(T), mask, lane_mask, width);
    return v;
}

template <typename T>
static inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
    static_assert(std::is_trivially_copyable<T>::value && (sizeof(T) == 4 || sizeof(T) == 8),
                  "__shfl_sync: 4- or 8-byte types only");
    ::cuemu::shfl_idx(&v, (int)sizeof(T), mask, src_lane, width);
    return v;
}

// cuemu_warp_gather is not CUDA: an exchange in which every lane of the warp receives every
// lane's value (all[i] = lane i's v), in one step, for emulator-only code (#ifndef
// __CUDA_ARCH__) that models a warp-wide instruction, such as the tensor-core mma of
// cuda/kernels/mma.cuh. Like the shuffles, all 32 lanes must reach it.
template <typename T>
static inline void cuemu_warp_gather(const T& v, T all[32]) {
    static_assert(std::is_trivially_copyable<T>::value, "cuemu_warp_gather: trivially copyable types only");
    ::cuemu::warp_gather(&v, (int)sizeof(T), all);
}

// Bit casts.
template <typename To, typename From>
static inline To cuemu_bits(From f) {
    static_assert(sizeof(To) == sizeof(From), "size mismatch");
    To t;
    memcpy(&t, &f, sizeof t);
    return t;
}
static inline float __int_as_float(int x) { return cuemu_bits<float>(x); }
static inline float __uint_as_float(unsigned int x) { return cuemu_bits<float>(x); }
static inline int __float_as_int(float x) { return cuemu_bits<int>(x); }
static inline unsigned int __float_as_uint(float x) { return cuemu_bits<unsigned int>(x); }
static inline double __longlong_as_double(long long x) { return cuemu_bits<double>(x); }
static inline long long __double_as_longlong(double x) { return cuemu_bits<long long>(x); }

// Round-to-nearest arithmetic that nvcc never contracts; with -ffp-contract=off plain operators
// round the same way.
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }

// Atomics return the old value, as CUDA's do.
template <typename T>
static inline T atomicAdd(T* p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}
template <typename T>
static inline T atomicMin(T* p, T v) {
    T old = *p;
    *p = v < old ? v : old;
    return old;
}
template <typename T>
static inline T atomicMax(T* p, T v) {
    T old = *p;
    *p = v > old ? v : old;
    return old;
}
template <typename T>
static inline T atomicExch(T* p, T v) {
    T old = *p;
    *p = v;
    return old;
}
template <typename T>
static inline T atomicCAS(T* p, T cmp, T v) {
    T old = *p;
    if (old == cmp) *p = v;
    return old;
}

// ---- Kernel registration (used by the generated translation units) ----

namespace cuemu {

constexpr int kMaxParams = 32;

struct Kernel {
    const char* name;
    const char* source;      // the .cu file it was compiled from
    const char* param_names; // comma-separated, from the source
    int nparams;
    int size[kMaxParams];    // sizeof each parameter
    bool pointer[kMaxParams];
    void (*invoke)(const uint64_t* argv);  // calls the kernel with argv[i] read at size[i]
    Kernel* next;
};

void register_kernel(Kernel* k);

template <typename F>
struct Signature;

template <typename... A>
struct Signature<void (*)(A...)> {
    static_assert(sizeof...(A) <= kMaxParams, "too many kernel parameters");
    static constexpr int n = sizeof...(A);
    static void describe(Kernel* k) {
        k->nparams = n;
        int i = 0;
        ((k->size[i] = (int)sizeof(A), k->pointer[i] = std::is_pointer<A>::value, i++), ...);
        (void)i;
    }
    // A parameter is read from the start of its 8-byte slot (little-endian), as cuLaunchKernel
    // reads it from the pointer gorgonia.org/cu passes.
    template <typename T>
    static T load(const uint64_t* slot) {
        T v;
        memcpy(&v, slot, sizeof v);
        return v;
    }
    template <void (*F)(A...), size_t... I>
    static void call(const uint64_t* argv, std::index_sequence<I...>) {
        F(load<A>(argv + I)...);
    }
    template <void (*F)(A...)>
    static void invoke(const uint64_t* argv) {
        call<F>(argv, std::index_sequence_for<A...>{});
    }
};

struct Registrar {
    Registrar(Kernel* k) { register_kernel(k); }
};

}  // namespace cuemu

#define CUEMU_KERNEL(fn, file, params)                                                         \
    static ::cuemu::Kernel cuemu_kernel_##fn = [] {                                            \
        ::cuemu::Kernel k{};                                                                    \
        k.name = #fn;                                                                           \
        k.source = file;                                                                        \
        k.param_names = params;                                                                 \
        ::cuemu::Signature<decltype(&fn)>::describe(&k);                                        \
        k.invoke = &::cuemu::Signature<decltype(&fn)>::template invoke<&fn>;                    \
        return k;                                                                               \
    }();                                                                                        \
    static ::cuemu::Registrar cuemu_registrar_##fn(&cuemu_kernel_##fn);
