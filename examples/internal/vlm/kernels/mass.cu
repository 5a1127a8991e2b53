// Response attention of one block from log-sum-exps (the MDI reward's statistics), the host's
// attentionMass: one thread per row, in float64. For each response query t = plen−1+j of row r
// (text row q = r·l + t) and each head, the mass on the image keys is exp(lse_img − lse) (lse
// over every key the query sees, lse_img over its row's image keys only) and the mass on the
// text keys the rest, −expm1(lse_img − lse); summed over heads in order, divided by H and by
// the number of keys (np, t+1), they are added to acc [b, 2+2·groups] in query order: text,
// vision, then the block's group's pair.
#include "vlm.cuh"

extern "C" __global__ void vlm_lse_mass_f32(double* acc, const float* lse, const float* lse_img, const int* span, int64_t b,
                                            int64_t l, int64_t heads, int64_t np, int64_t group, int64_t groups) {
    int64_t w = 2 + 2 * groups;
    VLM_FOR(r, b) {
        int64_t plen = span[2 * r], n = span[2 * r + 1];
        double* a = acc + r * w;
        for (int64_t j = 0; j < n; j++) {
            int64_t q = r * l + plen - 1 + j;
            double im = 0.0, tx = 0.0;
            for (int64_t h = 0; h < heads; h++) {
                double d = (double)lse_img[q * heads + h] - (double)lse[q * heads + h];
                im += exp(d);
                tx -= expm1(d);
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
