// LayerNorm (ε = 1e-5) forward and backward: h = xhat·g + b with xhat = (x - mean)·rstd.
// One thread per row runs the reference's loops in its order (float32 sums, rstd through a
// float64 square root), and one thread per column sums the parameter gradients over the rows
// in order, so the results are the pure-Go kernel's bits.
#include "vlm.cuh"

extern "C" __global__ void vlm_layernorm_fwd_f32(float* h, float* xhat, float* rstd, const float* x, const float* g, const float* b, int64_t n, int64_t d) {
    VLM_FOR(i, n) {
        const float* xr = x + i * d;
        float mean = 0.f;
        for (int64_t k = 0; k < d; k++) mean += xr[k];
        mean /= (float)d;
        float vr = 0.f;
        for (int64_t k = 0; k < d; k++) vr += (xr[k] - mean) * (xr[k] - mean);
        float rs = (float)(1.0 / sqrt((double)(vr / (float)d + 1e-5f)));
        for (int64_t k = 0; k < d; k++) {
            float xh = (xr[k] - mean) * rs;
            xhat[i * d + k] = xh;
            h[i * d + k] = xh * g[k] + b[k];
        }
        rstd[i] = rs;
    }
}

// dx += rstd·(dh·g - mean(dh·g) - xhat·mean(dh·g·xhat)), one thread per row.
extern "C" __global__ void vlm_layernorm_bwd_dx_f32(float* dx, const float* dh, const float* xhat, const float* rstd, const float* g, int64_t n, int64_t d) {
    VLM_FOR(i, n) {
        const float* dr = dh + i * d;
        const float* xr = xhat + i * d;
        float m1 = 0.f, m2 = 0.f;
        for (int64_t k = 0; k < d; k++) {
            float gx = dr[k] * g[k];
            m1 += gx;
            m2 += gx * xr[k];
        }
        m1 /= (float)d;
        m2 /= (float)d;
        float rs = rstd[i];
        for (int64_t k = 0; k < d; k++) dx[i * d + k] += rs * (dr[k] * g[k] - m1 - xr[k] * m2);
    }
}

// dg += Σ_rows dh·xhat, db += Σ_rows dh: one thread per column, rows in order.
extern "C" __global__ void vlm_layernorm_bwd_dgb_f32(float* dg, float* db, const float* dh, const float* xhat, int64_t n, int64_t d) {
    VLM_FOR(k, d) {
        float sg = dg[k], sb = db[k];
        for (int64_t i = 0; i < n; i++) {
            sg += dh[i * d + k] * xhat[i * d + k];
            sb += dh[i * d + k];
        }
        dg[k] = sg;
        db[k] = sb;
    }
}
