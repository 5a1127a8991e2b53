// Ports of internal/hostops' float32 exp (Exp32, ExpNonPos) so that the device kernels of the
// loss and advantage families round exactly like the pure-Go kernels they mirror. Compiled with
// -fmad=false, every operation below rounds on its own, as Go's do at the default GOAMD64=v1.
// From GOAMD64=v3 on, the Go compiler may fuse x*y+z into one FMA (the spec allows it wherever
// no explicit conversion rounds the product), and the host results can then differ in the
// last bit.
#pragma once
#include <stdint.h>

#define MTRL_LOG2E 1.44269504088896341f
#define MTRL_LN2HI 0.693359375f
#define MTRL_LN2LO -2.12194440e-4f

__device__ __forceinline__ float mtrl_exp_poly(float r) {
    return 1.f + r * (1.f + r * (1.f / 2.f + r * (1.f / 6.f + r * (1.f / 24.f + r * (1.f / 120.f + r * (1.f / 720.f + r * (1.f / 5040.f)))))));
}

// hostops.ExpNonPos: exp for arguments in [-87.3, 0.34], NaN in gives NaN out.
__device__ __forceinline__ float mtrl_exp_nonpos(float u) {
    int ki = -(int)(0.5f - u * MTRL_LOG2E);
    float k = (float)ki;
    float r = (u - k * MTRL_LN2HI) - k * MTRL_LN2LO;
    float p = mtrl_exp_poly(r);
    return p * __uint_as_float(((unsigned int)(ki + 127)) << 23);
}

// hostops.Exp32: 0 below -87.33654, NaN for NaN, exp in float64 above 88.
__device__ __forceinline__ float mtrl_exp32(float x) {
    if (!(x >= -87.33654f)) {
        return x != x ? x : 0.f;
    }
    if (x > 88.f) {
        return (float)exp((double)x);
    }
    float kf = x * MTRL_LOG2E + 0.5f;
    int ki = (int)kf;
    if (kf < (float)ki) ki--;
    float k = (float)ki;
    float r = (x - k * MTRL_LN2HI) - k * MTRL_LN2LO;
    float p = mtrl_exp_poly(r);
    return p * __uint_as_float(((unsigned int)(ki + 127)) << 23);
}

// ppo's expRatio for float32: exp of a clamped log ratio |x| <= 20.
__device__ __forceinline__ float mtrl_exp_ratio(float x) {
    if (x > 0.f) return 1.f / mtrl_exp_nonpos(-x);
    return mtrl_exp_nonpos(x);
}
