// Patch blackening of a batch of uint8 images (perturb.Blackening.ApplyBatch): the grids are
// drawn on the host from the seeded generators exactly as the pure-Go path does and uploaded as
// one byte per patch; the kernel copies src to dst and zeroes every channel of the black patches.
#include "common.cuh"

extern "C" {

// dst and src are [N, H, W*C] bytes (dst may be src); black is [N, rows*cols] 0/1 bytes with
// rows = ceil(H/ps), cols = ceil(W/ps). Grid-stride over all N*H*W*C bytes.
__global__ void __launch_bounds__(MTRL_BLOCK) perturb_blacken_fwd_u8(unsigned char* dst, const unsigned char* src, const unsigned char* black, int64_t n, int64_t h, int64_t w, int64_t c, int64_t ps) {
    int64_t rows = (h + ps - 1) / ps, cols = (w + ps - 1) / ps;
    int64_t img = h * w * c;
    for (int64_t i = (int64_t)blockIdx.x * MTRL_BLOCK + threadIdx.x; i < n * img; i += (int64_t)gridDim.x * MTRL_BLOCK) {
        int64_t k = i / img, p = i - k * img;
        int64_t y = p / (w * c), x = (p - y * w * c) / c;
        bool b = black[k * rows * cols + (y / ps) * cols + x / ps] != 0;
        dst[i] = b ? (unsigned char)0 : src[i];
    }
}

}  // extern "C"
