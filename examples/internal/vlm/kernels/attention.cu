// Multi-head attention under the model's mask (image tokens see the image, text token i sees
// the image and text up to i), forward and backward, on qkv [B·S, 3D] (query, key, value
// columns, each split into heads of D/H).
//
// Forward: one thread per (row, head, query) runs the reference's loops: scores, max, expf,
// float32 sum in key order, probabilities p [B, H, S, S] (zero where masked), output ao [B·S, D].
// Backward: one thread per query writes dq and dot_i = Σ_j p_ij·(do_i·v_j); then one thread per
// key sums dv_j and dk_j over the queries in order. Each sum is the reference's, in its order,
// so given the same p the backward is the reference's bits.
#include "vlm.cuh"

extern "C" __global__ void vlm_attention_fwd_f32(float* ao, float* p, const float* qkv, int64_t b, int64_t s, int64_t d, int64_t heads, int64_t np, float scale) {
    int64_t dh = d / heads;
    VLM_FOR(idx, b * heads * s) {
        int64_t i = idx % s, hd = (idx / s) % heads, r = idx / (s * heads);
        int64_t lim = vlm_key_limit(i, np);
        if (lim > s) lim = s;
        const float* q = qkv + (r * s + i) * 3 * d + hd * dh;
        float* pr = p + idx * s;
        float mx = -INFINITY;
        for (int64_t j = 0; j < lim; j++) {
            const float* kk = qkv + (r * s + j) * 3 * d + d + hd * dh;
            float dot = 0.f;
            for (int64_t t = 0; t < dh; t++) dot += q[t] * kk[t];
            pr[j] = dot * scale;
            mx = fmaxf(mx, pr[j]);
        }
        float sum = 0.f;
        for (int64_t j = 0; j < lim; j++) {
            pr[j] = expf(pr[j] - mx);
            sum += pr[j];
        }
        float inv = 1.f / sum;
        float* o = ao + (r * s + i) * d + hd * dh;
        for (int64_t t = 0; t < dh; t++) o[t] = 0.f;
        for (int64_t j = 0; j < lim; j++) {
            float pj = pr[j] * inv;
            pr[j] = pj;
            const float* v = qkv + (r * s + j) * 3 * d + 2 * d + hd * dh;
            for (int64_t t = 0; t < dh; t++) o[t] += pj * v[t];
        }
        for (int64_t j = lim; j < s; j++) pr[j] = 0.f;
    }
}

// dq (overwritten) and dot [B, H, S].
extern "C" __global__ void vlm_attention_bwd_q_f32(float* dqkv, float* dot, const float* qkv, const float* p, const float* dao, int64_t b, int64_t s, int64_t d, int64_t heads, int64_t np, float scale) {
    int64_t dh = d / heads;
    VLM_FOR(idx, b * heads * s) {
        int64_t i = idx % s, hd = (idx / s) % heads, r = idx / (s * heads);
        int64_t lim = vlm_key_limit(i, np);
        if (lim > s) lim = s;
        const float* pr = p + idx * s;
        const float* dout = dao + (r * s + i) * d + hd * dh;
        float dt = 0.f;
        for (int64_t j = 0; j < lim; j++) {
            const float* v = qkv + (r * s + j) * 3 * d + 2 * d + hd * dh;
            float g = 0.f;
            for (int64_t t = 0; t < dh; t++) g += dout[t] * v[t];
            dt += pr[j] * g;
        }
        dot[idx] = dt;
        float* dq = dqkv + (r * s + i) * 3 * d + hd * dh;
        for (int64_t t = 0; t < dh; t++) dq[t] = 0.f;
        for (int64_t j = 0; j < lim; j++) {
            const float* v = qkv + (r * s + j) * 3 * d + 2 * d + hd * dh;
            float g = 0.f;
            for (int64_t t = 0; t < dh; t++) g += dout[t] * v[t];
            float ds = pr[j] * (g - dt) * scale;
            if (ds == 0.f) continue;
            const float* kk = qkv + (r * s + j) * 3 * d + d + hd * dh;
            for (int64_t t = 0; t < dh; t++) dq[t] += ds * kk[t];
        }
    }
}

// dk and dv (overwritten), from dot of vlm_attention_bwd_q_f32.
extern "C" __global__ void vlm_attention_bwd_kv_f32(float* dqkv, const float* dot, const float* qkv, const float* p, const float* dao, int64_t b, int64_t s, int64_t d, int64_t heads, int64_t np, float scale) {
    int64_t dh = d / heads;
    VLM_FOR(idx, b * heads * s) {
        int64_t j = idx % s, hd = (idx / s) % heads, r = idx / (s * heads);
        float* dk = dqkv + (r * s + j) * 3 * d + d + hd * dh;
        float* dv = dqkv + (r * s + j) * 3 * d + 2 * d + hd * dh;
        const float* v = qkv + (r * s + j) * 3 * d + 2 * d + hd * dh;
        for (int64_t t = 0; t < dh; t++) dk[t] = dv[t] = 0.f;
        for (int64_t i = j < np ? 0 : j; i < s; i++) { // the queries that see key j
            float pij = p[((r * heads + hd) * s + i) * s + j];
            const float* dout = dao + (r * s + i) * d + hd * dh;
            float g = 0.f;
            for (int64_t t = 0; t < dh; t++) {
                g += dout[t] * v[t];
                dv[t] += pij * dout[t];
            }
            float ds = pij * (g - dot[(r * heads + hd) * s + i]) * scale;
            if (ds == 0.f) continue;
            const float* q = qkv + (r * s + i) * 3 * d + hd * dh;
            for (int64_t t = 0; t < dh; t++) dk[t] += ds * q[t];
        }
    }
}

// Response attention of one block (the MDI reward's statistics): one thread per row runs the
// reference's loops (attentionMass) in float64 — per response query t = plen−1+j, the masses
// on image keys and on text keys 0..t summed over heads then keys, divided by H and by the
// number of keys — and adds them to acc [b, 2+2·groups] in query order: text, vision, then the
// block's group's pair. Only additions and divisions of doubles (IEEE, never contracted):
// the host's bits.
extern "C" __global__ void vlm_attention_mass_f32(double* acc, const float* p, const int* span, int64_t b, int64_t s, int64_t heads, int64_t np, int64_t group, int64_t groups) {
    int64_t w = 2 + 2 * groups;
    VLM_FOR(r, b) {
        int64_t plen = span[2 * r], n = span[2 * r + 1];
        double* a = acc + r * w;
        for (int64_t j = 0; j < n; j++) {
            int64_t q = np + plen - 1 + j;
            double im = 0.0, tx = 0.0;
            for (int64_t h = 0; h < heads; h++) {
                const float* pr = p + ((r * heads + h) * s + q) * s;
                for (int64_t k = 0; k < np; k++) im += (double)pr[k];
                for (int64_t k = np; k <= q; k++) tx += (double)pr[k];
            }
            im = im / (double)heads;
            tx = tx / (double)heads;
            double pt = tx / (double)(plen + j), pv = im / (double)np;
            a[0] = a[0] + pt;
            a[1] = a[1] + pv;
            a[2 + 2 * group] = a[2 + 2 * group] + pt;
            a[3 + 2 * group] = a[3 + 2 * group] + pv;
        }
    }
}
