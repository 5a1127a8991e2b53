// The transformer op families of package tensor that are not GEMMs or attention (those are
// cuBLAS and attention.cu): linear's bias and column sums, RMSNorm and LayerNorm, RoPE,
// activations and SwiGLU, embedding gather and scatter-add, AdamW and the gradient-norm
// reductions. Each mirrors its pure-Go reference in internal/nnref: the same float32 roundings
// in the same order where the reference rounds, float64 where it sums or evaluates in float64,
// fixed-order reductions (no atomics), so two runs give the same bits.
#include "common.cuh"

extern "C" {

// ---- Linear (the GEMMs are cuBLAS) ----

// dst[i] = float(src[i]): a bfloat16 operand widened for a GEMM whose other operand is float32.
__global__ void __launch_bounds__(MTRL_BLOCK) linear_widen_fwd_bf16(float* dst, const bf16_t* src, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        dst[i] = bf16_to_f32(src[i]);
    }
}

// y[i, j] += bias[j] over rows × n.
__global__ void __launch_bounds__(MTRL_BLOCK) linear_bias_fwd_f32(float* y, const float* bias, int64_t rows, int64_t n) {
    int64_t total = rows * n;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        y[i] = y[i] + bias[i % n];
    }
}

// db[j] (+)= Σ_i dy[i, j], rows in ascending order (nnref.ColSum): one thread per column.
__global__ void __launch_bounds__(MTRL_BLOCK) linear_colsum_bwd_f32(float* db, const float* dy, int64_t rows, int64_t n, int acc) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    float s = 0;
    for (int64_t i = 0; i < rows; i++) s += dy[i * n + j];
    if (acc) s += db[j];
    db[j] = s;
}

}  // extern "C"

// The norms, RoPE, the activations and the embedding take float32 or bfloat16 activations (T):
// loads widen exactly and stores round to nearest even once (load_f32, store_f32), so a
// bfloat16 kernel does the float32 kernel's arithmetic on the widened values. The norms read
// float32 weights (the host widens bfloat16 ones into scratch first: they are [D]); the gather
// reads a float32 or bfloat16 table. Parameter gradients are float32.

// ---- RMSNorm and LayerNorm: one block per row; the backward's stats[2·row] = mean,
// stats[2·row+1] = rstd; the forward writes mean[row] and rstd[row] when they are not null
// (RMSNormStats, LayerNormStats) ----
//
// Thread t owns the row's elements j ≡ t (mod MTRL_BLOCK) and sums them in ascending j, then
// block_sum_f64 adds the threads' sums in its fixed tree. Up to NORM_REG_D (16 per thread) the
// row lives in registers: each input is read from memory once, all of a thread's loads issued
// before the first sum (many in flight), the passes after it on the registers. Longer rows take
// the same passes as loops over memory (later passes hit the cache). Both paths sum the same
// elements in the same order, so they give the same bits.

#define NORM_REG 16
#define NORM_REG_D (NORM_REG * MTRL_BLOCK)

// norm_j is the row index of the thread's k-th element.
__device__ __forceinline__ int64_t norm_j(int k) { return threadIdx.x + (int64_t)k * MTRL_BLOCK; }

// norm_load reads the thread's elements j = threadIdx.x + k·MTRL_BLOCK < d into v (0 beyond d).
template <typename T>
__device__ __forceinline__ void norm_load(float (&v)[NORM_REG], const T* p, int64_t d) {
#pragma unroll
    for (int k = 0; k < NORM_REG; k++) {
        v[k] = norm_j(k) < d ? load_f32<T>(p, norm_j(k)) : 0.f;
    }
}

template <typename T>
__device__ __forceinline__ float rms_scale(const T* x, int64_t d, double eps, double* scratch) {
    double ss = 0;
    for (int64_t j = threadIdx.x; j < d; j += MTRL_BLOCK) {
        double v = (double)load_f32<T>(x, j);
        ss += v * v;
    }
    ss = block_sum_f64(ss, scratch);
    return (float)(1.0 / sqrt(ss / (double)d + eps));
}

