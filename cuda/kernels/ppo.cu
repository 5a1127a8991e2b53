// PPO losses (ppo.PolicyLoss, ppo.ValueLoss, ppo.AverageLoss): one block per row reduces the
// row's float64 partial sums in a fixed order and writes the row's gradient; the host combines
// the rows in order (ppo's aggFinish) and computes the aggregation weights w[i] from the per-row
// mask sums (ppo's aggWeights), exactly as the pure-Go kernels do. Per-token arithmetic is
// float32 in the Go kernels' order (-fmad=false), with hostops' exp ported (hostexp.cuh).
#include "common.cuh"
#include "hostexp.cuh"

#define PPO_EPS 1e-8f

// Loss types (ppo.LossType).
#define PPO_DEFAULT 0
#define PPO_GSPO 1
#define PPO_GSPO_TOKEN 2
#define PPO_CISPO 3
#define PPO_SAPO 4

struct PolicyConsts {
    int typ;
    float clo, chi, eLo, eHi, rMin, rMax, dual, tauP, tauN, fourP, fourN;
};

// ppo's policyConsts.ratios. Out of line: inlined into ppo_policy_fwd_f32, nvcc 11.8 (cicc)
// emits different PTX from run to run, which the drift test would flag.
__device__ __noinline__ void ppo_ratios(const PolicyConsts& k, float x, float& r, float& dr, float& c, float& dc) {
    r = dr = c = dc = 0.f;
    if (x < -20.f) {
        r = k.rMin;
    } else if (x > 20.f) {
        r = k.rMax;
    } else {
        r = mtrl_exp_ratio(x);
        dr = r;
    }
    if (x < k.clo) {
        c = k.eLo;
    } else if (x > k.chi) {
        c = k.eHi;
    } else if (x == x && x >= -20.f && x <= 20.f) {
        c = r;
        dc = r;
    } else {
        c = mtrl_exp32(clampf(x, k.clo, k.chi));
        if (x == x) dc = c;
    }
}

// ppo's policyConsts.token: the per-token loss T, dT/dlir and the clip indicators.
__device__ __forceinline__ void ppo_token(const PolicyConsts& k, float x, float lp, float a, float& t, float& d, bool& clipHi, bool& clipLo) {
    float r, dr, c, dc;
    ppo_ratios(k, x, r, dr, c, dc);
    float na = -a;
    clipHi = clipLo = false;
    if (k.typ == PPO_CISPO) {
        t = na * lp * c;
        d = na * c;
        return;
    }
    if (k.typ == PPO_SAPO) {
        float tau = k.tauP, four = k.fourP;
        if (a < 0.f) {
            tau = k.tauN;
            four = k.fourN;
        }
        float sg = 1.f / (1.f + mtrl_exp32(-(tau * (r - 1.f))));
        t = na * (four * sg);
        d = na * 4.f * sg * (1.f - sg) * dr;
        return;
    }
    float p1 = na * r, p2 = na * c;
    float d1 = na * dr, d2 = na * dc;
    float hi, dhi;
    if (p1 > p2) {
        hi = p1; dhi = d1;
    } else if (p2 > p1) {
        hi = p2; dhi = d2;
    } else if (p1 == p2) {
        hi = p1; dhi = (d1 + d2) / 2.f;
    } else {
        hi = p1 + p2; dhi = d1 + d2;
    }
    clipHi = p1 < p2;
    if (!(a < 0.f)) {
        t = hi; d = dhi;
        return;
    }
    float p3 = na * k.dual;
    clipLo = hi > p3;
    if (hi < p3) {
        t = hi; d = dhi;
    } else if (hi > p3) {
        t = p3; d = 0.f;
    } else {
        t = hi; d = dhi / 2.f;
    }
}

