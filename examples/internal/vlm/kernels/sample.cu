// Sampling the next token of each row from its logits [rows, V] with temperature, top-k and
// top-p, as the host sampler (generate.go's sample) does, one thread per row: float64
// probabilities exp(logit/T - max), a stable sort by probability (insertion sort: V is the
// example's small vocabulary), the top-k cut, the top-p prefix, and a uniform u in [0, 1) from a
// seeded per-row counter-based generator (vlm_uniform: SplitMix64 of seed, row and step; the
// host's SampleUniform is the same function) scaled by the kept mass. Given the same uniforms the
// host and device draw the same token unless their float64 exp differ in the last bit exactly at
// a boundary. probs and order are scratch [rows, V] (float64, int32).
#include "vlm.cuh"

__device__ __forceinline__ uint64_t vlm_splitmix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// The 64 random bits of (seed, row, step); the uniform is their low 53 bits / 2^53.
__device__ __forceinline__ uint64_t vlm_uniform_bits(uint64_t seed, uint64_t row, uint64_t step) {
    return vlm_splitmix(vlm_splitmix(vlm_splitmix(seed) ^ row) ^ step);
}

// One row's draw with the uniform uni in [0, 1) (unused when greedy).
__device__ int vlm_sample_row(const float* lg, double* p, int* ord, int64_t v, double temperature, double top_p, int64_t top_k, double uni) {
    if (temperature == 0.0) {
        int64_t best = 0;
        for (int64_t i = 0; i < v; i++)
            if (lg[i] > lg[best]) best = i;
        return (int)best;
    }
    double mx = -INFINITY;
    for (int64_t i = 0; i < v; i++) {
        double x = (double)lg[i] / temperature;
        mx = x > mx ? x : mx;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < v; i++) {
        p[i] = exp((double)lg[i] / temperature - mx);
        sum += p[i];
    }
    int64_t n = v;
    if (top_p < 1.0 || (top_k > 0 && top_k < n)) {
        for (int64_t i = 0; i < v; i++) { // stable insertion sort, larger probability first
            int o = (int)i;
            int64_t j = i;
            while (j > 0 && p[ord[j - 1]] < p[o]) {
                ord[j] = ord[j - 1];
                j--;
            }
            ord[j] = o;
        }
        if (top_k > 0 && top_k < n) {
            n = top_k;
            sum = 0.0;
            for (int64_t i = 0; i < n; i++) sum += p[ord[i]];
        }
        int64_t kept = 0;
        double acc = 0.0;
        while (kept < n) {
            acc += p[ord[kept]];
            kept++;
            if (acc >= top_p * sum) break;
        }
        double u = uni * acc;
        for (int64_t i = 0; i < kept; i++) {
            u -= p[ord[i]];
            if (u < 0) return ord[i];
        }
        return ord[kept - 1];
    }
    double u = uni * sum;
    for (int64_t i = 0; i < n; i++) {
        u -= p[i];
        if (u < 0) return (int)i;
    }
    return (int)(n - 1);
}

extern "C" __global__ void vlm_sample_f32(int* out, const float* logits, double* probs, int* order, int64_t rows, int64_t v,
                                          double temperature, double top_p, int64_t top_k, int64_t seed, int64_t step) {
    VLM_FOR(r, rows) {
        uint64_t bits = vlm_uniform_bits((uint64_t)seed, (uint64_t)r, (uint64_t)step);
        double uni = (double)(bits & ((1ull << 53) - 1)) / 9007199254740992.0;
        out[r] = vlm_sample_row(logits + r * v, probs + r * v, order + r * v, v, temperature, top_p, top_k, uni);
    }
}

// The same draw with row r's uniform given in uniforms[r] (drawn by the caller: the host's
// per-row random sources, so a device rollout picks the host sampler's tokens).
extern "C" __global__ void vlm_sample_u_f32(int* out, const float* logits, double* probs, int* order, const double* uniforms,
                                            int64_t rows, int64_t v, double temperature, double top_p, int64_t top_k) {
    VLM_FOR(r, rows) {
        double uni = temperature == 0.0 ? 0.0 : uniforms[r];
        out[r] = vlm_sample_row(logits + r * v, probs + r * v, order + r * v, v, temperature, top_p, top_k, uni);
    }
}