__device__ __forceinline__ float rms_scale_reg(const float (&x)[NORM_REG], int64_t d, double eps, double* scratch) {
    double ss = 0;
#pragma unroll
    for (int k = 0; k < NORM_REG; k++) {
        int64_t j = norm_j(k);
        if (j < d) {
            double v = (double)x[k];
            ss += v * v;
        }
    }
    ss = block_sum_f64(ss, scratch);
    return (float)(1.0 / sqrt(ss / (double)d + eps));
}

template <typename T>
__device__ __forceinline__ void layer_stats(const T* x, int64_t d, double eps, double* scratch, float* mean, float* rstd) {
    double s = 0;
    for (int64_t j = threadIdx.x; j < d; j += MTRL_BLOCK) s += (double)load_f32<T>(x, j);
    double mu = block_sum_f64(s, scratch) / (double)d;
    double ss = 0;
    for (int64_t j = threadIdx.x; j < d; j += MTRL_BLOCK) {
        double c = (double)load_f32<T>(x, j) - mu;
        ss += c * c;
    }
    ss = block_sum_f64(ss, scratch);
    *mean = (float)mu;
    *rstd = (float)(1.0 / sqrt(ss / (double)d + eps));
}

__device__ __forceinline__ void layer_stats_reg(const float (&x)[NORM_REG], int64_t d, double eps, double* scratch, float* mean, float* rstd) {
    double s = 0;
#pragma unroll
    for (int k = 0; k < NORM_REG; k++) {
        int64_t j = norm_j(k);
        if (j < d) { s += (double)x[k]; }
    }
    double mu = block_sum_f64(s, scratch) / (double)d;
    double ss = 0;
#pragma unroll
    for (int k = 0; k < NORM_REG; k++) {
        int64_t j = norm_j(k);
        if (j < d) {
            double c = (double)x[k] - mu;
            ss += c * c;
        }
    }
    ss = block_sum_f64(ss, scratch);
    *mean = (float)mu;
    *rstd = (float)(1.0 / sqrt(ss / (double)d + eps));
}

template <typename T>
__device__ void norm_rms_fwd(T* y, float* rstd, const T* x, const float* w, int64_t d, double eps) {
    __shared__ double scratch[MTRL_WARPS];
    const T* xi = x + (int64_t)blockIdx.x * d;
    T* yi = y + (int64_t)blockIdx.x * d;
    if (d <= NORM_REG_D) {
        float xv[NORM_REG];
        norm_load<T>(xv, xi, d);
        float r = rms_scale_reg(xv, d, eps, scratch);
        if (rstd && threadIdx.x == 0) rstd[blockIdx.x] = r;
#pragma unroll
        for (int k = 0; k < NORM_REG; k++) {
            int64_t j = norm_j(k);
            if (j < d) { store_f32<T>(yi, j, w[j] * (xv[k] * r)); }
        }
        return;
    }
    float r = rms_scale<T>(xi, d, eps, scratch);
    if (rstd && threadIdx.x == 0) rstd[blockIdx.x] = r;
    for (int64_t j = threadIdx.x; j < d; j += MTRL_BLOCK) store_f32<T>(yi, j, w[j] * (load_f32<T>(xi, j) * r));
}

