#!/usr/bin/python3
"""PyTorch twin of Hugging Face's Qwen2ForCausalLM and LlamaForCausalLM, for examples/hflm.

Written from transformers' src/transformers/models/qwen2/modeling_qwen2.py and
llama/modeling_llama.py (eager attention) and modeling_rope_utils.py (default, linear and llama3
inverse frequencies), for Debian's python3-torch (1.13; no transformers, no safetensors): the
weights are read from the safetensors files by hand (8-byte little-endian header length, JSON
header, raw little-endian data).

    /usr/bin/python3 scripts/hf_torch_twin.py golden   # writes examples/hflm/testdata/golden.json
    /usr/bin/python3 scripts/hf_torch_twin.py bench    # forward and decode tokens/s at Qwen2.5-0.5B shapes
    /usr/bin/python3 scripts/hf_torch_twin.py compare ROW   # one row of scripts/hflm-vs-torch as JSON

golden makes each case's checkpoint with `go run ./examples/hf init` (the same random weights the
Go test makes), then records the twin's float32 logits, its inverse frequencies, and, in
float64 with autograd, per-token log-probs, entropies and the gradient of a loss of them.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(ROOT, "examples", "hflm", "testdata")


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[a:b]
        dt = info["dtype"]
        if dt == "F32":
            arr = np.frombuffer(raw, "<f4").astype(np.float32)
        elif dt == "BF16":
            arr = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif dt == "F16":
            arr = np.frombuffer(raw, "<f2").astype(np.float32)
        else:
            raise ValueError(f"{name}: dtype {dt}")
        out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return out


def load_dir(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    w = {}
    for f in files:
        w.update(read_safetensors(os.path.join(d, f)))
    return cfg, w


def inv_freq(cfg):
    """modeling_rope_utils: _compute_default_rope_parameters, _compute_linear_scaling_rope_parameters,
    _compute_llama3_parameters (float32 throughout)."""
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    base = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.int64).to(dtype=torch.float) / hd))
    rs = cfg.get("rope_scaling")
    if not rs:
        return inv
    typ = rs.get("rope_type", rs.get("type"))
    if typ == "linear":
        return inv / rs["factor"]
    if typ == "llama3":
        factor = rs["factor"]
        low_freq_factor = rs["low_freq_factor"]
        high_freq_factor = rs["high_freq_factor"]
        old_context_len = rs["original_max_position_embeddings"]
        low_freq_wavelen = old_context_len / low_freq_factor
        high_freq_wavelen = old_context_len / high_freq_factor
        wavelen = 2 * math.pi / inv
        inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv / factor, inv)
        smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
        is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        return torch.where(is_medium, smoothed, inv_freq_llama)
    raise ValueError(f"rope type {typ}")


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Twin:
    """The causal LM of config cfg over weights w (HF names), computing in dtype."""

    def __init__(self, cfg, w, dtype=torch.float32, grad=False):
        self.c = cfg
        self.dtype = dtype
        self.w = {k: v.to(dtype).requires_grad_(grad) for k, v in w.items()}
        self.hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        self.hq = cfg["num_attention_heads"]
        self.hkv = cfg.get("num_key_value_heads") or self.hq
        self.eps = cfg["rms_norm_eps"]
        self.inv = inv_freq(cfg)
        self.tied = cfg.get("tie_word_embeddings", False)

    def lin(self, x, name):
        # nn.Linear (F.linear: one addmm, far faster than x @ W.T on torch 1.13's CPU paths)
        y = torch.nn.functional.linear(x, self.w[name + ".weight"], self.w.get(name + ".bias"))
        ad = getattr(self, "lora", None)
        if ad and getattr(self, "lora_on", True) and name in ad:
            # PEFT's lora.Linear: y + B(A(dropout(x))) * alpha / r
            a, b, scale, p = ad[name]
            y = y + torch.nn.functional.linear(torch.nn.functional.linear(
                torch.nn.functional.dropout(x, p, torch.is_grad_enabled()), a), b) * scale
        return y

    def add_lora(self, r, alpha, dropout, g):
        """PEFT LoRA on every projection (all-linear): A Kaiming-uniform (a = sqrt(5)), B zero;
        the base frozen."""
        self.lora = {}
        for name in [k[: -len(".weight")] for k in self.w if k.endswith("_proj.weight")]:
            out, inp = self.w[name + ".weight"].shape
            bound = 1 / math.sqrt(inp)
            a = ((torch.rand(r, inp, generator=g) * 2 - 1) * bound).to(self.dtype).requires_grad_(True)
            b = torch.zeros(out, r, dtype=self.dtype, requires_grad=True)
            self.lora[name] = (a, b, alpha / r, dropout)
        return [t for a, b, _, _ in self.lora.values() for t in (a, b)]

    def batch_hidden(self, toks, start, cache=None):
        """The final hidden states [B, t, H] of toks [B, t] at positions start…, as transformers
        runs a batch of equal-length rows (no padding); cache holds each layer's [B, Hkv, S, D]
        keys and values."""
        B, t = toks.shape
        x = self.w["model.embed_tokens.weight"][toks]
        cos, sin = self.rope(torch.arange(start, start + t))
        for l in range(self.c["num_hidden_layers"]):
            pfx = f"model.layers.{l}."
            h = self.rmsnorm(x, pfx + "input_layernorm.weight")
            q = self.lin(h, pfx + "self_attn.q_proj").view(B, t, self.hq, self.hd).transpose(1, 2)
            k = self.lin(h, pfx + "self_attn.k_proj").view(B, t, self.hkv, self.hd).transpose(1, 2)
            v = self.lin(h, pfx + "self_attn.v_proj").view(B, t, self.hkv, self.hd).transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            if cache is not None:
                if l in cache:
                    k, v = torch.cat((cache[l][0], k), dim=2), torch.cat((cache[l][1], v), dim=2)
                cache[l] = (k, v)
            rep = self.hq // self.hkv
            kr = k[:, :, None].expand(B, self.hkv, rep, *k.shape[2:]).reshape(B, self.hq, *k.shape[2:])
            vr = v[:, :, None].expand(B, self.hkv, rep, *v.shape[2:]).reshape(B, self.hq, *v.shape[2:])
            tk = kr.shape[2]
            scores = torch.matmul(q, kr.transpose(2, 3)) * (self.hd ** -0.5)
            scores = scores + torch.full((t, tk), torch.finfo(self.dtype).min, dtype=self.dtype).triu(1 + tk - t)
            o = torch.matmul(torch.softmax(scores, dim=-1, dtype=self.dtype), vr).transpose(1, 2).reshape(B, t, -1)
            x = x + self.lin(o, pfx + "self_attn.o_proj")
            h = self.rmsnorm(x, pfx + "post_attention_layernorm.weight")
            x = x + self.lin(torch.nn.functional.silu(self.lin(h, pfx + "mlp.gate_proj")) * self.lin(h, pfx + "mlp.up_proj"), pfx + "mlp.down_proj")
        return self.rmsnorm(x, "model.norm.weight")

    def rmsnorm(self, x, name):
        # Qwen2RMSNorm / LlamaRMSNorm: statistics in float32 (in the float64 twin, float64).
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.w[name] * (x * torch.rsqrt(variance + self.eps))

    def rope(self, positions):
        # Qwen2RotaryEmbedding.forward: float32 angles, cos/sin cast to the compute dtype.
        freqs = (self.inv[:, None].float() @ positions[None, :].float()).transpose(0, 1)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(self.dtype), emb.sin().to(self.dtype)

    def layer_kv(self, l, h, cos, sin):
        p = f"model.layers.{l}.self_attn."
        t = h.shape[0]
        q = self.lin(h, p + "q_proj").view(t, self.hq, self.hd).transpose(0, 1)
        k = self.lin(h, p + "k_proj").view(t, self.hkv, self.hd).transpose(0, 1)
        v = self.lin(h, p + "v_proj").view(t, self.hkv, self.hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        return q, k, v

    def attend(self, l, q, k, v, past):
        """eager_attention_forward with repeat_kv; q holds the last q.shape[1] of k's positions."""
        p = f"model.layers.{l}.self_attn."
        rep = self.hq // self.hkv
        k = k[:, None].expand(self.hkv, rep, *k.shape[1:]).reshape(self.hq, *k.shape[1:])
        v = v[:, None].expand(self.hkv, rep, *v.shape[1:]).reshape(self.hq, *v.shape[1:])
        tq, tk = q.shape[1], k.shape[1]
        scores = torch.matmul(q, k.transpose(1, 2)) * (self.hd ** -0.5)
        mask = torch.full((tq, tk), torch.finfo(self.dtype).min, dtype=self.dtype).triu(1 + tk - tq)
        probs = torch.softmax(scores + mask, dim=-1, dtype=self.dtype)
        out = torch.matmul(probs, v).transpose(0, 1).reshape(tq, self.hq * self.hd)
        return self.lin(out, p + "o_proj")

    def block(self, l, x, cos, sin, cache=None):
        p = f"model.layers.{l}."
        h = self.rmsnorm(x, p + "input_layernorm.weight")
        q, k, v = self.layer_kv(l, h, cos, sin)
        if cache is not None:
            if l in cache:
                k = torch.cat((cache[l][0], k), dim=1)
                v = torch.cat((cache[l][1], v), dim=1)
            cache[l] = (k, v)
        x = x + self.attend(l, q, k, v, cache)
        h = self.rmsnorm(x, p + "post_attention_layernorm.weight")
        mlp = self.lin(torch.nn.functional.silu(self.lin(h, p + "mlp.gate_proj")) * self.lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
        return x + mlp

    def hidden(self, ids, start=0, cache=None):
        x = self.w["model.embed_tokens.weight"][ids]
        cos, sin = self.rope(torch.arange(start, start + len(ids)))
        for l in range(self.c["num_hidden_layers"]):
            x = self.block(l, x, cos, sin, cache)
        return self.rmsnorm(x, "model.norm.weight")

    def head(self):
        return self.w["model.embed_tokens.weight" if self.tied else "lm_head.weight"]

    def logits(self, ids, start=0, cache=None):
        return torch.nn.functional.linear(self.hidden(torch.tensor(ids), start, cache), self.head())


def proj(n):
    """The fixed direction gradients are projected on: cos(0.37 j + 0.1)."""
    return torch.cos(0.37 * torch.arange(n, dtype=torch.float64) + 0.1)


CASES = [
    # name, config file, seed, dtype, shards
    ("qwen2-tied-f32", "qwen2-tied.json", 1, "float32", 1),
    ("qwen2-tied-bf16-sharded", "qwen2-tied.json", 2, "bfloat16", 3),
    ("qwen2-untied-gqa4-f32-sharded", "qwen2-untied.json", 3, "float32", 2),
    ("llama3-rope-bias-bf16-sharded", os.path.join("..", "..", "hfmodel", "testdata", "tiny-llama-config.json"), 4, "bfloat16", 2),
    ("llama-linear-tied-f32", "llama-linear.json", 5, "float32", 1),
]

SEQUENCES = [[1, 5, 9, 14, 3, 27, 8, 60, 11, 42, 7], [4, 90, 2, 33, 17]]
PROMPTS = [[1, 5, 9, 14, 3], [7, 33, 80]]
COMPLETIONS = [[27, 8, 60, 11], [2, 17, 50, 64, 3, 9]]
TEMPERATURE = 0.7


def golden():
    out = {"sequences": SEQUENCES, "prompts": PROMPTS, "completions": COMPLETIONS, "temperature": TEMPERATURE, "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name, cfgfile, seed, dtype, shards in CASES:
            d = os.path.join(tmp, name)
            subprocess.run(["go", "run", "./examples/hf", "init", "-config", os.path.join(TESTDATA, cfgfile), "-out", d,
                            "-seed", str(seed), "-dtype", dtype, "-shards", str(shards)], cwd=ROOT, check=True)
            cfg, w = load_dir(d)
            case = {"name": name, "config": cfgfile, "seed": seed, "dtype": dtype, "shards": shards,
                    "inv_freq": [float(f) for f in inv_freq(cfg)]}
            with torch.no_grad():
                m = Twin(cfg, w)
                # float32 values written with the 9 digits that read back as the same float32
                case["logits"] = [[[float("%.9g" % z) for z in row] for row in m.logits(s).tolist()] for s in SEQUENCES]
            # float64 scores and gradients of loss = Σ cos(0.7 i)·logp_i + Σ sin(0.3 i)·ent_i.
            m = Twin(cfg, w, torch.float64, grad=True)
            logp, ent = [], []
            for p, c in zip(PROMPTS, COMPLETIONS):
                z = m.logits(p + c)[len(p) - 1 : len(p) - 1 + len(c)] / TEMPERATURE
                lsm = torch.log_softmax(z, dim=-1)
                logp.append(lsm[torch.arange(len(c)), torch.tensor(c)])
                ent.append(-(lsm.exp() * lsm).sum(-1))
            logp, ent = torch.cat(logp), torch.cat(ent)
            i = torch.arange(len(logp), dtype=torch.float64)
            loss = (torch.cos(0.7 * i) * logp).sum() + (torch.sin(0.3 * i) * ent).sum()
            loss.backward()
            case["logp"], case["entropy"] = logp.tolist(), ent.tolist()
            case["grads"] = {k: {"norm": float(v.grad.norm()), "dot": float((v.grad.flatten() * proj(v.numel())).sum()),
                                 "first": v.grad.flatten()[:4].tolist()} for k, v in sorted(m.w.items())}
            out["cases"].append(case)
            print(name, "done", file=sys.stderr)
    path = os.path.join(TESTDATA, "golden.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", path, os.path.getsize(path), "bytes", file=sys.stderr)


def bench_config():
    cfg = json.load(open(os.path.join(ROOT, "examples", "hfmodel", "testdata", "qwen2.5-0.5b-instruct-config.json")))
    cfg["num_hidden_layers"] = int(os.environ.get("LAYERS", "24"))
    return cfg


def random_weights(cfg, g):
    """Random weights of cfg's shapes (normal, std initializer_range; norms 1), float32."""
    std = cfg.get("initializer_range", 0.02)
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = H // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    w = {"model.embed_tokens.weight": torch.randn(V, H, generator=g) * std, "model.norm.weight": torch.ones(H)}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        for n, o, i, bias in [("self_attn.q_proj", q, H, True), ("self_attn.k_proj", kv, H, True), ("self_attn.v_proj", kv, H, True),
                              ("self_attn.o_proj", H, q, False), ("mlp.gate_proj", I, H, False), ("mlp.up_proj", I, H, False),
                              ("mlp.down_proj", H, I, False)]:
            w[p + n + ".weight"] = torch.randn(o, i, generator=g) * std
            if bias:
                w[p + n + ".bias"] = torch.randn(o, generator=g) * std
        w[p + "input_layernorm.weight"] = torch.ones(H)
        w[p + "post_attention_layernorm.weight"] = torch.ones(H)
    return w


# The rows of scripts/hflm-vs-torch, as examples/hflm/bench_test.go measures them in Go.
LORA = dict(r=16, alpha=32, dropout=0.05)  # benchLoRA
RL = dict(prompts=2, n=4, prompt_len=64, new=64, micro=2)  # rlPrompts, rlN, rlPromptLen, rlNew, rlMicro


def clocks():
    return time.perf_counter(), time.process_time()


def row_result(row, tokens, t0, c0, **extra):
    t1, c1 = clocks()
    return dict(side="torch", row=row, tokens_per_s=tokens / (t1 - t0), tokens_per_cpu_s=tokens / (c1 - c0), **extra)


def vm_kb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise ValueError(field)


def compare_row(row, m=None):
    """One row of the comparison at Qwen2.5-0.5B's shapes with random weights, as a JSON line:
    forward (T = 256, logits included), lora (LoRA forward + backward of the sum of the
    log-probs of tokens 1…255 of a 256-token sequence), decode (8 rows after 32-token prompts,
    16 greedy steps with the cache), rlstep (one LoRA RL step; its peak resident memory).
    DTYPE=bfloat16 runs the weights, adapters and activations in bfloat16 (torch's bf16
    autograd), the log-softmax in float32."""
    threads = int(os.environ.get("THREADS", "2"))
    torch.set_num_threads(threads)
    reps = int(os.environ.get("REPS", "1"))
    cfg = bench_config()
    V = cfg["vocab_size"]
    g = torch.Generator().manual_seed(0)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[os.environ.get("DTYPE", "float32")]
    if m is None:
        m = Twin(cfg, random_weights(cfg, g), dtype=dtype)
        gc_collect()
    ids = torch.randint(0, V, (256,), generator=g)
    extra = dict(threads=threads, layers=cfg["num_hidden_layers"], torch=torch.__version__, dtype=str(dtype).replace("torch.", ""))
    if row == "forward":
        with torch.no_grad():
            m.logits(ids[:16].tolist())
            t0, c0 = clocks()
            for _ in range(reps):
                m.logits(ids.tolist())
        return row_result(row, reps * 256, t0, c0, **extra), m
    if row == "lora":
        params = m.add_lora(g=g, **LORA) if not getattr(m, "lora", None) else [t for a, b, _, _ in m.lora.values() for t in (a, b)]

        def once():
            logits = torch.nn.functional.linear(m.batch_hidden(ids[None], 0)[0], m.head())
            logp = torch.log_softmax(logits[:-1].float(), dim=-1).gather(-1, ids[1:, None])
            logp.sum().backward()

        once()
        t0, c0 = clocks()
        for _ in range(reps):
            once()
        assert params[1].grad is not None
        return row_result(row, reps * 256, t0, c0, **extra), m
    if row == "decode":
        B, P, N = 8, 32, 16
        prompts = torch.randint(0, V, (B, P), generator=g)
        with torch.no_grad():
            t0 = c0 = 0
            decoded = 0
            for _ in range(reps):
                cache = {}
                last = torch.nn.functional.linear(m.batch_hidden(prompts, 0, cache)[:, -1], m.head())
                ta, ca = clocks()
                for s in range(N):
                    last = torch.nn.functional.linear(m.batch_hidden(last.argmax(-1)[:, None], P + s, cache)[:, -1], m.head())
                tb, cb = clocks()
                t0, c0, decoded = t0 + tb - ta, c0 + cb - ca, decoded + B * N
        return dict(side="torch", row=row, tokens_per_s=decoded / t0, tokens_per_cpu_s=decoded / c0, **extra), m
    if row == "rlstep":
        return rl_step(m, g, extra), m
    raise SystemExit(f"unknown row {row}")


def gc_collect():
    import gc
    gc.collect()


def rl_step(m, g, extra):
    """One LoRA RL step as transformers + PEFT + TRL's GRPO run it on the CPU: generate
    (temperature 1, the cache), the reference's log-probs (adapters off, no grad), then the
    policy's forward and backward in micro-batches (full logits, log_softmax, gather) and one
    AdamW step. Reports the peak resident memory after the model is built (VmHWM reset) and over
    the process."""
    V = m.c["vocab_size"]
    params = m.add_lora(g=g, **LORA)
    opt = torch.optim.AdamW(params, lr=1e-5, weight_decay=0.01)
    gc_collect()
    built = vm_kb("VmHWM")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    t0, c0 = clocks()
    P, n, new = RL["prompt_len"], RL["prompts"] * RL["n"], RL["new"]
    prompts = torch.randint(0, V, (RL["prompts"], P), generator=g).repeat_interleave(RL["n"], 0)
    with torch.no_grad():
        cache = {}
        logits = torch.nn.functional.linear(m.batch_hidden(prompts, 0, cache)[:, -1], m.head())
        out = []
        for s in range(new):
            tok = torch.multinomial(torch.softmax(logits, -1), 1, generator=g)
            out.append(tok)
            if s + 1 < new:
                logits = torch.nn.functional.linear(m.batch_hidden(tok, P + s, cache)[:, -1], m.head())
        del cache
        seqs = torch.cat([prompts] + out, dim=1)  # [n, P + new]

        def logprobs(rows):
            logits = torch.nn.functional.linear(m.batch_hidden(rows, 0)[:, P - 1 : -1], m.head())
            return torch.log_softmax(logits, dim=-1).gather(-1, rows[:, P:, None])[..., 0]

        m.lora_on = False
        ref = torch.cat([logprobs(seqs[i : i + RL["micro"]]) for i in range(0, n, RL["micro"])])
        m.lora_on = True
    adv = torch.tensor([1.0 - 2 * (i % 2) for i in range(n)])
    for i in range(0, n, RL["micro"]):
        rows = slice(i, i + RL["micro"])
        logp = logprobs(seqs[rows])
        ratio = torch.exp(logp - logp.detach())
        kl = torch.exp(ref[rows] - logp) - (ref[rows] - logp) - 1
        loss = ((-adv[rows, None] * ratio + 0.04 * kl).sum()) / (n * new)
        loss.backward()
    opt.step()
    opt.zero_grad()
    t1, c1 = clocks()
    return dict(side="torch", row="rlstep", rows=n, tokens=n * (P + new), step_peak_bytes=vm_kb("VmHWM") * 1024,
                process_peak_bytes=max(built, vm_kb("VmHWM")) * 1024, step_s=t1 - t0, step_cpu_s=c1 - c0, **extra)


def compare():
    """compare ROW…: the rows in one process over one set of weights, in the order given (lora
    adds adapters, so it goes last), one JSON line each."""
    m = None
    for row in sys.argv[2:]:
        r, m = compare_row(row, m)
        print(json.dumps(r), flush=True)


def gobench():
    """Reads `go test -bench` output of examples/hflm on stdin; prints its rows as JSON lines."""
    names = {"BenchmarkForward05B": "forward", "BenchmarkLoRA05B": "lora", "BenchmarkDecode05B": "decode"}
    for line in sys.stdin:
        f = line.split()
        if not f or f[0].split("-")[0] not in names:
            continue
        r = dict(side="go", row=names[f[0].split("-")[0]])
        for v, unit in zip(f[2::2], f[3::2]):
            if unit == "tokens/s":
                r["tokens_per_s"] = float(v)
            elif unit == "tokens/cpu-s":
                r["tokens_per_cpu_s"] = float(v)
        print(json.dumps(r), flush=True)


def table():
    """The medians of each row and side in a results file and go/torch ratios (higher is better
    for Go: torch's peak over Go's for memory), as a Markdown table."""
    rows = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else float("nan")
    out = ["| row | PyTorch | hflm | hflm / PyTorch | runs |", "|---|---:|---:|---:|---:|"]
    for row, label in [("forward", "forward T=256, tokens/s"), ("lora", "LoRA forward+backward T=256, tokens/s"),
                       ("decode", "batched decode (8 rows), tokens/s")]:
        for key, unit in [("tokens_per_s", "wall"), ("tokens_per_cpu_s", "per CPU-second")]:
            t = med([r[key] for r in rows if r["row"] == row and r["side"] == "torch" and key in r])
            go = med([r[key] for r in rows if r["row"] == row and r["side"] == "go" and key in r])
            n = sum(1 for r in rows if r["row"] == row and r["side"] == "go")
            out.append(f"| {label} ({unit}) | {t:.1f} | {go:.1f} | {go / t:.2f}× | {n} |")
    for key, label in [("step_peak_bytes", "peak RSS of one LoRA RL step, GB"), ("process_peak_bytes", "peak RSS of the process, GB")]:
        t = med([r[key] for r in rows if r["row"] == "rlstep" and r["side"] == "torch"])
        go = med([r[key] for r in rows if r["row"] == "rlstep" and r["side"] == "go"])
        n = sum(1 for r in rows if r["row"] == "rlstep" and r["side"] == "go")
        out.append(f"| {label} | {t / 1e9:.2f} | {go / 1e9:.2f} | {t / go:.2f}× | {n} |")
    t = med([r["step_s"] for r in rows if r["row"] == "rlstep" and r["side"] == "torch"])
    go = med([r["step_s"] for r in rows if r["row"] == "rlstep" and r["side"] == "go"])
    out.append(f"| one LoRA RL step, s (wall) | {t:.1f} | {go:.1f} | {t / go:.2f}× | |")
    print("\n".join(out))


def bench():
    """Forward and decode tokens/s (the compare rows forward and decode in one process)."""
    f, m = compare_row("forward")
    print(json.dumps([f, compare_row("decode", m)[0]]))


if __name__ == "__main__":
    {"golden": golden, "bench": bench, "compare": compare, "gobench": gobench, "table": table}[sys.argv[1] if len(sys.argv) > 1 else "golden"]()
