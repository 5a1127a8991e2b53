#!/usr/bin/env python3
"""Roofline of the example model's CUDA kernels (examples/internal/vlm/kernels) on paper.

For one forward + backward of one micro-batch (B rows of S = NP + L tokens), each kernel's
floating-point operations and compulsory DRAM bytes (every operand read once, every result
written once; float32), and the time the roofline allows on an H100 SXM and an H200:
max(FLOPs / peak, bytes / bandwidth). The kernels are float32 on CUDA cores compiled with
-fmad=false (a multiply and an add are two instructions), so the compute peak is half the
FP32 FMA peak: 67/2 TFLOP/s on both; tensor cores (bf16, 989 TFLOP/s dense) are not used.
HBM: 3.35 TB/s (H100 SXM), 4.8 TB/s (H200).

  python3 scripts/vlm_roofline.py          # markdown tables for the default and 7B shapes
"""

PEAK = 67e12 / 2
BW = {"H100": 3.35e12, "H200": 4.8e12}

SHAPES = {
    # examples/trainer/default.yaml: 32-px images in 8-px patches, D 64, 2 blocks of 4 heads,
    # MLP 128, vocabulary ~100 (128 here), L = max prompt 64 + response 24, micro-batch 16.
    # A step: 128 rows (16 prompts x n 8): 8 update micro-batches (fwd+bwd), 12 forward-only
    # micro-batches of 32 rows (old log-probs, reference, perturbed images).
    "default": dict(B=16, NP=16, L=88, D=64, H=4, M=128, V=128, P=8 * 8 * 3, layers=2,
                    upd=8, fwd_rows=12 * 32),
    # A 7B model of this architecture (D 4096, 32 blocks of 32 heads, GELU MLP 16384,
    # vocabulary 152064: 7.7B parameters) at verl/EasyR1's usual shapes: 1024 image tokens,
    # max_prompt_length 1024 + max_response_length 1024, micro-batch 4 for the update, per GPU
    # of 8: 512 prompts x n 5 / 8 = 320 rows, 80 update micro-batches, 3 forward passes.
    "7B": dict(B=4, NP=1024, L=2048, D=4096, H=32, M=16384, V=152064, P=14 * 14 * 3, layers=32,
               upd=80, fwd_rows=3 * 320),
}


def kernels(s):
    B, NP, L, D, H, M, V, P = (s[k] for k in "B NP L D H M V P".split())
    S = NP + L
    N, Nt = B * S, B * L
    dh = D // H
    keys = NP * NP + L * NP + L * (L + 1) // 2  # sum over queries of the keys each sees
    f = 4  # bytes per float32
    out = []  # (kernel, layer-count multiplier, flops, bytes)

    def gemm(name, m, n, k, beta, mult):
        out.append((name, mult, 2 * m * n * k, f * (m * k + k * n + m * n * (2 if beta else 1))))

    lay = s["layers"]
    # forward
    gemm("gemm fwd patch", B * NP, D, P, 0, 1)
    gemm("gemm fwd qkv", N, 3 * D, D, 0, lay)
    gemm("gemm fwd wo", N, D, D, 1, lay)
    gemm("gemm fwd w1", N, M, D, 0, lay)
    gemm("gemm fwd w2", N, D, M, 1, lay)
    gemm("gemm fwd head", Nt, V, D, 0, 1)
    # backward: dX and dW of each product
    for name, m, n, k in [("qkv", N, 3 * D, D), ("wo", N, D, D), ("w1", N, M, D), ("w2", N, D, M)]:
        gemm("gemm bwd " + name + " dX", m, k, n, 0, lay)
        gemm("gemm bwd " + name + " dW", k, n, m, 1, lay)
    gemm("gemm bwd head dX", Nt, D, V, 0, 1)
    gemm("gemm bwd head dW", D, V, Nt, 1, 1)
    gemm("gemm bwd patch dW", P, D, B * NP, 1, 1)
    out.append(("attention fwd", lay, 4 * dh * keys * B * H + 5 * keys * B * H,
                f * (N * 3 * D + N * D + B * H * S * S)))
    out.append(("attention bwd (q, kv)", lay, 2 * 4 * dh * keys * B * H + 4 * dh * keys * B * H,
                f * (N * 3 * D + N * D + B * H * S * S + N * 3 * D)))
    out.append(("layernorm fwd", 2 * lay + 1, 8 * N * D, f * (3 * N * D + N)))
    out.append(("layernorm bwd", 2 * lay + 1, 10 * N * D, f * (4 * N * D + N)))
    out.append(("gelu fwd+bwd", lay, 2 * 8 * N * M, f * 5 * N * M))
    out.append(("bias add + col sum", 1, 2 * (lay * N * (5 * D + M) + Nt * V),
                f * 3 * (lay * N * (5 * D + M) + Nt * V)))
    out.append(("embeddings fwd+bwd", 1, 4 * N * D, f * 6 * N * D))
    return out


def table(name, s):
    rows = kernels(s)
    print(f"\n#### {name}: B={s['B']} rows, S={s['NP']}+{s['L']}, D={s['D']}, {s['layers']} blocks, "
          f"H={s['H']}, M={s['M']}, V={s['V']} (one forward+backward of one micro-batch)\n")
    print("| kernel | launches | GFLOP | GB | FLOP/byte | H100 µs | H200 µs | bound |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    tot = {"fl": 0, "by": 0, "H100": 0, "H200": 0}
    for k, mult, fl, by in rows:
        fl, by = fl * mult, by * mult
        t = {g: max(fl / PEAK, by / BW[g]) for g in BW}
        bound = "compute" if fl / PEAK > by / BW["H100"] else "memory"
        print(f"| {k} | {mult} | {fl / 1e9:.4g} | {by / 1e9:.4g} | {fl / by:.3g} | "
              f"{t['H100'] * 1e6:.4g} | {t['H200'] * 1e6:.4g} | {bound} |")
        tot["fl"] += fl
        tot["by"] += by
        for g in BW:
            tot[g] += t[g]
    print(f"| **fwd+bwd total** | | {tot['fl'] / 1e9:.4g} | {tot['by'] / 1e9:.4g} | | "
          f"{tot['H100'] * 1e6:.4g} | {tot['H200'] * 1e6:.4g} | |")
    # A step: upd fwd+bwd micro-batches plus forward-only passes over fwd_rows rows (forward is
    # about a third of forward+backward's FLOPs).
    fwd_share = 1 / 3
    micro = s["upd"] + fwd_share * s["fwd_rows"] / s["B"]
    gemm_fl = sum(fl * m for k, m, fl, _ in rows if k.startswith("gemm"))
    for g in BW:
        step = tot[g] * micro
        tc = (tot[g] - gemm_fl / PEAK + gemm_fl / 989e12) * micro
        print(f"\n{g}: roofline step time (update + log-prob passes, generation not counted) "
              f"≈ {step:.4g} s with these fp32 kernels; ≈ {tc:.4g} s if the GEMMs ran on bf16 "
              f"tensor cores (989 TFLOP/s dense)")


if __name__ == "__main__":
    for n, s in SHAPES.items():
        table(n, s)