// dx = r·(g − x̂·c) with g = dy·w, x̂ = x·r, c = mean(g·x̂); stats for the weight gradient.
template <typename T>
__device__ void norm_rms_bwd(T* dx, float* stats, const T* x, const float* w, const T* dy, int64_t d, double eps) {
    __shared__ double scratch[MTRL_WARPS];
    int64_t row = blockIdx.x;
    const T *xi = x + row * d, *dyi = dy + row * d;
    T* dxi = dx + row * d;
    float r;
    if (d <= NORM_REG_D) {
        float xv[NORM_REG], gv[NORM_REG];
        norm_load<T>(xv, xi, d);
        norm_load<T>(gv, dyi, d);
        r = rms_scale_reg(xv, d, eps, scratch);
        double gx = 0;
#pragma unroll
        for (int k = 0; k < NORM_REG; k++) {
            int64_t j = norm_j(k);
            if (j < d) {
                gv[k] = gv[k] * w[j];
                gx += (double)gv[k] * (double)(xv[k] * r);
            }
        }
        float c = (float)(block_sum_f64(gx, scratch) / (double)d);
#pragma unroll
        for (int k = 0; k < NORM_REG; k++) {
            int64_t j = norm_j(k);
            if (j < d) { store_f32<T>(dxi, j, r * (gv[k] - (xv[k] * r) * c)); }
        }
    } else {
        r = rms_scale<T>(xi, d, eps, scratch);
        double gx = 0;
        for (int64_t j = threadIdx.x; j < d; j += MTRL_BLOCK) {
            gx += (double)(load_f32<T>(dyi, j) * w[j]) * (double)(load_f32<T>(xi, j) * r);
        }
        float c = (float)(block_sum_f64(gx, scratch) / (double)d);
        for (int64_t j = threadIdx.x; j < d; j += MTRL_BLOCK) {
            float xh = load_f32<T>(xi, j) * r;
            store_f32<T>(dxi, j, r * (load_f32<T>(dyi, j) * w[j] - xh * c));
        }
    }
    if (threadIdx.x == 0) {
        stats[2 * row] = 0;
        stats[2 * row + 1] = r;
    }
}

template <typename T>
__device__ void norm_layer_fwd(T* y, float* mean, float* rstd, const T* x, const float* w, const float* b, int64_t d, double eps) {
    __shared__ double scratch[MTRL_WARPS];
    const T* xi = x + (int64_t)blockIdx.x * d;
    T* yi = y + (int64_t)blockIdx.x * d;
    float mu, r;
    if (d <= NORM_REG_D) {
        float xv[NORM_REG];
        norm_load<T>(xv, xi, d);
        layer_stats_reg(xv, d, eps, scratch, &mu, &r);
        if (mean && threadIdx.x == 0) {
            mean[blockIdx.x] = mu;
            rstd[blockIdx.x] = r;
        }
        // x again from the cache: holding it across the divisions above spills on sm_90
#pragma unroll
        for (int k = 0; k < NORM_REG; k++) {
            int64_t j = norm_j(k);
            if (j < d) { store_f32<T>(yi, j, w[j] * ((load_f32<T>(xi, j) - mu) * r) + b[j]); }
        }
        return;
    }
    layer_stats<T>(xi, d, eps, scratch, &mu, &r);
    if (mean && threadIdx.x == 0) {
        mean[blockIdx.x] = mu;
        rstd[blockIdx.x] = r;
    }
    for (int64_t j = threadIdx.x; j < d; j += MTRL_BLOCK) {
        store_f32<T>(yi, j, w[j] * ((load_f32<T>(xi, j) - mu) * r) + b[j]);
    }
}

