// The kernel of cuda's bring-your-own-kernels Example (example_byok_test.go): y = a·x + y.
// Regenerate the PTX with `go generate ./cuda`; TestExampleKernelsGenerated checks drift.
#include <stdint.h>

extern "C" __global__ void byok_axpy_f32(float* y, const float* x, float a, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        y[i] = a * x[i] + y[i];
    }
}
