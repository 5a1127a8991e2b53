#!/usr/bin/env python3
"""Time PyTorch's equivalents of the mtrl CUDA kernels on a GPU, for comparison with
`cuda.test -test.bench .` (scripts/gpu-check). Shapes are the GPU benchmark shapes of
docs/conventions.md#benchmark-shapes: logits [8192, 151936] in fp32 and bf16, per-token ops on
[512, 2048] and [2048, 2048] (4M tokens).

    python3 scripts/torch_bench.py [--iters 20]

Prints one line per op: name, shape, ms per call, GB/s (bytes as in the Go benchmarks' SetBytes).
"""
import argparse

import torch


def timeit(fn, iters):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def report(name, shape, ms, nbytes, tokens):
    print(f"{name:<28} {str(shape):<16} {ms:9.4f} ms  {nbytes / ms / 1e6:9.1f} GB/s  {tokens / ms * 1e3:12.4g} tokens/s")


def logprob_entropy(logits, ys, temperature=1.0):
    z = logits.float() / temperature
    lse = torch.logsumexp(z, dim=-1)
    logp = torch.gather(z, -1, ys.unsqueeze(-1)).squeeze(-1) - lse
    p = torch.softmax(z, dim=-1)
    ent = lse - (p * z).sum(-1)
    return logp, ent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=151936)
    args = ap.parse_args()
    dev = torch.device("cuda")
    print("device", torch.cuda.get_device_name(dev), "torch", torch.__version__)
    n, v = args.rows, args.vocab
    for dt in (torch.float32, torch.bfloat16):
        logits = (torch.randn(n, v, device=dev) * 3).to(dt)
        ys = torch.randint(0, v, (n,), device=dev)
        with torch.no_grad():
            ms = timeit(lambda: logprob_entropy(logits, ys), args.iters)
        report(f"LogProbEntropy/{dt}", (n, v), ms, n * v * logits.element_size(), n)
        x = logits.detach().requires_grad_(True)

        def fwd_bwd():
            lp, ent = logprob_entropy(x, ys)
            torch.autograd.grad((lp.sum() + ent.sum()), x)

        ms = timeit(fwd_bwd, max(3, args.iters // 4))
        report(f"LogProbEntropyFwdBwd/{dt}", (n, v), ms, 2 * n * v * logits.element_size(), n)
        del logits, x
        torch.cuda.empty_cache()

    for b, t in ((512, 2048), (2048, 2048)):
        lp = -torch.rand(b, t, device=dev) * 3
        ref = -torch.rand(b, t, device=dev) * 3
        mask = (torch.rand(b, t, device=dev) < 0.8).float()
        tokens = b * t

        def low_var_kl():
            x = (ref - lp).clamp(-20, 20)
            return (torch.exp(x) - x - 1).clamp(-10, 10)

        def perception():
            d = (ref - lp).clamp(-20, 20)
            return (torch.exp(d) - d - 1).clamp(0, 10)

        def masked_mean():
            return (lp * mask).sum() / (mask.sum() + 1e-8)

        def whiten():
            mean = masked_mean()
            c = lp - mean
            var = (c * c * mask).sum() / (mask.sum() + 1e-8)
            cnt = mask.sum()
            var = var * cnt / (cnt - 1)
            return c * torch.rsqrt(var + 1e-8)

        def top_p():
            k = torch.ceil(mask.sum(-1) * 0.4).long()
            s = lp.masked_fill(mask == 0, float("-inf"))
            order = torch.sort(s, dim=-1, descending=True, stable=True).indices
            rank = torch.empty_like(order)
            rank.scatter_(-1, order, torch.arange(t, device=dev).expand(b, t))
            return ((rank < k.unsqueeze(-1)) & (mask != 0)).float()

        for name, fn, nbytes in (
            ("LowVarKL", low_var_kl, 12 * tokens),
            ("PerceptionScore", perception, 12 * tokens),
            ("MaskedMean", masked_mean, 8 * tokens),
            ("MaskedWhiten", whiten, 12 * tokens),
            ("TopPMask", top_p, 12 * tokens),
        ):
            report(name, (b, t), timeit(fn, args.iters), nbytes, tokens)


if __name__ == "__main__":
    main()