template <typename T>
__device__ void norm_layer_bwd(T* dx, float* stats, const T* x, const float* w, const T* dy, int64_t d, double eps) {
    __shared__ double scratch[MTRL_WARPS];
    int64_t row = blockIdx.x;
    const T *xi = x + row * d, *dyi = dy + row * d;
    T* dxi = dx + row * d;
    float mu, r;
    if (d <= NORM_REG_D) {
        float xv[NORM_REG], gv[NORM_REG];
        norm_load<T>(xv, xi, d);
        norm_load<T>(gv, dyi, d);
        layer_stats_reg(xv, d, eps, scratch, &mu, &r);
        double sg = 0, sgx = 0;
#pragma unroll
        for (int k = 0; k < NORM_REG; k++) {
            int64_t j = norm_j(k);
            if (j < d) {
                gv[k] = gv[k] * w[j];
                sg += (double)gv[k];
                sgx += (double)gv[k] * (double)((xv[k] - mu) * r);
            }
        }
        float mg = (float)(block_sum_f64(sg, scratch) / (double)d);
        float mgx = (float)(block_sum_f64(sgx, scratch) / (double)d);
#pragma unroll
        for (int k = 0; k < NORM_REG; k++) {
            int64_t j = norm_j(k);
            if (j < d) { store_f32<T>(dxi, j, r * (gv[k] - mg - ((xv[k] - mu) * r) * mgx)); }
        }
    } else {
        layer_stats<T>(xi, d, eps, scratch, &mu, &r);
        double sg = 0, sgx = 0;
        for (int64_t j = threadIdx.x; j < d; j += MTRL_BLOCK) {
            float g = load_f32<T>(dyi, j) * w[j];
            sg += (double)g;
            sgx += (double)g * (double)((load_f32<T>(xi, j) - mu) * r);
        }
        float mg = (float)(block_sum_f64(sg, scratch) / (double)d);
        float mgx = (float)(block_sum_f64(sgx, scratch) / (double)d);
        for (int64_t j = threadIdx.x; j < d; j += MTRL_BLOCK) {
            float xh = (load_f32<T>(xi, j) - mu) * r;
            store_f32<T>(dxi, j, r * (load_f32<T>(dyi, j) * w[j] - mg - xh * mgx));
        }
    }
    if (threadIdx.x == 0) {
        stats[2 * row] = mu;
        stats[2 * row + 1] = r;
    }
}

// dw[j] (+)= Σ_i dy·float((x − mean)·rstd), db[j] (+)= Σ_i dy (db may be null), each column's
// sum in ascending rows (nnref.NormWeightGrad). A block owns NW_COLS columns (lane = column) and
// walks the rows NW_ROWS at a time: its 8 warps load NW_ROWS / 8 rows each (issued together,
// before the previous step's sum), multiply and store the terms into shared memory, and warp 0
// adds them to its running sums in row order. The terms are the one-thread-per-column kernel's
// float32 products, the sums the same sequence, so the bits are too; the loads, no longer one
// row at a time, keep NW_ROWS·NW_COLS·2 values of each block in flight.
#define NW_COLS 32
#define NW_ROWS 128
#define NW_PER (NW_ROWS / MTRL_WARPS)

template <typename T>
__device__ void norm_weight_bwd(float* dw, float* db, const float* stats, const T* x, const T* dy, int64_t rows, int64_t d, int acc) {
    __shared__ float tw[NW_ROWS][NW_COLS], tb[NW_ROWS][NW_COLS];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int64_t j = (int64_t)blockIdx.x * NW_COLS + lane;
    bool col = j < d;
    float sw = 0, sb = 0;  // warp 0's
    for (int64_t r0 = 0; r0 < rows; r0 += NW_ROWS) {
        float xv[NW_PER], gv[NW_PER], mv[NW_PER], rv[NW_PER];
#pragma unroll
        for (int k = 0; k < NW_PER; k++) {
            int64_t i = r0 + warp * NW_PER + k;
            bool in = col && i < rows;
            xv[k] = in ? load_f32<T>(x, i * d + j) : 0.f;
            gv[k] = in ? load_f32<T>(dy, i * d + j) : 0.f;
            mv[k] = in ? stats[2 * i] : 0.f;
            rv[k] = in ? stats[2 * i + 1] : 0.f;
        }
        if (warp == 0 && r0 > 0) {
#pragma unroll 16
            for (int i = 0; i < NW_ROWS; i++) {
                sw += tw[i][lane];
                sb += tb[i][lane];
            }
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < NW_PER; k++) {
            tw[warp * NW_PER + k][lane] = gv[k] * ((xv[k] - mv[k]) * rv[k]);
            tb[warp * NW_PER + k][lane] = gv[k];
        }
        __syncthreads();
    }
    if (warp != 0 || !col) return;
    if (rows > 0) {
        int last = (int)(rows - (rows - 1) / NW_ROWS * NW_ROWS);  // rows in the final step
        for (int i = 0; i < last; i++) {
            sw += tw[i][lane];
            sb += tb[i][lane];
        }
    }
    if (acc) {
        sw += dw[j];
        if (db) sb += db[j];
    }
    dw[j] = sw;
    if (db) db[j] = sb;
}

