// KV-cached decoding (generate.go's extend on the device): new tokens, each given as (row, sequence
// position) in meta [n, 2] int32, packed [n, ·]. Their keys and values go into the layer's cache
// kc, vc [B, stride, D] first (vlm_kv_store), then each new token attends its row's cached keys
// 0..keyLimit(pos) (vlm_kv_attention: one thread per (token, head), the reference's loops: float32
// dot products, max, expf, float32 sum in key order, the output summed in key order; the scores
// are recomputed in each pass instead of kept, which gives the same values). vlm_embed_at writes
// the input rows of decode steps: token embedding plus the text position's embedding.
#include "vlm.cuh"

extern "C" __global__ void vlm_kv_store_f32(float* kc, float* vc, const float* qkv, const int* meta, int64_t n, int64_t stride, int64_t d) {
    VLM_FOR(idx, n * d) {
        int64_t i = idx / d, e = idx % d;
        int64_t slot = ((int64_t)meta[2 * i] * stride + meta[2 * i + 1]) * d + e;
        kc[slot] = qkv[i * 3 * d + d + e];
        vc[slot] = qkv[i * 3 * d + 2 * d + e];
    }
}

extern "C" __global__ void vlm_kv_attention_f32(float* ao, const float* qkv, const float* kc, const float* vc, const int* meta, int64_t n,
                                                int64_t stride, int64_t d, int64_t heads, int64_t np, float scale) {
    int64_t dh = d / heads;
    VLM_FOR(idx, n * heads) {
        int64_t i = idx / heads, hd = idx % heads;
        int64_t row = meta[2 * i], lim = vlm_key_limit(meta[2 * i + 1], np);
        const float* q = qkv + i * 3 * d + hd * dh;
        const float* kbase = kc + row * stride * d + hd * dh;
        const float* vbase = vc + row * stride * d + hd * dh;
        float mx = -INFINITY;
        for (int64_t t = 0; t < lim; t++) {
            const float* k = kbase + t * d;
            float dot = 0.f;
            for (int64_t e = 0; e < dh; e++) dot += q[e] * k[e];
            mx = fmaxf(mx, dot * scale);
        }
        float sum = 0.f;
        for (int64_t t = 0; t < lim; t++) {
            const float* k = kbase + t * d;
            float dot = 0.f;
            for (int64_t e = 0; e < dh; e++) dot += q[e] * k[e];
            sum += expf(dot * scale - mx);
        }
        float inv = 1.f / sum;
        float* o = ao + i * d + hd * dh;
        for (int64_t e = 0; e < dh; e++) o[e] = 0.f;
        for (int64_t t = 0; t < lim; t++) {
            const float* k = kbase + t * d;
            float dot = 0.f;
            for (int64_t e = 0; e < dh; e++) dot += q[e] * k[e];
            float pt = expf(dot * scale - mx) * inv;
            const float* v = vbase + t * d;
            for (int64_t e = 0; e < dh; e++) o[e] += pt * v[e];
        }
    }
}

// x [n, D]: row i = emb[tokens[i]] + pos[tpos[i]] (ids trusted: they were sampled or validated).
extern "C" __global__ void vlm_embed_at_f32(float* x, const int* tokens, const int* tpos, const float* emb, const float* pos, int64_t n, int64_t d) {
    VLM_FOR(idx, n * d) {
        int64_t i = idx / d, e = idx % d;
        x[idx] = emb[(int64_t)tokens[i] * d + e] + pos[(int64_t)tpos[i] * d + e];
    }
}
