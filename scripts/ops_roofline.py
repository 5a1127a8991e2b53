#!/usr/bin/env python3
"""Roofline of the transformer ops of package tensor on an H100 SXM and an H200, at Qwen2.5-7B
shapes (hidden 3584, 28 query heads and 4 key/value heads of 128, MLP 18944, vocabulary 152064;
a layer at 2048 tokens, attention over one sequence of 4096), and, given the output of
cuda's BenchmarkOps (scripts/ops-gpu-bench), the measured times beside it.

For each op: its floating-point operations and compulsory HBM bytes (each input read once, each
output written once, in the dtypes the cuda backend uses: bfloat16 or float32 GEMM inputs with
float32 outputs, float32 elsewhere), and the time the roofline allows, max(FLOPs / peak,
bytes / bandwidth). Vendor datasheet figures: bf16 tensor cores 989 TFLOP/s dense on both (1979
is with 2:4 sparsity), FP32 on CUDA cores 67 TFLOP/s; HBM3 3.35 TB/s (H100 SXM 80 GB), HBM3e
4.8 TB/s (H200 141 GB). Float32 GEMMs run without TF32 (CUBLAS_COMPUTE_32F), so their peak is the
CUDA cores' 67. The attention kernel (cuda/kernels/attention.cu) computes in float32 scalar
loops built with -fmad=false (a multiply and an add are two instructions): its ceiling is
67/2 TFLOP/s, given in its own column; a bf16 flash kernel on tensor cores would have the 989.

    python3 scripts/ops_roofline.py                          # the roofline table
    python3 scripts/ops_roofline.py --bench bench.txt --gpu H100   # with measured times
"""
import argparse
import re

TC, FP32 = 989e12, 67e12
BW = {"H100": 3.35e12, "H200": 4.8e12}

T, H, HQ, HKV, DH, M, V, TA = 2048, 3584, 28, 4, 128, 18944, 152064, 4096


def ops():
    """(name, bench key or None, flops, bytes, peak) for each op."""
    rows = []
    q, kv = HQ * DH, HKV * DH
    for dt, size, peak in (("bfloat16", 2, TC), ("float32", 4, FP32)):
        for what, m, k, n in (("qkv", T, H, q + 2 * kv), ("o", T, q, H), ("gate+up", T, H, 2 * M),
                              ("down", T, M, H), ("decode up M=1", 1, H, M), ("decode up M=32", 32, H, M)):
            rows.append((f"GEMM {what} {dt}", f"linear/{dt}/M={m}/K={k}/N={n}", 2 * m * n * k,
                         size * (m * k + n * k) + 4 * m * n, peak))
    # a layer's GEMMs forward + backward (dX and dW each cost the forward's flops), bf16
    layer = sum(2 * T * n * k for k, n in ((H, q + 2 * kv), (q, H), (H, 2 * M), (M, H)))
    layer_bytes = sum(2 * (T * k + n * k) + 4 * T * n for k, n in ((H, q + 2 * kv), (q, H), (H, 2 * M), (M, H)))
    rows.append(("GEMMs of a layer, fwd+bwd, bfloat16", None, 3 * layer, 3 * layer_bytes, TC))
    af = 4 * DH * HQ * TA * (TA + 1) / 2  # Q·Kᵀ and P·V over the causal half
    qo, kvb = TA * HQ * DH, TA * HKV * DH
    rows.append(("attention fwd, causal, T=4096", f"attention/fwd/T={TA}/Hq={HQ}/Hkv={HKV}/D={DH}", af,
                 4 * (2 * qo + 2 * kvb), TC))
    rows.append(("attention fwd+bwd", f"attention/fwd+bwd/T={TA}/Hq={HQ}/Hkv={HKV}/D={DH}", 3.5 * af,
                 4 * (2 * qo + 2 * kvb + 3 * qo + 2 * kvb + qo + 2 * kvb), TC))
    n = T * H
    rows.append(("RMSNorm fwd", f"rmsnorm/fwd/rows={T}/d={H}", 4 * n, 8 * n, FP32))
    rows.append(("RMSNorm bwd", f"rmsnorm/bwd/rows={T}/d={H}", 8 * n, 12 * n, FP32))
    r = T * (HQ + HKV) * DH
    rows.append(("RoPE fwd (q and k)", f"rope/fwd/rows={T}/heads={HQ + HKV}/D={DH}", 3 * r, 8 * r, FP32))
    rows.append(("RoPE bwd", f"rope/bwd/rows={T}/heads={HQ + HKV}/D={DH}", 3 * r, 8 * r, FP32))
    s = T * M
    rows.append(("SwiGLU fwd", f"swiglu/fwd/rows={T}/m={M}", 5 * s, 12 * s, FP32))
    rows.append(("SwiGLU bwd", f"swiglu/bwd/rows={T}/m={M}", 10 * s, 20 * s, FP32))
    p = H * M
    rows.append(("AdamW, one MLP matrix", f"adamw/n={p}", 14 * p, 28 * p, FP32))
    params = 7.62e9  # Qwen2.5-7B
    rows.append(("AdamW, whole model (7.6B)", None, 14 * params, 28 * params, FP32))
    lf = 2 * T * V * H
    w = 2 * V * H  # bf16 head weight
    rows.append(("LM head fwd (fused), bf16", f"lmhead/fwd/bfloat16/N={T}/D={H}/V={V}", lf, w + 2 * T * H, TC))
    rows.append(("LM head fwd+bwd (fused, logits recomputed once: 4 GEMMs)", f"lmhead/fwd+bwd/bfloat16/N={T}/D={H}/V={V}", 4 * lf,
                 3 * w + 8 * T * H + 4 * V * H, TC))
    rows.append(("(unfused: [N, V] fp32 logits write + read)", None, 0, 2 * 4 * T * V, TC))
    return rows