// ---- RoPE: a token per block (grid-stride over tokens); freq and sec (the section of each
// frequency) come from the host, computed as the reference computes them. A thread takes one
// frequency i and rotates that pair in every per-th head, four heads' loads at a time (per =
// the heads a block covers at once, MTRL_BLOCK / (D/2) for D/2 ≤ MTRL_BLOCK), so cos and sin
// are evaluated once per token and frequency, not per head, and the indices need no 64-bit
// division ----

template <typename T>
__device__ void rope_fwd(T* y, const T* x, const int* pos, const float* freq, const int* sec, int64_t t, int64_t h, int64_t d, int inverse) {
    int64_t half = d / 2;
    int per = half < MTRL_BLOCK ? (int)(MTRL_BLOCK / half) : 1;
    int64_t lanes = per * half;  // ≤ MTRL_BLOCK when per > 1, else half
    for (int64_t ti = blockIdx.x; ti < t; ti += gridDim.x) {
        for (int64_t q = threadIdx.x; q < lanes; q += MTRL_BLOCK) {
            int64_t i = q % half;
            float a = (float)pos[(int64_t)sec[i] * t + ti] * freq[i];
            float c = (float)cos((double)a), s = (float)sin((double)a);
            if (inverse) s = -s;
            // four heads' loads issued before their stores
            for (int64_t h0 = q / half; h0 < h; h0 += 4 * per) {
                float x0[4], x1[4];
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    int64_t o = (ti * h + h0 + u * per) * d;
                    bool in = h0 + u * per < h;
                    x0[u] = in ? load_f32<T>(x, o + i) : 0.f;
                    x1[u] = in ? load_f32<T>(x, o + i + half) : 0.f;
                }
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    int64_t o = (ti * h + h0 + u * per) * d;
                    if (h0 + u * per < h) {
                        store_f32<T>(y, o + i, x0[u] * c - x1[u] * s);
                        store_f32<T>(y, o + i + half, x1[u] * c + x0[u] * s);
                    }
                }
            }
        }
    }
}

// ---- Activations, evaluated in float64 as nnref.actFn ----

// act_eval returns f(x) and f'(x) of activation kind (0 SiLU, 1 GELU, 2 GELUTanh, 3 QuickGELU:
// nnref.Act's values).
__device__ __forceinline__ void act_eval(int kind, double x, double* f, double* df) {
    if (kind == 0) {
        double s = 1 / (1 + exp(-x));
        *f = x * s;
        *df = s * (1 + x * (1 - s));
    } else if (kind == 1) {
        double c = 0.5 * (1 + erf(x / 1.4142135623730951));
        *f = x * c;
        *df = c + x * exp(-x * x / 2) / 2.5066282746310002;
    } else if (kind == 2) {
        const double k = 0.7978845608028654;
        double u = k * (x + 0.044715 * x * x * x);
        double th = tanh(u);
        *f = 0.5 * x * (1 + th);
        *df = 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * k * (1 + 3 * 0.044715 * x * x);
    } else {
        double s = 1 / (1 + exp(-1.702 * x));
        *f = x * s;
        *df = s + 1.702 * x * s * (1 - s);
    }
}

template <typename T>
__device__ void act_fwd(T* y, const T* x, int64_t n, int kind) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double f, df;
        act_eval(kind, (double)load_f32<T>(x, i), &f, &df);
        store_f32<T>(y, i, (float)f);
    }
}