extern "C" {

// Per-row sums: out[2i] = sum float(v*m), out[2i+1] = sum m over m != 0 (v may be null: counts
// only, out[2i] = 0). One block per row.
__global__ void __launch_bounds__(MTRL_BLOCK) ppo_rowsums_fwd_f32(double* out, const float* v, const float* m, int64_t cols) {
    __shared__ double scratch[MTRL_WARPS];
    int64_t base = (int64_t)blockIdx.x * cols;
    double s = 0, c = 0;
    for (int64_t t = threadIdx.x; t < cols; t += MTRL_BLOCK) {
        float w = m[base + t];
        if (w != 0.f) {
            if (v) s += (double)(v[base + t] * w);
            c += (double)w;
        }
    }
    s = block_sum_f64(s, scratch);
    c = block_sum_f64(c, scratch);
    if (threadIdx.x == 0) {
        out[2 * (int64_t)blockIdx.x] = s;
        out[2 * (int64_t)blockIdx.x + 1] = c;
    }
}

// AverageLoss gradient: grad[i,t] = w[i] * m[i,t].
__global__ void __launch_bounds__(MTRL_BLOCK) ppo_average_bwd_f32(float* grad, const float* w, const float* m, int64_t n, int64_t cols) {
    for (int64_t i = (int64_t)blockIdx.x * MTRL_BLOCK + threadIdx.x; i < n; i += (int64_t)gridDim.x * MTRL_BLOCK) {
        grad[i] = w[i / cols] * m[i];
    }
}

// PolicyLoss, one block per row: stats[5i..5i+4] = sumT, sumNegLP, sumNegKL, clipHi, clipLo;
// grad (may be null) gets scale * w[i] * m * ltm * dT/dlp (added with acc). ltm may be null.
__global__ void __launch_bounds__(MTRL_BLOCK) ppo_policy_fwd_f32(
    double* stats, float* grad, const float* old, const float* lp, const float* adv, const float* m,
    const float* ltm, const float* w, int64_t cols, int64_t typ, int64_t acc, float scale,
    float clo, float chi, float eLo, float eHi, float rMin, float rMax, float dual,
    float tauP, float tauN, float fourP, float fourN) {
    __shared__ double scratch[MTRL_WARPS];
    PolicyConsts k;
    k.typ = (int)typ;
    k.clo = clo; k.chi = chi; k.eLo = eLo; k.eHi = eHi; k.rMin = rMin; k.rMax = rMax;
    k.dual = dual; k.tauP = tauP; k.tauN = tauN; k.fourP = fourP; k.fourN = fourN;
    int64_t row = blockIdx.x;
    int64_t base = row * cols;
    const bool gspo = k.typ == PPO_GSPO || k.typ == PPO_GSPO_TOKEN;
    float seq = 0.f;
    double rowCnt = 0;
    if (gspo) {
        double s = 0, c = 0;
        for (int64_t t = threadIdx.x; t < cols; t += MTRL_BLOCK) {
            float mw = m[base + t];
            if (mw != 0.f) {
                s += (double)((lp[base + t] - old[base + t]) * mw);
                c += (double)mw;
            }
        }
        s = block_sum_f64(s, scratch);
        c = block_sum_f64(c, scratch);
        seq = (float)s / ((float)c + PPO_EPS);
        rowCnt = c;
    }
    float gw = scale * (grad ? w[row] : 0.f);
    double sT = 0, sLP = 0, sKL = 0, cHi = 0, cLo = 0, dseq = 0;
    for (int64_t t = threadIdx.x; t < cols; t += MTRL_BLOCK) {
        int64_t i = base + t;
        float mw = m[i];
        if (mw == 0.f) {
            if (grad && !acc) grad[i] = 0.f;
            continue;
        }
        float l = lp[i];
        float nkl = l - old[i];
        float x = nkl;
        if (k.typ == PPO_GSPO_TOKEN) {
            x = (seq + l) - l;
        } else if (k.typ == PPO_GSPO) {
            x = seq * mw;
        }
        float T, d;
        bool ch, cl;
        ppo_token(k, x, l, adv[i], T, d, ch, cl);
        float lw = 1.f;
        if (ltm) {
            lw = ltm[i];
            T *= lw;
        }
        sT += (double)(T * mw);
        sLP += (double)(-l * mw);
        sKL += (double)(-nkl * mw);
        if (ch) cHi += (double)mw;
        if (cl) cLo += (double)mw;
        if (!grad) continue;
        float g = gw * mw * lw * d;
        if (k.typ == PPO_GSPO) {
            dseq += (double)(g * mw);
            continue;
        }
        if (acc) {
            grad[i] += g;
        } else {
            grad[i] = g;
        }
    }
    sT = block_sum_f64(sT, scratch);
    sLP = block_sum_f64(sLP, scratch);
    sKL = block_sum_f64(sKL, scratch);
    cHi = block_sum_f64(cHi, scratch);
    cLo = block_sum_f64(cLo, scratch);
    if (threadIdx.x == 0) {
        double* st = stats + 5 * row;
        st[0] = sT; st[1] = sLP; st[2] = sKL; st[3] = cHi; st[4] = cLo;
    }
    if (grad && k.typ == PPO_GSPO) {
        dseq = block_sum_f64(dseq, scratch);
        float f = (float)dseq / ((float)rowCnt + PPO_EPS);
        for (int64_t t = threadIdx.x; t < cols; t += MTRL_BLOCK) {
            int64_t i = base + t;
            float mw = m[i];
            if (mw == 0.f) continue;
            if (acc) {
                grad[i] += f * mw;
            } else {
                grad[i] = f * mw;
            }
        }
    }
}

// ValueLoss, one block per row: stats[3i..3i+2] = sumL, sumV, clip; grad (may be null) gets
// scale * 0.5 * w[i] * m * dL/dvpred (added with acc).
__global__ void __launch_bounds__(MTRL_BLOCK) ppo_value_fwd_f32(
    double* stats, float* grad, const float* vp, const float* ret, const float* val, const float* m,
    const float* w, int64_t cols, int64_t acc, float scale, float c) {
    __shared__ double scratch[MTRL_WARPS];
    int64_t row = blockIdx.x;
    int64_t base = row * cols;
    float gw = grad ? scale * 0.5f * w[row] : 0.f;
    double sL = 0, sV = 0, sC = 0;
    for (int64_t t = threadIdx.x; t < cols; t += MTRL_BLOCK) {
        int64_t i = base + t;
        float mw = m[i];
        if (mw == 0.f) {
            if (grad && !acc) grad[i] = 0.f;
            continue;
        }
        float v = vp[i], r = ret[i], o = val[i];
        float lo = o - c, hi = o + c;
        float vc = clampf(v, lo, hi);
        bool pass = !(v < lo) && !(v > hi) && v == v;  // ppo's clampGrad
        float d1 = v - r, d2 = vc - r;
        float l1 = d1 * d1, l2 = d2 * d2;
        float g1 = 2.f * d1, g2 = 0.f;
        if (pass) g2 = 2.f * d2;
        float L, dL;
        if (l1 > l2) {
            L = l1; dL = g1;
        } else if (l2 > l1) {
            L = l2; dL = g2;
        } else if (l1 == l2) {
            L = l1; dL = (g1 + g2) / 2.f;
        } else {
            L = l1 + l2; dL = g1 + g2;
        }
        sL += (double)(L * mw);
        sV += (double)(v * mw);
        if (l1 < l2) sC += (double)mw;
        if (!grad) continue;
        float g = gw * mw * dL;
        if (acc) {
            grad[i] += g;
        } else {
            grad[i] = g;
        }
    }
    sL = block_sum_f64(sL, scratch);
    sV = block_sum_f64(sV, scratch);
    sC = block_sum_f64(sC, scratch);
    if (threadIdx.x == 0) {
        double* st = stats + 3 * row;
        st[0] = sL; st[1] = sV; st[2] = sC;
    }
}

// Gradient bookkeeping of KLLoss and EntropyPenalty (ppo.GradKernel), one float32 operation per
// element as the host: x *= f; dst += src; grad = (m != 0 ? f * m : 0), added with acc.
__global__ void __launch_bounds__(MTRL_BLOCK) ppo_scale_fwd_f32(float* x, int64_t n, float f) {
    for (int64_t i = (int64_t)blockIdx.x * MTRL_BLOCK + threadIdx.x; i < n; i += (int64_t)gridDim.x * MTRL_BLOCK) {
        x[i] = x[i] * f;
    }
}

__global__ void __launch_bounds__(MTRL_BLOCK) ppo_add_fwd_f32(float* dst, const float* src, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * MTRL_BLOCK + threadIdx.x; i < n; i += (int64_t)gridDim.x * MTRL_BLOCK) {
        dst[i] = dst[i] + src[i];
    }
}

__global__ void __launch_bounds__(MTRL_BLOCK) ppo_mask_grad_fwd_f32(float* grad, const float* m, int64_t n, float f, int64_t acc) {
    for (int64_t i = (int64_t)blockIdx.x * MTRL_BLOCK + threadIdx.x; i < n; i += (int64_t)gridDim.x * MTRL_BLOCK) {
        float w = m[i];
        float x = w != 0.f ? f * w : 0.f;
        grad[i] = acc ? grad[i] + x : x;
    }
}

}  // extern "C"
