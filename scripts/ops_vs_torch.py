#!/usr/bin/env python3
"""PyTorch's side of scripts/ops-vs-torch, and the parser and tables of both sides.

    ops_vs_torch.py torch GROUP --threads N --reps R   time torch's equivalent of a Go group
    ops_vs_torch.py gobench GROUP THREADS               parse `go test -bench` output (stdin)
    ops_vs_torch.py mem --threads N                      peak memory of torch's LM head and
                                                         attention, one fresh process per case
    ops_vs_torch.py table RESULTS.jsonl                  Markdown tables of the medians

Every record is one JSON line: side (go or torch), group, key (the op and shape, named as the Go
sub-benchmark without its dtype), wall and cpu seconds per call (cpu: the process's user +
system time, so work per CPU-second is the per-core rate on a shared, loaded machine), the
op's flops and bytes, and the load average when it was taken. Torch's equivalents:

- gemm, decode: torch.matmul(x, W.t(), out=y), W [N, K] in Hugging Face layout as tensor.Linear
  takes it, float32, and bfloat16 (x, W and y; oneDNN's bfloat16 GEMM, where Go's y is float32);
- attention: Hugging Face's eager attention, causal: K and V repeated for the query heads
  (repeat_kv), matmul, scale, additive causal mask, softmax, matmul; forward under no_grad,
  forward + backward by autograd.grad of the output against a random gradient into Q, K and V
  (torch 1.13 has no scaled_dot_product_attention);
- lmhead: logits = h·Wᵀ, log_softmax, gather of the targets and the entropy; forward under
  no_grad, forward + backward by autograd of Σ g·logp + Σ g'·entropy into h and W; float32, and
  bfloat16 h and W with the logits cast to float32 before log_softmax (logits.float(), as
  Hugging Face trainers do), the backward's products then in bfloat16;
- elementwise: F.layer_norm (weight and bias in the activations' dtype, as torch requires),
  F.gelu, F.gelu(approximate="tanh") and x·sigmoid(1.702·x) (Hugging Face's QuickGELU) at
  Qwen2-VL's vision-tower shapes, and F.layer_norm and Hugging Face's Qwen2RMSNorm (eager:
  float32 x.pow(2).mean, rsqrt, times the weight) at Qwen2.5-0.5B's and 7B's widths; forward
  under no_grad, backward alone: autograd.grad of a kept graph (retain_graph) into x (and the
  norms' weight and bias) against a random gradient;
- stream: x.sum() over a 1 GiB float32 tensor (streaming read).
"""
import argparse
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import time

GEMM = [(2048, 896, 4864), (2048, 4864, 896), (2048, 3584, 18944)]
DECODE = [(m, 3584, 18944) for m in (1, 2, 4, 8, 16, 32)]
ATTN = [(t, 14, 2, 64) for t in (512, 1024, 2048, 4096)]
LMHEAD = (256, 896, 151936)
ELEMENTWISE = [("layernorm", 1024, 1280), ("layernorm", 2048, 896), ("layernorm", 2048, 3584), ("rmsnorm", 2048, 896),
               ("rmsnorm", 2048, 3584), ("gelu", 1024, 5120), ("gelu_pytorch_tanh", 1024, 5120), ("quick_gelu", 1024, 5120)]


def load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def emit(**rec):
    rec["load"] = load()
    print(json.dumps(rec), flush=True)


def attn_flops(t, hq, d):
    return 4 * d * hq * t * (t + 1) / 2


def lm_flops(n, d, v, bwd):
    return (4 if bwd else 1) * 2 * n * v * d


def timed(fn, reps):
    """Runs fn once to warm up, then reps times; returns wall and CPU seconds per call."""
    fn()
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - w0) / reps, (time.process_time() - c0) / reps


DTYPES = ("float32", "bfloat16")


def dkey(dt):
    """The dtype's part of a key: none for float32 (as the Go side's names without /float32)."""
    return "" if dt == "float32" else f"/{dt}"


def lmhead_inputs(torch, n, d, v, grad, dt="float32"):
    g = torch.Generator().manual_seed(3)
    # in place, so that setting up never holds a temporary copy (the memory probe's baseline)
    w = torch.randn(v, d, generator=g).mul_(0.02)
    h = torch.randn(n, d, generator=g)
    if dt != "float32":
        w, h = w.to(getattr(torch, dt)), h.to(getattr(torch, dt))
    w, h = w.requires_grad_(grad), h.requires_grad_(grad)
    y = torch.randint(0, v, (n,), generator=g)
    return h, w, y, torch.randn(n, generator=g), torch.randn(n, generator=g)