template <typename T>
__device__ void act_bwd(T* dx, const T* x, const T* dy, int64_t n, int kind) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double f, df;
        act_eval(kind, (double)load_f32<T>(x, i), &f, &df);
        store_f32<T>(dx, i, load_f32<T>(dy, i) * (float)df);
    }
}

template <typename T>
__device__ void act_swiglu_fwd(T* y, const T* gate, const T* up, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double f, df;
        act_eval(0, (double)load_f32<T>(gate, i), &f, &df);
        store_f32<T>(y, i, (float)f * load_f32<T>(up, i));
    }
}

template <typename T>
__device__ void act_swiglu_bwd(T* dgate, T* dup, const T* gate, const T* up, const T* dy, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double f, df;
        act_eval(0, (double)load_f32<T>(gate, i), &f, &df);
        float g = load_f32<T>(dy, i), u = load_f32<T>(up, i);
        store_f32<T>(dgate, i, (g * u) * (float)df);
        store_f32<T>(dup, i, g * (float)f);
    }
}

// ---- Embedding (ids validated on the host) ----

// gather_elem copies one element: as it is when the row and table types agree, else a float32
// table's value rounded into a bfloat16 row.
__device__ __forceinline__ void gather_elem(float* y, int64_t q, const float* t, int64_t i) { y[q] = t[i]; }
__device__ __forceinline__ void gather_elem(bf16_t* y, int64_t q, const bf16_t* t, int64_t i) { y[q] = t[i]; }
__device__ __forceinline__ void gather_elem(bf16_t* y, int64_t q, const float* t, int64_t i) { y[q] = f32_to_bf16(t[i]); }

template <typename T, typename W>
__device__ void embedding_gather(T* y, const W* table, const int* ids, int64_t n, int64_t d) {
    int64_t total = n * d;
    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < total; q += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = q / d, j = q % d;
        gather_elem(y, q, table, (int64_t)ids[i] * d + j);
    }
}

// dtable[ids[i], j] += dy[i, j] in ascending i: one thread per column j, so repeated ids add
// in a fixed order without atomics (dtable was zeroed by the host unless accumulating).
template <typename T>
__device__ void embedding_scatter(float* dtable, const int* ids, const T* dy, int64_t n, int64_t d) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d) return;
    for (int64_t i = 0; i < n; i++) {
        float* p = dtable + (int64_t)ids[i] * d + j;
        *p = *p + load_f32<T>(dy, i * d + j);
    }
}

