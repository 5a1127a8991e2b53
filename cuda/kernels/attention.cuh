// Shared by the attention kernels (attention.cu, attention_mma.cu): the block size, the
// visibility rule and the number of keys a query tile visits.
#pragma once
#include "common.cuh"

#define ATT_THREADS 128

// att_visible reports whether query qi sees key kj (both within the sequence).
__device__ __forceinline__ bool att_visible(int64_t qi, int64_t kj, int64_t qn, int64_t kn, int causal) {
    return qi < qn && kj < kn && (!causal || kj <= qi + kn - qn);
}

// att_keys is the number of keys the query tile [t0, t0+bq) visits.
__device__ __forceinline__ int64_t att_keys(int64_t t0, int bq, int64_t qn, int64_t kn, int causal) {
    if (!causal) return kn;
    int64_t last = t0 + bq + kn - qn;  // one past the last key the tile's last query sees
    return last < kn ? last : kn;
}
