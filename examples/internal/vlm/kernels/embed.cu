// Patch and token embeddings, forward and backward. The patch projection itself is a GEMM
// (gemm.cu); here the sums with bias and position embeddings, and the gradients of the
// position and token tables, which the reference accumulates row after row: one thread per
// table column here, the rows in the same order, so the results are its bits.
#include "vlm.cuh"

// x[(r·s+i)·d+k] = e[(r·np+i)·d+k] + patchB[k] + patchPos[i·d+k] for the np image tokens.
extern "C" __global__ void vlm_patch_embed_fwd_f32(float* x, const float* e, const float* pb, const float* pos, int64_t b, int64_t s, int64_t np, int64_t d) {
    VLM_FOR(idx, b * np * d) {
        int64_t k = idx % d, i = (idx / d) % np, r = idx / (d * np);
        x[(r * s + i) * d + k] = e[idx] + pb[k] + pos[i * d + k];
    }
}

// The text tokens [B, L]: x[(r·s+np+t)·d+k] = tokEmb[id·d+k] + tokPos[t·d+k].
extern "C" __global__ void vlm_token_embed_fwd_f32(float* x, const int* tokens, const float* emb, const float* pos, int64_t b, int64_t l, int64_t s, int64_t np, int64_t d) {
    VLM_FOR(idx, b * l * d) {
        int64_t k = idx % d, t = (idx / d) % l, r = idx / (d * l);
        x[(r * s + np + t) * d + k] = emb[(int64_t)tokens[r * l + t] * d + k] + pos[t * d + k];
    }
}

// dimg [B·np, D] = the image rows of dx; dpos [np, D] += Σ_r dimg.
extern "C" __global__ void vlm_patch_embed_bwd_f32(float* dimg, float* dpos, const float* dx, int64_t b, int64_t s, int64_t np, int64_t d) {
    VLM_FOR(idx, np * d) {
        int64_t k = idx % d, i = idx / d;
        float a = dpos[idx];
        for (int64_t r = 0; r < b; r++) {
            float v = dx[(r * s + i) * d + k];
            dimg[(r * np + i) * d + k] = v;
            a += v;
        }
        dpos[idx] = a;
    }
}

// demb [V, D] and dpos [MaxLen, D] += the text rows of dx, rows r then positions t in order.
extern "C" __global__ void vlm_token_embed_bwd_f32(float* demb, float* dpos, const float* dx, const int* tokens, int64_t b, int64_t l, int64_t s, int64_t np, int64_t d) {
    VLM_FOR(k, d) {
        for (int64_t r = 0; r < b; r++) {
            for (int64_t t = 0; t < l; t++) {
                float v = dx[(r * s + np + t) * d + k];
                demb[(int64_t)tokens[r * l + t] * d + k] += v;
                dpos[t * d + k] += v;
            }
        }
    }
}