extern "C" {

// The kernels: <family>_<op>_<fwd|bwd>_<activations' dtype>; embedding_gather_fwd_bf16_f32
// gathers a float32 table into bfloat16 rows.

__global__ void __launch_bounds__(MTRL_BLOCK) norm_rms_fwd_f32(float* y, float* rstd, const float* x, const float* w, int64_t d, double eps) {
    norm_rms_fwd<float>(y, rstd, x, w, d, eps);
}
__global__ void __launch_bounds__(MTRL_BLOCK) norm_layer_fwd_f32(float* y, float* mean, float* rstd, const float* x, const float* w, const float* b, int64_t d, double eps) {
    norm_layer_fwd<float>(y, mean, rstd, x, w, b, d, eps);
}
__global__ void __launch_bounds__(MTRL_BLOCK) norm_rms_bwd_f32(float* dx, float* stats, const float* x, const float* w, const float* dy, int64_t d, double eps) {
    norm_rms_bwd<float>(dx, stats, x, w, dy, d, eps);
}
__global__ void __launch_bounds__(MTRL_BLOCK) norm_layer_bwd_f32(float* dx, float* stats, const float* x, const float* w, const float* dy, int64_t d, double eps) {
    norm_layer_bwd<float>(dx, stats, x, w, dy, d, eps);
}
__global__ void __launch_bounds__(MTRL_BLOCK) norm_rms_fwd_bf16(bf16_t* y, float* rstd, const bf16_t* x, const float* w, int64_t d, double eps) {
    norm_rms_fwd<bf16_t>(y, rstd, x, w, d, eps);
}
__global__ void __launch_bounds__(MTRL_BLOCK) norm_layer_fwd_bf16(bf16_t* y, float* mean, float* rstd, const bf16_t* x, const float* w, const float* b, int64_t d, double eps) {
    norm_layer_fwd<bf16_t>(y, mean, rstd, x, w, b, d, eps);
}
__global__ void __launch_bounds__(MTRL_BLOCK) norm_rms_bwd_bf16(bf16_t* dx, float* stats, const bf16_t* x, const float* w, const bf16_t* dy, int64_t d, double eps) {
    norm_rms_bwd<bf16_t>(dx, stats, x, w, dy, d, eps);
}
__global__ void __launch_bounds__(MTRL_BLOCK) norm_layer_bwd_bf16(bf16_t* dx, float* stats, const bf16_t* x, const float* w, const bf16_t* dy, int64_t d, double eps) {
    norm_layer_bwd<bf16_t>(dx, stats, x, w, dy, d, eps);
}
__global__ void __launch_bounds__(MTRL_BLOCK) norm_weight_bwd_f32(float* dw, float* db, const float* stats, const float* x, const float* dy, int64_t rows, int64_t d, int acc) {
    norm_weight_bwd<float>(dw, db, stats, x, dy, rows, d, acc);
}
__global__ void __launch_bounds__(MTRL_BLOCK) norm_weight_bwd_bf16(float* dw, float* db, const float* stats, const bf16_t* x, const bf16_t* dy, int64_t rows, int64_t d, int acc) {
    norm_weight_bwd<bf16_t>(dw, db, stats, x, dy, rows, d, acc);
}
__global__ void __launch_bounds__(MTRL_BLOCK) rope_fwd_f32(float* y, const float* x, const int* pos, const float* freq, const int* sec, int64_t t, int64_t h, int64_t d, int inverse) {
    rope_fwd<float>(y, x, pos, freq, sec, t, h, d, inverse);
}
__global__ void __launch_bounds__(MTRL_BLOCK) rope_fwd_bf16(bf16_t* y, const bf16_t* x, const int* pos, const float* freq, const int* sec, int64_t t, int64_t h, int64_t d, int inverse) {
    rope_fwd<bf16_t>(y, x, pos, freq, sec, t, h, d, inverse);
}
__global__ void __launch_bounds__(MTRL_BLOCK) act_fwd_f32(float* y, const float* x, int64_t n, int kind) { act_fwd<float>(y, x, n, kind); }
__global__ void __launch_bounds__(MTRL_BLOCK) act_bwd_f32(float* dx, const float* x, const float* dy, int64_t n, int kind) { act_bwd<float>(dx, x, dy, n, kind); }
__global__ void __launch_bounds__(MTRL_BLOCK) act_swiglu_fwd_f32(float* y, const float* gate, const float* up, int64_t n) { act_swiglu_fwd<float>(y, gate, up, n); }
__global__ void __launch_bounds__(MTRL_BLOCK) act_swiglu_bwd_f32(float* dgate, float* dup, const float* gate, const float* up, const float* dy, int64_t n) {
    act_swiglu_bwd<float>(dgate, dup, gate, up, dy, n);
}
__global__ void __launch_bounds__(MTRL_BLOCK) act_fwd_bf16(bf16_t* y, const bf16_t* x, int64_t n, int kind) { act_fwd<bf16_t>(y, x, n, kind); }
__global__ void __launch_bounds__(MTRL_BLOCK) act_bwd_bf16(bf16_t* dx, const bf16_t* x, const bf16_t* dy, int64_t n, int kind) { act_bwd<bf16_t>(dx, x, dy, n, kind); }
__global__ void __launch_bounds__(MTRL_BLOCK) act_swiglu_fwd_bf16(bf16_t* y, const bf16_t* gate, const bf16_t* up, int64_t n) { act_swiglu_fwd<bf16_t>(y, gate, up, n); }
__global__ void __launch_bounds__(MTRL_BLOCK) act_swiglu_bwd_bf16(bf16_t* dgate, bf16_t* dup, const bf16_t* gate, const bf16_t* up, const bf16_t* dy, int64_t n) {
    act_swiglu_bwd<bf16_t>(dgate, dup, gate, up, dy, n);
}

// y = alpha*x + beta*y (tensor.Axpby): beta 0 does not read y, alpha 0 does not read x.
__global__ void __launch_bounds__(MTRL_BLOCK) act_axpby_fwd_f32(float* y, const float* x, int64_t n, float alpha, float beta) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = alpha == 0.0f ? 0.0f : alpha * x[i];
        y[i] = beta == 0.0f ? v : v + beta * y[i];
    }
}