def lmhead_fn(torch, bwd, h, w, y, gl, ge):
    def fwd():
        z = torch.matmul(h, w.t()).float()  # a no-op for float32
        lp_all = torch.log_softmax(z, dim=-1)
        lp = torch.gather(lp_all, 1, y.unsqueeze(1)).squeeze(1)
        ent = -(lp_all.exp() * lp_all).sum(-1)
        return lp, ent

    if not bwd:
        def run():
            with torch.no_grad():
                fwd()
        return run

    def run():
        lp, ent = fwd()
        torch.autograd.grad((lp * gl).sum() + (ent * ge).sum(), (h, w))
    return run


def attention_inputs(torch, t, hq, hkv, d, grad=False):
    g = torch.Generator().manual_seed(2)
    q = torch.randn(hq, t, d, generator=g)
    k, v = torch.randn(hkv, t, d, generator=g), torch.randn(hkv, t, d, generator=g)
    mask = torch.full((t, t), float("-inf")).triu_(1)
    dout = torch.randn(hq, t, d, generator=g) if grad else None
    return q.requires_grad_(grad), k.requires_grad_(grad), v.requires_grad_(grad), mask, dout


def attention_fn(torch, q, k, v, mask, dout):
    rep, scale = q.shape[0] // k.shape[0], 1 / math.sqrt(q.shape[-1])

    def fwd():
        kk, vv = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)  # repeat_kv
        s = torch.matmul(q, kk.transpose(-1, -2)) * scale + mask
        p = torch.softmax(s, dim=-1, dtype=torch.float32)
        return torch.matmul(p, vv)

    if dout is None:
        def run():
            with torch.no_grad():
                return fwd()
        return run

    def run():
        torch.autograd.grad(fwd(), (q, k, v), dout)
    return run