def parse_bench(path):
    """Median ns/op per sub-benchmark of BenchmarkOps in `go test -bench` output."""
    got = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 4 and f[0].startswith("BenchmarkOps/") and f[3] == "ns/op":
            key = re.sub(r"-\d+$", "", f[0][len("BenchmarkOps/"):])
            got.setdefault(key, []).append(float(f[2]))
    return {k: sorted(v)[len(v) // 2] for k, v in got.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", help="go test -bench output of cuda's BenchmarkOps")
    ap.add_argument("--gpu", choices=sorted(BW), help="the GPU the bench ran on")
    a = ap.parse_args()
    meas = parse_bench(a.bench) if a.bench else {}
    print(f"Qwen2.5-7B shapes: {T} tokens, hidden {H}, {HQ}/{HKV} heads of {DH}, MLP {M}, vocabulary {V}; "
          f"attention T = {TA}. Peaks: bf16 tensor cores 989 TFLOP/s, FP32 67 TFLOP/s; "
          f"HBM {BW['H100'] / 1e12:.2f} TB/s (H100 SXM), {BW['H200'] / 1e12:.1f} TB/s (H200).\n")
    head = "| op | GFLOP | GB | FLOP/byte | peak used | H100 µs | H200 µs | bound |"
    sep = "|---|---:|---:|---:|---|---:|---:|---|"
    if meas:
        head += f" measured µs ({a.gpu}) | % of roofline |"
        sep += "---:|---:|"
    print(head)
    print(sep)
    for name, key, fl, by, peak in ops():
        t = {g: max(fl / peak, by / BW[g]) for g in BW}
        bound = "compute" if fl / peak > by / BW["H100"] else "memory"
        line = (f"| {name} | {fl / 1e9:.4g} | {by / 1e9:.4g} | {fl / by:.3g} | "
                f"{'—' if not fl else 'bf16 TC' if peak == TC else 'FP32'} | {t['H100'] * 1e6:.4g} | {t['H200'] * 1e6:.4g} | {bound} |")
        if meas:
            ns = meas.get(key)
            line += (f" {ns / 1e3:.4g} | {100 * t[a.gpu] * 1e6 / (ns / 1e3):.0f} % |" if ns else " — | — |")
        print(line)
    af = 4 * DH * HQ * TA * (TA + 1) / 2
    print(f"\nThe attention kernel of the cuda backend is float32 on CUDA cores with -fmad=false: its ceiling, "
          f"67/2 TFLOP/s, allows {af / (FP32 / 2) * 1e6:.4g} µs forward and {3.5 * af / (FP32 / 2) * 1e6:.4g} µs "
          f"forward + backward (both GPUs), against the tensor-core figures above.")
    print("The LM head runs on the device in chunks of 8192 vocabulary rows: with bfloat16 hidden states and "
          "weight its logits GEMMs are bfloat16 (tensor cores), and so are the backward's two products with "
          "LMHeadGrad.GradBF16; without it they are float32 GEMMs (no TF32).")


if __name__ == "__main__":
    main()