__global__ void __launch_bounds__(MTRL_BLOCK) act_mul_fwd_f32(float* y, const float* a, const float* b, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        y[i] = a[i] * b[i];
    }
}

__global__ void __launch_bounds__(MTRL_BLOCK) embedding_gather_fwd_f32(float* y, const float* table, const int* ids, int64_t n, int64_t d) {
    embedding_gather<float, float>(y, table, ids, n, d);
}
__global__ void __launch_bounds__(MTRL_BLOCK) embedding_gather_fwd_bf16(bf16_t* y, const bf16_t* table, const int* ids, int64_t n, int64_t d) {
    embedding_gather<bf16_t, bf16_t>(y, table, ids, n, d);
}
__global__ void __launch_bounds__(MTRL_BLOCK) embedding_gather_fwd_bf16_f32(bf16_t* y, const float* table, const int* ids, int64_t n, int64_t d) {
    embedding_gather<bf16_t, float>(y, table, ids, n, d);
}
__global__ void __launch_bounds__(MTRL_BLOCK) embedding_scatter_bwd_f32(float* dtable, const int* ids, const float* dy, int64_t n, int64_t d) {
    embedding_scatter<float>(dtable, ids, dy, n, d);
}
__global__ void __launch_bounds__(MTRL_BLOCK) embedding_scatter_bwd_bf16(float* dtable, const int* ids, const bf16_t* dy, int64_t n, int64_t d) {
    embedding_scatter<bf16_t>(dtable, ids, dy, n, d);
}

// ---- AdamW (scalars from the host, as nnref.AdamW rounds them) and the gradient norm ----

__global__ void __launch_bounds__(MTRL_BLOCK) optim_adamw_fwd_f32(float* param, bf16_t* param16, float* m, float* v, const float* grad, int64_t n,
                                                                 float decay, float w1, float b2, float w2, float bc2, float step_size, float eps) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float g = grad[i];
        float p = param[i] * decay;
        float mi = m[i] + w1 * (g - m[i]);
        float vi = v[i] * b2 + (w2 * g) * g;
        float denom = sqrtf(vi) / bc2 + eps;
        p = p + (step_size * mi) / denom;
        param[i] = p;
        m[i] = mi;
        v[i] = vi;
        if (param16) param16[i] = f32_to_bf16(p);
    }
}

// partial[b] = Σ x² (float64) over chunk b.
__global__ void __launch_bounds__(MTRL_BLOCK) optim_sumsq_fwd_f32(double* partial, const float* x, int64_t n, int64_t chunk) {
    __shared__ double scratch[MTRL_WARPS];
    int64_t lo = (int64_t)blockIdx.x * chunk;
    int64_t hi = lo + chunk < n ? lo + chunk : n;
    double s = 0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += MTRL_BLOCK) s += (double)x[i] * (double)x[i];
    s = block_sum_f64(s, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void __launch_bounds__(MTRL_BLOCK) optim_scale_fwd_f32(float* x, int64_t n, float c) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        x[i] = x[i] * c;
    }
}

}  // extern "C"