def run_torch(group, threads, reps):
    import torch
    torch.set_num_threads(threads)
    if group in ("gemm", "decode"):
        for dt in DTYPES:
            for m, k, n in GEMM if group == "gemm" else DECODE:
                g = torch.Generator().manual_seed(1)
                w, x = torch.randn(n, k, generator=g).mul_(0.02), torch.randn(m, k, generator=g)
                w, x = w.to(getattr(torch, dt)), x.to(getattr(torch, dt))
                y = torch.empty(m, n, dtype=getattr(torch, dt))
                wall, cpu = timed(lambda: torch.matmul(x, w.t(), out=y), reps)
                emit(side="torch", group=group, key=f"linear{dkey(dt)}/M={m}/K={k}/N={n}", wall=wall, cpu=cpu,
                     flops=2 * m * n * k, wbytes=w.element_size() * n * k, threads=threads)
                del w, x, y
        if group == "decode":  # torch.matmul runs OpenBLAS's sgemm on one row; its gemv is torch.mv
            m, k, n = DECODE[0]
            g = torch.Generator().manual_seed(1)
            w, x = torch.randn(n, k, generator=g).mul_(0.02), torch.randn(m, k, generator=g)
            y = torch.empty(m, n)
            wall, cpu = timed(lambda: torch.mv(w, x[0], out=y[0]), reps)
            emit(side="torch", group=group, key=f"linear/M={m}/K={k}/N={n}/mv", wall=wall, cpu=cpu,
                 flops=2 * m * n * k, wbytes=4 * n * k, threads=threads)
    elif group == "attention":
        for bwd in (False, True):
            for t, hq, hkv, d in ATTN:
                fn = attention_fn(torch, *attention_inputs(torch, t, hq, hkv, d, bwd))
                wall, cpu = timed(fn, reps)
                emit(side="torch", group=group, key=f"attention/{'fwd+bwd' if bwd else 'fwd'}/T={t}/Hq={hq}/Hkv={hkv}/D={d}",
                     wall=wall, cpu=cpu, flops=(3.5 if bwd else 1) * attn_flops(t, hq, d), threads=threads)
    elif group == "lmhead":
        n, d, v = LMHEAD
        for dt in DTYPES:
            for bwd in (False, True):
                fn = lmhead_fn(torch, bwd, *lmhead_inputs(torch, n, d, v, bwd, dt))
                wall, cpu = timed(fn, reps)
                emit(side="torch", group=group, key=f"lmhead/{'fwd+bwd' if bwd else 'fwd'}{dkey(dt)}/N={n}/D={d}/V={v}",
                     wall=wall, cpu=cpu, flops=lm_flops(n, d, v, bwd), tokens=n, threads=threads)
                del fn
    elif group == "elementwise":
        F = torch.nn.functional
        for dt in DTYPES:
            tdt = getattr(torch, dt)
            for op, t, d in ELEMENTWISE:
                for bwd in (False, True):
                    g = torch.Generator().manual_seed(5)
                    x = torch.randn(t, d, generator=g).to(tdt).requires_grad_(bwd)
                    ins = [x]
                    if op == "layernorm":
                        w, b = (torch.randn(d, generator=g).to(tdt).requires_grad_(bwd) for _ in range(2))
                        ins += [w, b]
                        f = lambda x: F.layer_norm(x, (d,), w, b, 1e-6)
                    elif op == "rmsnorm":
                        w = torch.randn(d, generator=g).to(tdt).requires_grad_(bwd)
                        ins += [w]

                        def f(x):
                            h = x.to(torch.float32)
                            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
                            return w * h.to(x.dtype)
                    elif op == "gelu":
                        f = F.gelu
                    elif op == "gelu_pytorch_tanh":
                        f = lambda x: F.gelu(x, approximate="tanh")
                    else:
                        f = lambda x: x * torch.sigmoid(1.702 * x)
                    if bwd:
                        y = f(x)
                        dy = torch.randn(t, d, generator=g).to(tdt)
                        fn = lambda: torch.autograd.grad(y, ins, dy, retain_graph=True)
                    else:
                        def fn():
                            with torch.no_grad():
                                return f(x)
                    wall, cpu = timed(fn, reps)
                    emit(side="torch", group=group, key=f"{op}/{'bwd' if bwd else 'fwd'}{dkey(dt)}/T={t}/D={d}", wall=wall,
                         cpu=cpu, bytes=(3 if bwd else 2) * t * d * x.element_size(), threads=threads)
    elif group == "stream":
        x = torch.ones(1 << 28)  # 1 GiB
        wall, cpu = timed(lambda: x.sum(), reps)
        emit(side="torch", group=group, key="stream", wall=wall, cpu=cpu, bytes=4 << 28, threads=threads)
    else:
        sys.exit(f"unknown group {group}")


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def mem_child(case, threads):
    """One case in a fresh process: warm torch's thread pools and BLAS buffers on a tiny shape,
    set up the inputs, then the peak resident memory of one call above the resident memory
    before it (ru_maxrss is a high-water mark, so setting up must not peak above the baseline:
    inputs are made in place)."""
    import torch
    torch.set_num_threads(threads)
    if case.startswith("lmhead"):
        n, d, v = LMHEAD
        bwd = "fwd+bwd" in case
        dt = "bfloat16" if case.endswith("bfloat16") else "float32"
        lmhead_fn(torch, bwd, *lmhead_inputs(torch, 4, d, 64, bwd, dt))()
        fn = lmhead_fn(torch, bwd, *lmhead_inputs(torch, n, d, v, bwd, dt))
        key = f"lmhead/{'fwd+bwd' if bwd else 'fwd'}{dkey(dt)}/N={n}/D={d}/V={v}"
    else:
        t, hq, hkv, d = ATTN[-1]
        attention_fn(torch, *attention_inputs(torch, 8, hq, hkv, d))()
        fn = attention_fn(torch, *attention_inputs(torch, t, hq, hkv, d))
        key = f"attention/fwd/T={t}/Hq={hq}/Hkv={hkv}/D={d}"
    base, before = rss(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    fn()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    emit(side="torch", group="mem", key=key, peak_delta=peak - base, setup_peak_above_base=max(0, before - base),
         threads=threads)


GO_NAME = re.compile(r"^Benchmark(\w+)(/\S*?)?(-\d+)?$")


def parse_go(group, threads, side="go"):
    for line in sys.stdin:
        f = line.split()
        if not f or not f[0].startswith("Benchmark") or len(f) < 4:
            continue
        m = GO_NAME.match(f[0])
        bench, sub = m.group(1), (m.group(2) or "").lstrip("/")
        metrics = {unit: float(val) for val, unit in zip(f[2::2], f[3::2])}
        if bench == "StreamRead":
            key = "stream"
        elif bench == "FMAPeak":
            key = "fmapeak/" + sub
        else:
            key = sub.replace("/float32", "")
        rec = dict(side=side, group=group, key=key, wall=metrics["ns/op"] * 1e-9, threads=threads,
                   metrics=metrics)
        if "cpu-ns/op" in metrics:
            rec["cpu"] = metrics["cpu-ns/op"] * 1e-9
        if "B/op" in metrics:
            rec["alloc"] = metrics["B/op"]
        emit(**rec)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def div(x, c):
    return None if x is None else x / c


def fmt(x, spec=".3g"):
    return "—" if x is None else format(x, spec)


def cpu_label():
    """The CPU, as every table heading names it: model, family/model, the widest SIMD, cores."""
    info = {}
    for line in open("/proc/cpuinfo"):
        k, _, v = line.partition(":")
        info.setdefault(k.strip(), v.strip())
    flags = set(info.get("flags", "").split())
    simd = "+".join(f for f in ("avx512f", "avx512_bf16", "avx2", "fma") if f in flags)
    return (f"{info.get('model name', '?')} family {info.get('cpu family', '?')} model {info.get('model', '?')}, "
            f"{simd}, {os.cpu_count()} CPUs")


def table(path):
    recs = [json.loads(l) for l in open(path) if l.strip()]
    by = {}
    for r in recs:
        if r["group"] != "mem":
            by.setdefault((r["side"], r["key"]), []).append(r)

    def runs(side, key):
        return by.get((side, key), [])

    def ratio_med(key, f, side="go"):
        """Median over rounds of Go's f (or the before binary's) over torch's f, pairing the i-th
        runs (interleaved)."""
        g, t = runs(side, key), runs("torch", key)
        rs = [f(a) / f(b) for a, b in zip(g, t) if f(a) and f(b)]
        return med(rs)

    def peak_of(impl):
        return (med([r["metrics"].get("GFLOP/cpu-s") for r in runs("go", "fmapeak/" + impl)]),
                med([r["metrics"].get("GFLOP/s") for r in runs("go", "fmapeak/" + impl)]))

    # The ceiling of each dtype's GEMM: float32 FMAs, or VDPBF16PS (twice the flops per instruction).
    peaks = {"float32": peak_of("avx512"), "bfloat16": peak_of("avx512bf16")}
    peak, peak_wall = peaks["float32"]
    threads = recs[0]["threads"]
    cpu = cpu_label()
    loads = [r["load"] for r in recs]
    print(f"Threads: {threads} (GOMAXPROCS = torch.set_num_threads = OPENBLAS_NUM_THREADS = OMP_NUM_THREADS). "
          f"Load average during the runs: {min(loads):.1f}–{max(loads):.1f} (median {med(loads):.1f}).\n")
    bp, bpw = peaks["bfloat16"]
    print(f"Peaks ({cpu}; internal/gemm BenchmarkFMAPeak, median of {len(runs('go', 'fmapeak/avx512'))}): "
          f"float32 FMA (avx512) {fmt(peak, '.0f')} GFLOP per CPU-second per core, {fmt(peak_wall, '.0f')} GFLOP/s wall on "
          f"{threads} threads (ideal {fmt(peak and peak * threads, '.0f')}); bfloat16 VDPBF16PS (avx512bf16) {fmt(bp, '.0f')} "
          f"GFLOP per CPU-second, {fmt(bpw, '.0f')} GFLOP/s wall. The wall figures are the share of the cores this "
          f"process gets on the loaded machine, the reference for the wall-clock percentages.\n")

    def gfl(r):
        return r["flops"] / r["wall"] / 1e9 if "flops" in r else r["metrics"].get("GFLOP/s")

    def gfl_cpu(r):
        if "flops" in r:
            return r["flops"] / r["cpu"] / 1e9 if r.get("cpu") else None
        return r["metrics"].get("GFLOP/cpu-s")

    def pct(x, dt="float32", wall=False):
        p = peaks[dt][1 if wall else 0]
        return "—" if x is None or not p else f"{100 * x / p:.0f} %"


    groups = {r["group"] for r in recs}  # a run of some groups prints only their tables

    if "gemm" in groups:
        print(f"#### GEMM (prefill): GFLOP per CPU-second (per core; % of the dtype's peak) and GFLOP/s wall — {cpu}\n")
        print("bfloat16: x and W bfloat16; Go's y is float32 (VDPBF16PS), torch's bfloat16 (oneDNN).\n")
        print("| shape M × K → N | dtype | Go /cpu-s | torch /cpu-s | Go/torch (cpu-s) | Go wall (% of peak wall) | torch wall (%) | Go/torch (wall) |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for m, k, n in GEMM:
            for dt in DTYPES:
                key = f"linear{dkey(dt)}/M={m}/K={k}/N={n}"
                g = med([gfl_cpu(r) for r in runs("go", key)])
                t = med([gfl_cpu(r) for r in runs("torch", key)])
                gw, tw = med([gfl(r) for r in runs("go", key)]), med([gfl(r) for r in runs("torch", key)])
                print(f"| {m} × {k} → {n} | {dt} | {fmt(g, '.0f')} ({pct(g, dt)}) | {fmt(t, '.0f')} ({pct(t, dt)}) | "
                      f"{fmt(ratio_med(key, gfl_cpu), '.2f')}× | {fmt(gw, '.0f')} ({pct(gw, dt, True)}) | "
                      f"{fmt(tw, '.0f')} ({pct(tw, dt, True)}) | {fmt(ratio_med(key, gfl), '.2f')}× |")

    if "stream" in groups and "decode" in groups:
        gs = med([r["metrics"]["GB/s"] for r in runs("go", "stream")])
        gsc = med([(1 << 30) / (r["metrics"]["cpu-ns/op"] * 1e-9) / 1e9 for r in runs("go", "stream") if r["metrics"].get("cpu-ns/op")])
        ts = med([r["bytes"] / r["wall"] / 1e9 for r in runs("torch", "stream")])
        ref = max(x for x in (gs, ts, 0) if x is not None)
        print(f"\nStreaming read, 1 GiB: Go (bytes.IndexByte per goroutine) {fmt(gs, '.1f')} GB/s wall, {fmt(gsc, '.1f')} GB per "
              f"CPU-second; torch x.sum() {fmt(ts, '.1f')} GB/s wall. Decode is held against the larger wall figure, "
              f"{fmt(ref, '.1f')} GB/s, and, per CPU-second (robust to the load), against Go's {fmt(gsc, '.1f')} GB/cpu-s.\n")
        print(f"#### Decode (7B MLP up, K = 3584 → N = 18944; weight 271 MB float32, 136 MB bfloat16): GB/s of weight read — {cpu}\n")
        print("Bound: min(streaming read, measured wall peak / flops per weight byte (M/2 for float32, M for bfloat16)); "
              "above it the multiplies, not the memory, limit a row block.\n")
        print("| M | dtype | bound GB/s | Go GB/s | % of stream | % of bound | torch GB/s | % of stream | Go/torch | Go GB/cpu-s (% of stream /cpu-s) | Go GFLOP/cpu-s | torch GFLOP/cpu-s |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

        def wgb(r):
            return r["metrics"]["weight-GB/s"] if r["side"] == "go" else r["wbytes"] / r["wall"] / 1e9

        def wgb_cpu(r):
            c = r["metrics"].get("cpu-ns/op")
            return r["metrics"]["weight-GB/s"] * r["wall"] / (c * 1e-9) if c else None

        for m, k, n in DECODE:
            for dt in DTYPES:
                key = f"linear{dkey(dt)}/M={m}/K={k}/N={n}"
                g, t = med([wgb(r) for r in runs("go", key)]), med([wgb(r) for r in runs("torch", key)])
                gc = med([wgb_cpu(r) for r in runs("go", key)])
                pw = peaks[dt][1]
                bound = min(ref, pw / (m / 2 if dt == "float32" else m)) if pw else ref
                print(f"| {m} | {dt} | {bound:.1f} | {fmt(g, '.1f')} | {fmt(g and 100 * g / ref, '.0f')} % | {fmt(g and 100 * g / bound, '.0f')} % | {fmt(t, '.1f')} | "
                      f"{fmt(t and 100 * t / ref, '.0f')} % | {fmt(ratio_med(key, wgb), '.2f')}× | "
                      f"{fmt(gc, '.1f')} ({fmt(gc and gsc and 100 * gc / gsc, '.0f')} %) | "
                      f"{fmt(med([gfl_cpu(r) for r in runs('go', key)]), '.0f')} | {fmt(med([gfl_cpu(r) for r in runs('torch', key)]), '.0f')} |")
                if m == 1 and dt == "float32" and runs("torch", key + "/mv"):
                    t = med([wgb(r) for r in runs("torch", key + "/mv")])
                    rs = med([a["metrics"]["weight-GB/s"] / wgb(b) for a, b in zip(runs("go", key), runs("torch", key + "/mv"))])
                    print(f"| 1, torch.mv | float32 | | | | | {fmt(t, '.1f')} | {fmt(t and 100 * t / ref, '.0f')} % | {fmt(rs, '.2f')}× | | | "
                          f"{fmt(med([gfl_cpu(r) for r in runs('torch', key + '/mv')]), '.0f')} |")

    mem = {r["key"]: r for r in recs if r["group"] == "mem"}
    if "attention" in groups:
        attention_table(runs, ratio_med, gfl, gfl_cpu, mem, cpu)
    if "lmhead" in groups:
        lmhead_table(runs, ratio_med, mem, cpu)
    if "elementwise" in groups:
        elementwise_table(runs, ratio_med, cpu, any(side == "before" for side, _ in by))
    print(f"\nMedians over {len(runs('go', 'fmapeak/avx512'))} interleaved rounds; ratios are medians of the per-round ratios.")


def attention_table(runs, ratio_med, gfl, gfl_cpu, mem, cpu):
    print(f"\n#### Attention, causal, 14 query heads / 2 KV heads, dim 64: ms per call and GFLOP per CPU-second — {cpu}\n")
    print("Forward + backward counts 3.5× the forward's flops on both sides (FlashAttention's accounting), so every "
          "ratio is a time ratio.\n")
    print("| pass | T | Go ms (wall) | torch ms (wall) | Go/torch speed (wall) | Go GFLOP/cpu-s | torch GFLOP/cpu-s | Go/torch (cpu-s) | Go B/op | torch peak RSS Δ |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (t, hq, hkv, d), p in [(a, p) for p in ("fwd", "fwd+bwd") for a in ATTN]:
        key = f"attention/{p}/T={t}/Hq={hq}/Hkv={hkv}/D={d}"
        tm = mem.get(key)
        print(f"| {p} | {t} | {fmt(med([1e3 * r['wall'] for r in runs('go', key)]), '.1f')} | "
              f"{fmt(med([1e3 * r['wall'] for r in runs('torch', key)]), '.1f')} | {fmt(ratio_med(key, gfl), '.2f')}× | "
              f"{fmt(med([gfl_cpu(r) for r in runs('go', key)]), '.1f')} | {fmt(med([gfl_cpu(r) for r in runs('torch', key)]), '.1f')} | "
              f"{fmt(ratio_med(key, gfl_cpu), '.2f')}× | {fmt(med([r.get('alloc') for r in runs('go', key)]), '.0f')} B | "
              f"{fmt(tm and tm['peak_delta'] / 1e6, '.0f')} MB |")



def elementwise_table(runs, ratio_med, cpu, has_before):
    print(f"\n#### LayerNorm, RMSNorm and the GELUs at Qwen2-VL's vision-tower shapes (1024 patches) and Qwen2.5's "
          f"(2048 tokens): GB/s of activations read and written, wall and per CPU-second — {cpu}\n")
    print("Forward: x read, y written; backward: x and dy read, dx written (the norms' dw and db are [D], not counted). "
          "torch's backward is autograd.grad of a kept graph; the norms' Go backward reads the statistics its forward "
          "saved.\n")
    head = "| op | pass | dtype | Go GB/s | torch GB/s | Go/torch (wall) | Go GB/cpu-s | torch GB/cpu-s | Go/torch (cpu-s) |"
    if has_before:
        head += " before GB/cpu-s | before/torch (cpu-s) |"
    print(head)
    print("|---|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if has_before else ""))

    def gbs(r):
        return r["bytes"] / r["wall"] / 1e9 if r["side"] == "torch" else r["metrics"]["MB/s"] / 1e3

    def gbs_cpu(r):
        if r["side"] == "torch":
            return r["bytes"] / r["cpu"] / 1e9 if r.get("cpu") else None
        c = r["metrics"].get("cpu-ns/op")
        return r["metrics"]["MB/s"] / 1e3 * r["wall"] / (c * 1e-9) if c else None

    for op, t, d in ELEMENTWISE:
        for p in ("fwd", "bwd"):
            for dt in DTYPES:
                key = f"{op}/{p}{dkey(dt)}/T={t}/D={d}"
                print(f"| {op} {t}×{d} | {p} | {dt} | {fmt(med([gbs(r) for r in runs('go', key)]), '.1f')} | "
                      f"{fmt(med([gbs(r) for r in runs('torch', key)]), '.1f')} | {fmt(ratio_med(key, gbs), '.2f')}× | "
                      f"{fmt(med([gbs_cpu(r) for r in runs('go', key)]), '.1f')} | {fmt(med([gbs_cpu(r) for r in runs('torch', key)]), '.1f')} | "
                      f"{fmt(ratio_med(key, gbs_cpu), '.2f')}× |" +
                      (f" {fmt(med([gbs_cpu(r) for r in runs('before', key)]), '.1f')} | "
                       f"{fmt(ratio_med(key, gbs_cpu, 'before'), '.2f')}× |" if has_before else ""))


def lmhead_table(runs, ratio_med, mem, cpu):
    n, d, v = LMHEAD
    print(f"\n#### Fused LM head, N = {n}, D = {d}, V = {v}: tokens/s wall and tokens per CPU-second; memory — {cpu}\n")
    print("bfloat16: hidden states and head weight bfloat16 (Go: logits on VDPBF16PS, dhidden and dweight float32; "
          "torch: bfloat16 matmuls, logits.float() before log_softmax).\n")
    print("| pass | dtype | Go tokens/s | torch tokens/s | Go/torch (wall) | Go tokens/cpu-s | torch tokens/cpu-s | Go/torch (cpu-s) | Go/torch float32 (cpu-s) | Go allocated per call | torch peak RSS Δ |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def tok(r):
        return n / r["wall"]

    def tok_cpu(r):
        return n / r["cpu"] if r.get("cpu") else None

    for dt in DTYPES:
        for p in ("fwd", "fwd+bwd"):
            key = f"lmhead/{p}{dkey(dt)}/N={n}/D={d}/V={v}"
            tm = mem.get(key)
            # against torch's float32 head, the issue's reference: the i-th runs of the round
            f32 = med([tok_cpu(a) / tok_cpu(b) for a, b in zip(runs("go", key), runs("torch", f"lmhead/{p}/N={n}/D={d}/V={v}"))
                       if tok_cpu(a) and tok_cpu(b)])
            print(f"| {p} | {dt} | {fmt(med([tok(r) for r in runs('go', key)]), '.0f')} | {fmt(med([tok(r) for r in runs('torch', key)]), '.0f')} | "
                  f"{fmt(ratio_med(key, tok), '.2f')}× | {fmt(med([tok_cpu(r) for r in runs('go', key)]), '.0f')} | "
                  f"{fmt(med([tok_cpu(r) for r in runs('torch', key)]), '.0f')} | {fmt(ratio_med(key, tok_cpu), '.2f')}× | "
                  f"{fmt(f32, '.2f')}× | {fmt(div(med([r.get('alloc') for r in runs('go', key)]), 1e6), '.1f')} MB | "
                  f"{fmt(tm and tm['peak_delta'] / 1e6, '.0f')} MB |")
    print(f"\n[N, V] float32 logits are {4 * n * v / 1e6:.0f} MB; dW [V, D] is {4 * v * d / 1e6:.0f} MB "
          f"(torch allocates it per backward, Go writes a preallocated one).")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("torch")
    t.add_argument("group")
    t.add_argument("--threads", type=int, required=True)
    t.add_argument("--reps", type=int, default=1)
    g = sub.add_parser("gobench")
    g.add_argument("group")
    g.add_argument("threads", type=int)
    g.add_argument("side", nargs="?", default="go")
    m = sub.add_parser("mem")
    m.add_argument("--threads", type=int, required=True)
    mc = sub.add_parser("memchild")
    mc.add_argument("case")
    mc.add_argument("--threads", type=int, required=True)
    tb = sub.add_parser("table")
    tb.add_argument("results")
    a = ap.parse_args()
    if a.cmd == "torch":
        run_torch(a.group, a.threads, a.reps)
    elif a.cmd == "gobench":
        parse_go(a.group, a.threads, a.side)
    elif a.cmd == "mem":
        for case in ("lmhead/fwd", "lmhead/fwd+bwd", "lmhead/fwd/bfloat16", "lmhead/fwd+bwd/bfloat16", "attention"):
            subprocess.run([sys.executable, __file__, "memchild", case, "--threads", str(a.threads)], check=True)
    elif a.cmd == "memchild":
        mem_child(a.case, a.threads)
    else:
        table(a.results)


if __name__ == "__main__":
    main()
