#!/usr/bin/env python3
"""PyTorch twin of the example policy (examples/internal/vlm) and of the VPPO step of
examples/trainer/bench_test.go (BenchmarkVPPOStep), eager mode, CPU.

    VLM_TWIN_DIR=/tmp/twin go test -run TestTwinFixture ./examples/trainer
    python3 scripts/vlm_torch_twin.py run /tmp/twin [--threads 2] [--steps 5]

It loads the weights Go wrote (safetensors, Go's [in, out] layout), checks that it is the same
model (parameter count; logits, the gradients of sum(R * logits) and greedy KV-cached responses
against Go's), then times the step: rollout with a KV cache (16 prompts x 8 responses of 24
tokens), three log-prob passes (old with entropies, perturbed images, reference) in
micro-batches of 32, and the update (two mini-batches of 64 rows, micro-batches of 16, forward,
log-probs, the clipped-ratio surrogate's backward, gradient clipping, AdamW). It prints one
JSON line of medians (scripts/vlm-vs-torch reads it).
"""
import argparse
import json
import math
import os
import statistics
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# Shapes of the workload (bench_test.go's twin constants).
ROWS, N, RESP, MAX_PROMPT, MICRO_EXP, MINI_ROWS, MICRO_UPD, LR = 128, 8, 24, 19, 32, 64, 16, 2e-4
IMAGE, PATCH, CHANNELS, DIM, LAYERS, HEADS, MLP, VOCAB = 32, 8, 3, 64, 2, 4, 128, 73
NP = (IMAGE // PATCH) ** 2
MAX_LEN = MAX_PROMPT + RESP
BOS, EOS, PAD = 1, 2, 0


def load_safetensors(path):
    """Reads an F32 safetensors file (8-byte header length, JSON header, raw little-endian data)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        lo, hi = info["data_offsets"]
        buf = bytearray(data[8 + n + lo : 8 + n + hi])
        out[name] = torch.frombuffer(buf, dtype=torch.float32).reshape(info["shape"])
    return out


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM, eps=1e-5)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.o = nn.Linear(DIM, DIM)
        self.ln2 = nn.LayerNorm(DIM, eps=1e-5)
        self.w1 = nn.Linear(DIM, MLP)
        self.w2 = nn.Linear(MLP, DIM)

    def mlp(self, x):
        u = self.w1(self.ln2(x))
        return self.w2(u * torch.sigmoid(1.702 * u))  # GELU's sigmoid form, as in Go


def split_heads(t):  # [B, S, D] -> [B, H, S, dh]
    b, s, _ = t.shape
    return t.view(b, s, HEADS, DIM // HEADS).transpose(1, 2)


def merge_heads(t):  # [B, H, S, dh] -> [B, S, D]
    b, _, s, _ = t.shape
    return t.transpose(1, 2).reshape(b, s, DIM)


def attend(q, k, v, mask):
    """Softmax attention; mask [.., S_q, S_k] bool, True where a key may be seen."""
    sc = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(DIM // HEADS))
    sc = sc.masked_fill(~mask, float("-inf"))
    return torch.softmax(sc, dim=-1) @ v


def seq_mask(s):
    """The model's mask over S = NP + L positions: patches see patches, text sees patches and
    text up to itself."""
    i = torch.arange(s).unsqueeze(1)
    j = torch.arange(s).unsqueeze(0)
    return (j < NP) | ((i >= NP) & (j <= i))


class VLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Linear(PATCH * PATCH * CHANNELS, DIM)
        self.patch_pos = nn.Parameter(torch.zeros(NP, DIM))
        self.tok_emb = nn.Parameter(torch.zeros(VOCAB, DIM))
        self.tok_pos = nn.Parameter(torch.zeros(MAX_LEN, DIM))
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.lnf = nn.LayerNorm(DIM, eps=1e-5)
        self.head = nn.Linear(DIM, VOCAB)

    def load_go(self, w):
        """Copies Go's parameters (linear weights [in, out]) into this module."""
        lin = lambda m, p: (m.weight.copy_(w[p + ".w"].T), m.bias.copy_(w[p + ".b"]))
        with torch.no_grad():
            lin(self.patch, "patch")
            self.patch_pos.copy_(w["patch.pos"])
            self.tok_emb.copy_(w["tok.emb"])
            self.tok_pos.copy_(w["tok.pos"])
            for i, b in enumerate(self.blocks):
                p = f"block{i}."
                b.ln1.weight.copy_(w[p + "ln1.g"]), b.ln1.bias.copy_(w[p + "ln1.b"])
                b.qkv.weight.copy_(w[p + "attn.wqkv"].T), b.qkv.bias.copy_(w[p + "attn.bqkv"])
                b.o.weight.copy_(w[p + "attn.wo"].T), b.o.bias.copy_(w[p + "attn.bo"])
                b.ln2.weight.copy_(w[p + "ln2.g"]), b.ln2.bias.copy_(w[p + "ln2.b"])
                b.w1.weight.copy_(w[p + "mlp.w1"].T), b.w1.bias.copy_(w[p + "mlp.b1"])
                b.w2.weight.copy_(w[p + "mlp.w2"].T), b.w2.bias.copy_(w[p + "mlp.b2"])
            self.lnf.weight.copy_(w["lnf.g"]), self.lnf.bias.copy_(w["lnf.b"])
            lin(self.head, "head")

    def go_grads(self):
        """The gradients in Go's names and layout."""
        g = {"patch.w": self.patch.weight.grad.T, "patch.b": self.patch.bias.grad,
             "patch.pos": self.patch_pos.grad, "tok.emb": self.tok_emb.grad, "tok.pos": self.tok_pos.grad,
             "lnf.g": self.lnf.weight.grad, "lnf.b": self.lnf.bias.grad,
             "head.w": self.head.weight.grad.T, "head.b": self.head.bias.grad}
        for i, b in enumerate(self.blocks):
            p = f"block{i}."
            g.update({p + "ln1.g": b.ln1.weight.grad, p + "ln1.b": b.ln1.bias.grad,
                      p + "attn.wqkv": b.qkv.weight.grad.T, p + "attn.bqkv": b.qkv.bias.grad,
                      p + "attn.wo": b.o.weight.grad.T, p + "attn.bo": b.o.bias.grad,
                      p + "ln2.g": b.ln2.weight.grad, p + "ln2.b": b.ln2.bias.grad,
                      p + "mlp.w1": b.w1.weight.grad.T, p + "mlp.b1": b.w1.bias.grad,
                      p + "mlp.w2": b.w2.weight.grad.T, p + "mlp.b2": b.w2.bias.grad})
        return g

    def embed_images(self, images):
        """images [B, H, W, C] float 0..255 -> patch tokens [B, NP, D] (raster order, each patch
        row-major with channels innermost, as in Go)."""
        b = images.shape[0]
        g = IMAGE // PATCH
        x = images.view(b, g, PATCH, g, PATCH, CHANNELS).permute(0, 1, 3, 2, 4, 5)
        x = x.reshape(b, NP, PATCH * PATCH * CHANNELS) * (2.0 / 255) - 1
        return self.patch(x) + self.patch_pos

    def forward(self, images, tokens):
        """Full forward: logits [B, L, V] of the text positions."""
        b, l = tokens.shape
        x = torch.cat([self.embed_images(images), self.tok_emb[tokens] + self.tok_pos[:l]], dim=1)
        mask = seq_mask(NP + l)
        for blk in self.blocks:
            q, k, v = split_heads_qkv(blk.qkv(blk.ln1(x)))
            x = x + blk.o(merge_heads(attend(q, k, v, mask)))
            x = x + blk.mlp(x)
        return self.head(self.lnf(x[:, NP:]))


def split_heads_qkv(qkv):
    q, k, v = qkv.split(DIM, dim=-1)
    return split_heads(q), split_heads(k), split_heads(v)


@torch.no_grad()
def generate(model, images, prompts, plen, new_tokens, greedy=False, gen=None):
    """KV-cached sampling: prefill image + right-padded prompts, then one token per row per step
    at each row's own position (rows have different prompt lengths), attending over the cache
    with a per-row mask. Temperature 1, no top-p/top-k cut (the benchmark's settings)."""
    b = images.shape[0]
    s_max = NP + MAX_LEN
    kc = [torch.zeros(b, HEADS, s_max, DIM // HEADS) for _ in range(LAYERS)]
    vc = [torch.zeros(b, HEADS, s_max, DIM // HEADS) for _ in range(LAYERS)]
    lp = prompts.shape[1]
    x = torch.cat([model.embed_images(images), model.tok_emb[prompts] + model.tok_pos[:lp]], dim=1)
    mask = seq_mask(NP + lp)
    for li, blk in enumerate(model.blocks):
        q, k, v = split_heads_qkv(blk.qkv(blk.ln1(x)))
        kc[li][:, :, : NP + lp], vc[li][:, :, : NP + lp] = k, v
        x = x + blk.o(merge_heads(attend(q, k, v, mask)))
        x = x + blk.mlp(x)
    rows = torch.arange(b)
    last = x[rows, NP + plen - 1]  # each row's last prompt token
    out = torch.empty(b, new_tokens, dtype=torch.long)
    pos = plen.clone()  # text position of the next token
    keys = torch.arange(s_max)
    for step in range(new_tokens):
        logits = model.head(model.lnf(last))
        if greedy:
            tok = logits.argmax(-1)
        else:
            tok = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen).squeeze(1)
        out[:, step] = tok
        if step == new_tokens - 1:
            break
        h = (model.tok_emb[tok] + model.tok_pos[pos]).unsqueeze(1)  # [B, 1, D]
        seq = NP + pos
        visible = (keys[: seq.max() + 1].unsqueeze(0) <= seq.unsqueeze(1)).view(b, 1, 1, -1)
        for li, blk in enumerate(model.blocks):
            q, k, v = split_heads_qkv(blk.qkv(blk.ln1(h)))
            kc[li][rows, :, seq] = k[:, :, 0]
            vc[li][rows, :, seq] = v[:, :, 0]
            n = int(seq.max()) + 1
            h = h + blk.o(merge_heads(attend(q, kc[li][:, :, :n], vc[li][:, :, :n], visible)))
            h = h + blk.mlp(h)
        last = h[:, 0]
        pos = pos + 1
    return out


def batch_tokens(prompts, plen, resp):
    """tokens [B, MAX_LEN] (prompt, response, PAD) and the response positions' indices."""
    b = prompts.shape[0]
    tokens = torch.full((b, MAX_LEN), PAD, dtype=torch.long)
    tokens[:, :MAX_PROMPT] = prompts
    idx = plen.unsqueeze(1) + torch.arange(RESP).unsqueeze(0)  # response token positions
    tokens.scatter_(1, idx, resp)
    return tokens, idx - 1  # logits at position p predict token p+1


def response_logp(model, images, tokens, pred_idx, targets, entropy=False):
    logits = model(images, tokens)
    lg = logits.gather(1, pred_idx.unsqueeze(-1).expand(-1, -1, VOCAB))  # [B, RESP, V]
    logp_all = torch.log_softmax(lg, dim=-1)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if entropy:
        return logp, -(logp_all.exp() * logp_all).sum(-1)
    return logp, None


def vppo_step(policy, ref, opt, images, perturbed, prompts, plen, gen):
    t0 = time.perf_counter()
    resp = generate(policy, images, prompts, plen, RESP, gen=gen)
    tokens, pred_idx = batch_tokens(prompts, plen, resp)
    t1 = time.perf_counter()
    with torch.no_grad():
        old, aug, refl = [], [], []
        for lo in range(0, ROWS, MICRO_EXP):
            sl = slice(lo, lo + MICRO_EXP)
            old.append(response_logp(policy, images[sl], tokens[sl], pred_idx[sl], resp[sl], entropy=True)[0])
        for lo in range(0, ROWS, MICRO_EXP):
            sl = slice(lo, lo + MICRO_EXP)
            aug.append(response_logp(policy, perturbed[sl], tokens[sl], pred_idx[sl], resp[sl])[0])
        for lo in range(0, ROWS, MICRO_EXP):
            sl = slice(lo, lo + MICRO_EXP)
            refl.append(response_logp(ref, images[sl], tokens[sl], pred_idx[sl], resp[sl])[0])
        old = torch.cat(old)
    t2 = time.perf_counter()
    adv = 1.0 - 2.0 * (torch.arange(ROWS) % 2).float()  # +-1 by row, as in Go
    for mlo in range(0, ROWS, MINI_ROWS):
        opt.zero_grad(set_to_none=False)
        for lo in range(mlo, mlo + MINI_ROWS, MICRO_UPD):
            sl = slice(lo, lo + MICRO_UPD)
            logp, _ = response_logp(policy, images[sl], tokens[sl], pred_idx[sl], resp[sl], entropy=True)
            loss = -(adv[sl].unsqueeze(1) * torch.exp(logp - old[sl])).sum() / (MINI_ROWS * RESP)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, resp.numel()


def check(model, inp, w):
    """Same model as Go: parameter count, logits, gradients, greedy KV-cached responses."""
    n = sum(p.numel() for p in model.parameters())
    go_n = sum(t.numel() for t in w.values())
    assert n == go_n, f"parameter count {n} != Go's {go_n}"
    k = inp["check.tokens"].shape[0]
    images = inp["images"][:k]
    tokens = inp["check.tokens"].long()
    logits = model(images, tokens)
    dl = (logits - inp["check.logits"]).abs().max().item()
    model.zero_grad()
    (logits * inp["check.R"]).sum().backward()
    dg = 0.0
    for name, g in model.go_grads().items():
        ref = inp["check.grad." + name]
        dg = max(dg, ((g - ref).abs().max() / ref.abs().max().clamp_min(1e-12)).item())
    model.zero_grad()
    greedy = generate(model, images, inp["prompts"][:k].long(), inp["prompt_len"][:k].long(), RESP, greedy=True)
    same = (greedy == inp["check.greedy"].long()).float().mean().item()
    ok = dl < 1e-4 and dg < 1e-4 and same == 1.0
    print(f"twin check: {n} parameters (Go {go_n}); max |logits - Go| {dl:.2e}; max relative gradient "
          f"difference {dg:.2e}; greedy KV-cached tokens equal to Go's: {100 * same:.1f}%: "
          f"{'OK' if ok else 'MISMATCH'}", file=sys.stderr)
    return ok


def run(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    w = load_safetensors(os.path.join(args.dir, "policy.safetensors"))
    inp = load_safetensors(os.path.join(args.dir, "inputs.safetensors"))
    policy, ref = VLM(), VLM()
    policy.load_go(w)
    ref.load_go(load_safetensors(os.path.join(args.dir, "ref.safetensors")))
    ref.requires_grad_(False)
    if args.check and not check(policy, inp, w):
        sys.exit(1)
    decay = [p for p in policy.parameters() if p.dim() >= 2]
    no_decay = [p for p in policy.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 1e-2}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.999), eps=1e-8)
    images, perturbed = inp["images"], inp["perturbed"]
    prompts, plen = inp["prompts"].long(), inp["prompt_len"].long()
    gen = torch.Generator().manual_seed(1)
    vppo_step(policy, ref, opt, images, perturbed, prompts, plen, gen)  # warm-up
    ro, lp, up = [], [], []
    for _ in range(args.steps):
        a, b, c, generated = vppo_step(policy, ref, opt, images, perturbed, prompts, plen, gen)
        ro.append(a), lp.append(b), up.append(c)
    st = [a + b + c for a, b, c in zip(ro, lp, up)]
    text = ROWS * MAX_LEN
    med = statistics.median
    print(json.dumps({
        "impl": "torch", "threads": torch.get_num_threads(), "version": torch.__version__,
        "rollout-tok/s": generated / med(ro), "logprob-tok/s": 3 * text / med(lp),
        "update-tok/s": text / med(up), "step-tok/s": text / med(st),
        "rollout-ms": 1e3 * med(ro), "logprob-ms": 1e3 * med(lp), "update-ms": 1e3 * med(up), "step-ms": 1e3 * med(st),
    }))


def gobench(args):
    """Turns `go test -bench VPPOStep` output (stdin) into the same JSON line."""
    for line in sys.stdin:
        f = line.split()
        if f and f[0].startswith("BenchmarkVPPOStep"):
            row = {"impl": "go", "threads": args.threads}
            for v, unit in zip(f[2::2], f[3::2]):
                row[unit] = float(v)
            print(json.dumps(row))
            return
    sys.exit("no BenchmarkVPPOStep line in the go test output")


def table(args):
    """Medians over the rounds, as a Markdown table."""
    rows = [json.loads(l) for l in open(args.file)]
    med = lambda impl, th, k: statistics.median(r[k] for r in rows if r["impl"] == impl and r["threads"] == th)
    cols = [("go", 2), ("torch", 2), ("go", 1), ("torch", 1)]
    name = {"go": "Go", "torch": "PyTorch " + next(r["version"] for r in rows if r["impl"] == "torch")}
    head = [f"{name[i]}, {t} thread{'s' if t > 1 else ''}" for i, t in cols]
    print("| step phase (default shapes) | " + " | ".join(head) + " | Go / PyTorch, 2 threads | Go / PyTorch, 1 thread |")
    print("|---" * (len(cols) + 3) + "|")
    for label, k, lower in [("rollout, KV cache (generated tokens/s)", "rollout-tok/s", False),
                            ("3 log-prob passes (tokens/s)", "logprob-tok/s", False),
                            ("update: fwd + bwd + AdamW (tokens/s)", "update-tok/s", False),
                            ("whole step (tokens/s)", "step-tok/s", False),
                            ("whole step (ms)", "step-ms", True)]:
        v = [med(i, t, k) for i, t in cols]
        ratio = lambda g, p: p / g if lower else g / p
        fmt = (lambda x: f"{x:.0f}")
        print(f"| {label} | " + " | ".join(fmt(x) for x in v) + f" | {ratio(v[0], v[1]):.1f}x | {ratio(v[2], v[3]):.1f}x |")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="check the twin against Go's fixture and time the step")
    r.add_argument("dir")
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--steps", type=int, default=5)
    r.add_argument("--check", type=int, default=1)
    g = sub.add_parser("gobench", help="go test -bench output on stdin -> JSON line")
    g.add_argument("threads", type=int)
    t = sub.add_parser("table", help="JSON lines -> Markdown table of medians")
    t.add_argument("file")
    args = ap.parse_args()
    {"run": run, "gobench": gobench, "table": table}[args.cmd](args)


if __name__ == "__main__":
    main()
