#!/usr/bin/python3
"""PyTorch twin of Hugging Face's Qwen2VLForConditionalGeneration and
Qwen2_5_VLForConditionalGeneration, for examples/qwenvl.

Written from transformers' src/transformers/models/qwen2_vl/modeling_qwen2_vl.py and
qwen2_5_vl/modeling_qwen2_5_vl.py (eager attention; the vision attention split by cu_seqlens as
the non-flash path does) for Debian's python3-torch 1.13 (no transformers): PatchEmbed's Conv3d,
rot_pos_emb, get_window_index, the vision blocks (LayerNorm + quick_gelu MLP, or RMSNorm +
gated SiLU MLP), the PatchMerger, get_rope_index, masked_scatter of the features into the token
embeddings, the Qwen2 decoder with apply_multimodal_rotary_pos_emb, and the LM head.

    /usr/bin/python3 scripts/qwen2vl_torch_twin.py         # writes examples/qwenvl/testdata/model_golden.json
    /usr/bin/python3 scripts/qwen2vl_torch_twin.py golden-bf16  # model_golden_bf16.json (the twin in bfloat16)
    /usr/bin/python3 scripts/qwen2vl_torch_twin.py bench   # the vision tower's throughput (BenchmarkVisionTower's twin)
    /usr/bin/python3 scripts/qwen2vl_torch_twin.py forward # Qwen2.5-VL-3B's prefill (BenchmarkForward3B's twin;
                                                           # scripts/qwenvl-vs-torch runs both sides)

Each case's checkpoint comes from `go run ./examples/hf init` (the weights the Go test makes).
The pixel values are a closed formula both sides compute exactly: ((7919 i + 13) mod 2001 − 1000)
/ 500 rounded to float32. The twin records in float32 the tower's output, the position ids and
the logits, and in float64 with autograd the log-probs of a completion and the gradient of every
weight of a loss of them.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_torch_twin import read_safetensors, rotate_half  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(ROOT, "examples", "qwenvl", "testdata")


def canonical(name):
    if name.startswith("model.language_model."):
        return "model." + name[len("model.language_model."):]
    if name.startswith("model.visual."):
        return name[len("model."):]
    return name


def load_dir(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    w = {canonical(k): v for k, v in read_safetensors(os.path.join(d, "model.safetensors")).items()}
    text = dict(cfg)
    text.update(cfg.get("text_config", {}))
    return cfg, text, w


def pixels(rows, cols):
    i = torch.arange(rows * cols, dtype=torch.int64)
    return (((i * 7919 + 13) % 2001 - 1000).to(torch.float64) / 500.0).to(torch.float32).view(rows, cols)


class Twin:
    def __init__(self, cfg, text, w, dtype, grad=False, hf_casts=False):
        self.cfg, self.text, self.dtype = cfg, text, dtype
        # hf_casts: Hugging Face's float32 islands in a bfloat16 model (RMSNorm's statistics,
        # the vision rotary embedding); the benchmark's bfloat16 runs leave them out.
        self.hf_casts = hf_casts
        self.vc = cfg["vision_config"]
        self.qwen25 = cfg["model_type"] == "qwen2_5_vl"
        self.w = {k: v.to(dtype).requires_grad_(grad) for k, v in w.items()}
        self.merge = self.vc.get("spatial_merge_size", 2)

    def lin(self, x, name):
        return F.linear(x, self.w[name + ".weight"], self.w.get(name + ".bias"))

    def rms(self, x, name, eps):
        if self.hf_casts:  # Qwen2RMSNorm: float32, then back to the input's dtype
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
            return self.w[name + ".weight"] * h.to(x.dtype)
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.w[name + ".weight"] * (x * torch.rsqrt(variance + eps))

    def vnorm(self, x, name):
        if self.qwen25:  # Qwen2RMSNorm(eps=1e-6)
            return self.rms(x, name, 1e-6)
        return F.layer_norm(x, (x.shape[-1],), self.w[name + ".weight"], self.w[name + ".bias"], 1e-6)

    # ---- vision tower ----
    def rot_pos_emb(self, grids, head_dim):
        m = self.merge
        pos = []
        for t, h, w in grids:
            hp = torch.arange(h).unsqueeze(1).expand(-1, w).reshape(h // m, m, w // m, m).permute(0, 2, 1, 3).flatten()
            wp = torch.arange(w).unsqueeze(0).expand(h, -1).reshape(h // m, m, w // m, m).permute(0, 2, 1, 3).flatten()
            pos.append(torch.stack([hp, wp], dim=-1).repeat(t, 1))
        pos = torch.cat(pos, dim=0)
        dim = head_dim // 2
        inv = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        seq = torch.arange(max(max(g[1], g[2]) for g in grids), dtype=torch.float)
        full = torch.outer(seq, inv)
        return full[pos].flatten(1)

    def window_index(self, grids):
        m = self.merge
        unit = m * m
        ws = self.vc["window_size"] // m // self.vc["patch_size"]
        index, cu, base = [], [0], 0
        for t, h, w in grids:
            lh, lw = h // m, w // m
            idx = torch.arange(t * lh * lw).reshape(t, lh, lw)
            ph, pw = ws - lh % ws, ws - lw % ws
            nh, nw = (lh + ph) // ws, (lw + pw) // ws
            p = F.pad(idx, (0, pw, 0, ph), "constant", -100)
            p = p.reshape(t, nh, ws, nw, ws).permute(0, 1, 3, 2, 4).reshape(t, nh * nw, ws, ws)
            seqlens = (p != -100).sum([2, 3]).reshape(-1)
            p = p.reshape(-1)
            index.append(p[p != -100] + base)
            cu.extend((seqlens.cumsum(0) * unit + cu[-1]).tolist())
            base += t * lh * lw
        return torch.cat(index), torch.unique_consecutive(torch.tensor(cu, dtype=torch.int32))

    def vision_attn(self, x, name, cu, cos, sin, heads):
        n = x.shape[0]
        q, k, v = self.lin(x, name + ".qkv").reshape(n, 3, heads, -1).permute(1, 0, 2, 3).unbind(0)
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
        if self.hf_casts:  # apply_rotary_pos_emb_vision: float32, then back
            qf, kf, cf, sf = q.float(), k.float(), cos.float(), sin.float()
            q = (qf * cf + rotate_half(qf) * sf).to(q.dtype)
            k = (kf * cf + rotate_half(kf) * sf).to(k.dtype)
        else:
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # [heads, n, hd]
        lengths = (cu[1:] - cu[:-1]).tolist()
        outs = []
        for qq, kk, vv in zip(q.split(lengths, 1), k.split(lengths, 1), v.split(lengths, 1)):
            s = torch.matmul(qq, kk.transpose(1, 2)) * (qq.shape[-1] ** -0.5)
            outs.append(torch.matmul(torch.softmax(s, dim=-1, dtype=self.dtype), vv))
        o = torch.cat(outs, dim=1).transpose(0, 1).reshape(n, -1)
        return self.lin(o, name + ".proj")

    def vision(self, px, grids):
        vc = self.vc
        dim = vc["hidden_size"] if self.qwen25 else vc["embed_dim"]
        heads = vc["num_heads"]
        C, T, P = vc.get("in_chans", 3), vc.get("temporal_patch_size", 2), vc["patch_size"]
        x = F.conv3d(px.to(self.dtype).view(-1, C, T, P, P), self.w["visual.patch_embed.proj.weight"], stride=(T, P, P)).view(-1, dim)
        rot = self.rot_pos_emb(grids, dim // heads)
        n = x.shape[0]
        unit = self.merge ** 2
        g = torch.tensor(grids)
        cu = F.pad(torch.repeat_interleave(g[:, 1] * g[:, 2], g[:, 0]).cumsum(0, dtype=torch.int32), (1, 0), value=0)
        if self.qwen25:
            widx, cuw = self.window_index(grids)
            x = x.reshape(n // unit, unit, -1)[widx].reshape(n, -1)
            rot = rot.reshape(n // unit, unit, -1)[widx].reshape(n, -1)
        emb = torch.cat((rot, rot), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        if not self.hf_casts:
            cos, sin = cos.to(self.dtype), sin.to(self.dtype)
        for i in range(vc["depth"]):
            p = f"visual.blocks.{i}."
            cu_now = cu
            if self.qwen25 and i not in vc["fullatt_block_indexes"]:
                cu_now = cuw
            x = x + self.vision_attn(self.vnorm(x, p + "norm1"), p + "attn", cu_now, cos, sin, heads)
            h = self.vnorm(x, p + "norm2")
            if self.qwen25:
                act = F.silu if vc.get("hidden_act", "silu") == "silu" else None
                h = self.lin(act(self.lin(h, p + "mlp.gate_proj")) * self.lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
            else:
                a = self.lin(h, p + "mlp.fc1")
                a = a * torch.sigmoid(1.702 * a)  # QuickGELUActivation
                h = self.lin(a, p + "mlp.fc2")
            x = x + h
        x = self.vnorm(x, "visual.merger.ln_q").view(-1, dim * unit)
        x = self.lin(F.gelu(self.lin(x, "visual.merger.mlp.0")), "visual.merger.mlp.2")
        if self.qwen25:
            x = x[torch.argsort(widx)]
        return x

    # ---- get_rope_index (one row, no padding) ----
    def rope_index(self, ids, image_grids, video_grids):
        c, m = self.cfg, self.merge
        tokens = list(ids)
        starts = [i for i, t in enumerate(tokens) if t == c["vision_start_token_id"]]
        kinds = [tokens[i + 1] for i in starts]
        n_img, n_vid = kinds.count(c["image_token_id"]), kinds.count(c["video_token_id"])
        pos, st, ii, vi = [], 0, 0, 0
        ri, rv = n_img, n_vid
        for _ in range(n_img + n_vid):
            ed_i = tokens.index(c["image_token_id"], st) if c["image_token_id"] in tokens and ri > 0 else len(tokens) + 1
            ed_v = tokens.index(c["video_token_id"], st) if c["video_token_id"] in tokens and rv > 0 else len(tokens) + 1
            if ed_i < ed_v:
                t, h, w = image_grids[ii]
                spg = 0
                ii, ri, ed = ii + 1, ri - 1, ed_i
            else:
                t, h, w = video_grids[vi]
                spg = 1.0
                vi, rv, ed = vi + 1, rv - 1, ed_v
            lt, lh, lw = t, h // m, w // m
            text_len = ed - st
            st_idx = pos[-1].max() + 1 if pos else 0
            pos.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)
            if self.qwen25:
                tt = (torch.arange(lt).view(-1, 1).expand(-1, lh * lw) * torch.as_tensor(spg) * self.vc["tokens_per_second"]).long().flatten()
            else:
                tt = torch.arange(lt).view(-1, 1).expand(-1, lh * lw).flatten()
            hh = torch.arange(lh).view(1, -1, 1).expand(lt, -1, lw).flatten()
            ww = torch.arange(lw).view(1, 1, -1).expand(lt, lh, -1).flatten()
            pos.append(torch.stack([tt, hh, ww]) + text_len + st_idx)
            st = ed + lt * lh * lw
        if st < len(tokens):
            st_idx = pos[-1].max() + 1 if pos else 0
            pos.append(torch.arange(len(tokens) - st).view(1, -1).expand(3, -1) + st_idx)
        p = torch.cat(pos, dim=1).reshape(3, -1)
        return p, int(p.max() + 1 - len(tokens))

    # ---- language model ----
    def lm(self, x, positions, last=False):
        tc = self.text
        hq, hkv = tc["num_attention_heads"], tc["num_key_value_heads"]
        hd = tc["hidden_size"] // hq
        eps = tc["rms_norm_eps"]
        sec = (tc.get("rope_scaling") or self.cfg["rope_scaling"])["mrope_section"]
        inv = 1.0 / (tc["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
        freqs = (inv[None, :, None].float() @ positions[:, None, :].float()).transpose(1, 2)  # [3, n, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        cos = torch.cat([c[i % 3] for i, c in enumerate(cos.split(sec * 2, dim=-1))], dim=-1).to(self.dtype)[None]
        sin = torch.cat([s[i % 3] for i, s in enumerate(sin.split(sec * 2, dim=-1))], dim=-1).to(self.dtype)[None]
        n = x.shape[0]
        mask = torch.full((n, n), torch.finfo(self.dtype).min, dtype=self.dtype).triu(1)
        rep = hq // hkv
        for l in range(tc["num_hidden_layers"]):
            p = f"model.layers.{l}."
            h = self.rms(x, p + "input_layernorm", eps)
            q = self.lin(h, p + "self_attn.q_proj").view(n, hq, hd).transpose(0, 1)
            k = self.lin(h, p + "self_attn.k_proj").view(n, hkv, hd).transpose(0, 1)
            v = self.lin(h, p + "self_attn.v_proj").view(n, hkv, hd).transpose(0, 1)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = k[:, None].expand(hkv, rep, n, hd).reshape(hq, n, hd)
            v = v[:, None].expand(hkv, rep, n, hd).reshape(hq, n, hd)
            s = torch.matmul(q, k.transpose(1, 2)) * (hd ** -0.5) + mask
            o = torch.matmul(torch.softmax(s, dim=-1, dtype=self.dtype), v).transpose(0, 1).reshape(n, -1)
            x = x + self.lin(o, p + "self_attn.o_proj")
            h = self.rms(x, p + "post_attention_layernorm", eps)
            x = x + self.lin(F.silu(self.lin(h, p + "mlp.gate_proj")) * self.lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
        if last:  # prefill: the head reads the last position only
            x = x[-1:]
        x = self.rms(x, "model.norm", eps)
        tied = self.cfg.get("tie_word_embeddings", self.text.get("tie_word_embeddings", False))
        return F.linear(x, self.w["model.embed_tokens.weight" if tied else "lm_head.weight"])

    def logits(self, ids, image_px, image_grids, video_px, video_grids):
        ids_t = torch.tensor(ids)
        x = self.w["model.embed_tokens.weight"][ids_t]
        feats = {}
        for tok, px, grids in ((self.cfg["image_token_id"], image_px, image_grids), (self.cfg["video_token_id"], video_px, video_grids)):
            if grids:
                f = self.vision(px, grids)
                feats[tok] = f
                mask = (ids_t == tok)[:, None].expand_as(x)
                x = x.masked_scatter(mask, f.to(x.dtype))
        positions, delta = self.rope_index(ids, image_grids, video_grids)
        return self.lm(x, positions), positions, delta, feats


def proj(n):
    """The fixed direction gradients are projected on: cos(0.37 j + 0.1)."""
    return torch.cos(0.37 * torch.arange(n, dtype=torch.float64) + 0.1)


CASES = [
    # name, config, seed, layout, dtype
    ("qwen2-vl", "models/qwen2-vl.json", 7, "legacy", "float32"),
    ("qwen2.5-vl", "models/qwen2.5-vl.json", 8, "nested", "float32"),
]
IMAGE_GRIDS = [[1, 4, 6], [1, 6, 4]]
VIDEO_GRIDS = [[2, 4, 4]]
COMPLETION = 4  # the last tokens are the completion whose log-probs the loss weighs


def sequence(cfg, merge):
    vs, ve, img, vid = cfg["vision_start_token_id"], cfg["vision_end_token_id"], cfg["image_token_id"], cfg["video_token_id"]
    n = lambda g: g[0] * g[1] * g[2] // (merge * merge)  # noqa: E731
    return ([1, 5, 6, vs] + [img] * n(IMAGE_GRIDS[0]) + [ve, 7, vs] + [img] * n(IMAGE_GRIDS[1]) + [ve, 8, 9, vs]
            + [vid] * n(VIDEO_GRIDS[0]) + [ve, 10, 11, 12, 40, 77, 3, 99])


def golden():
    out = {"image_grids": IMAGE_GRIDS, "video_grids": VIDEO_GRIDS, "completion": COMPLETION, "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name, cfgfile, seed, layout, dtype in CASES:
            d = os.path.join(tmp, name)
            subprocess.run(["go", "run", "./examples/hf", "init", "-config", os.path.join(TESTDATA, cfgfile), "-out", d,
                            "-seed", str(seed), "-dtype", dtype, "-layout", layout], cwd=ROOT, check=True)
            cfg, text, w = load_dir(d)
            vc = cfg["vision_config"]
            cols = vc.get("in_chans", 3) * vc.get("temporal_patch_size", 2) * vc["patch_size"] ** 2
            rows_i = sum(g[0] * g[1] * g[2] for g in IMAGE_GRIDS)
            rows_v = sum(g[0] * g[1] * g[2] for g in VIDEO_GRIDS)
            px_i, px_v = pixels(rows_i, cols), pixels(rows_v, cols)
            ids = sequence(cfg, vc.get("spatial_merge_size", 2))
            case = {"name": name, "config": cfgfile, "seed": seed, "layout": layout, "dtype": dtype, "ids": ids}
            f9 = lambda t: [[float("%.9g" % z) for z in row] for row in t.tolist()]  # noqa: E731
            with torch.no_grad():
                m = Twin(cfg, text, w, torch.float32)
                logits, positions, delta, feats = m.logits(ids, px_i, IMAGE_GRIDS, px_v, VIDEO_GRIDS)
                case["image_features"] = f9(feats[cfg["image_token_id"]])
                case["video_features"] = f9(feats[cfg["video_token_id"]])
                case["positions"] = positions.tolist()
                case["rope_delta"] = delta
                case["logits"] = f9(logits)
            m = Twin(cfg, text, w, torch.float64, grad=True)
            logits, _, _, _ = m.logits(ids, px_i, IMAGE_GRIDS, px_v, VIDEO_GRIDS)
            p = len(ids) - COMPLETION
            lsm = torch.log_softmax(logits[p - 1:len(ids) - 1], dim=-1)
            logp = lsm[torch.arange(COMPLETION), torch.tensor(ids[p:])]
            i = torch.arange(COMPLETION, dtype=torch.float64)
            (torch.cos(0.7 * i) * logp).sum().backward()
            case["logp"] = logp.tolist()
            case["grads"] = {k: {"norm": float(v.grad.norm()), "dot": float((v.grad.flatten() * proj(v.numel())).sum()),
                                 "first": v.grad.flatten()[:4].tolist()} for k, v in sorted(m.w.items())}
            out["cases"].append(case)
            print(name, "done", file=sys.stderr)
    path = os.path.join(TESTDATA, "model_golden.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", path, os.path.getsize(path), "bytes", file=sys.stderr)


def golden_bf16():
    """Writes examples/qwenvl/testdata/model_golden_bf16.json: golden()'s cases with the twin in
    bfloat16 (weights and activations, Hugging Face's float32 islands kept) for the Go bf16
    mode's test: the image and video features and the logits of the last COMPLETION positions."""
    out = {"completion": COMPLETION, "torch": torch.__version__, "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name, cfgfile, seed, layout, dtype in CASES:
            d = os.path.join(tmp, name)
            subprocess.run(["go", "run", "./examples/hf", "init", "-config", os.path.join(TESTDATA, cfgfile), "-out", d,
                            "-seed", str(seed), "-dtype", dtype, "-layout", layout], cwd=ROOT, check=True)
            cfg, text, w = load_dir(d)
            vc = cfg["vision_config"]
            cols = vc.get("in_chans", 3) * vc.get("temporal_patch_size", 2) * vc["patch_size"] ** 2
            px_i = pixels(sum(g[0] * g[1] * g[2] for g in IMAGE_GRIDS), cols)
            px_v = pixels(sum(g[0] * g[1] * g[2] for g in VIDEO_GRIDS), cols)
            ids = sequence(cfg, vc.get("spatial_merge_size", 2))
            f5 = lambda t: [[float("%.5g" % z) for z in row] for row in t.float().tolist()]  # noqa: E731
            with torch.no_grad():
                m = Twin(cfg, text, w, torch.bfloat16, hf_casts=True)
                logits, _, _, feats = m.logits(ids, px_i, IMAGE_GRIDS, px_v, VIDEO_GRIDS)
            out["cases"].append({"name": name, "image_features": f5(feats[cfg["image_token_id"]]),
                                 "video_features": f5(feats[cfg["video_token_id"]]), "logits": f5(logits[-COMPLETION:])})
    path = os.path.join(TESTDATA, "model_golden_bf16.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", path, os.path.getsize(path), "bytes", file=sys.stderr)


def random_vision(cfg, g, dtype=torch.float32):
    """Random weights (N(0, 0.02²); norm weights 1 + that) of cfg's vision tower."""
    vc = cfg["vision_config"]
    q25 = cfg["model_type"] == "qwen2_5_vl"
    dim = vc["hidden_size"] if q25 else vc["embed_dim"]
    mlp = vc["intermediate_size"] if q25 else dim * vc["mlp_ratio"]
    outd = vc["out_hidden_size"] if q25 else vc["hidden_size"]
    w = {}

    def add(n, *shape, one=False):
        w[n] = ((1 if one else 0) + torch.randn(*shape, generator=g) * 0.02).to(dtype)
    add("visual.patch_embed.proj.weight", dim, 3, 2, 14, 14)
    for i in range(vc["depth"]):
        p = f"visual.blocks.{i}."
        for nm in ("norm1", "norm2"):
            add(p + nm + ".weight", dim, one=True)
            if not q25:
                add(p + nm + ".bias", dim)
        add(p + "attn.qkv.weight", 3 * dim, dim); add(p + "attn.qkv.bias", 3 * dim)
        add(p + "attn.proj.weight", dim, dim); add(p + "attn.proj.bias", dim)
        if q25:
            for nm in ("gate_proj", "up_proj"):
                add(p + "mlp." + nm + ".weight", mlp, dim); add(p + "mlp." + nm + ".bias", mlp)
            add(p + "mlp.down_proj.weight", dim, mlp); add(p + "mlp.down_proj.bias", dim)
        else:
            add(p + "mlp.fc1.weight", mlp, dim); add(p + "mlp.fc1.bias", mlp)
            add(p + "mlp.fc2.weight", dim, mlp); add(p + "mlp.fc2.bias", dim)
    add("visual.merger.ln_q.weight", dim, one=True)
    if not q25:
        add("visual.merger.ln_q.bias", dim)
    add("visual.merger.mlp.0.weight", 4 * dim, 4 * dim); add("visual.merger.mlp.0.bias", 4 * dim)
    add("visual.merger.mlp.2.weight", outd, 4 * dim); add("visual.merger.mlp.2.bias", outd)
    return w


def random_text(tc, g, dtype=torch.float32):
    """Random weights of a Qwen2 decoder with tied embeddings (tc: the text config)."""
    d, f, hq, hkv = tc["hidden_size"], tc["intermediate_size"], tc["num_attention_heads"], tc["num_key_value_heads"]
    hd = d // hq
    w = {}

    def add(n, *shape, one=False):
        w[n] = ((1 if one else 0) + torch.randn(*shape, generator=g) * 0.02).to(dtype)
    add("model.embed_tokens.weight", tc["vocab_size"], d)
    for l in range(tc["num_hidden_layers"]):
        p = f"model.layers.{l}."
        add(p + "input_layernorm.weight", d, one=True); add(p + "post_attention_layernorm.weight", d, one=True)
        add(p + "self_attn.q_proj.weight", hq * hd, d); add(p + "self_attn.q_proj.bias", hq * hd)
        for nm in ("k_proj", "v_proj"):
            add(p + "self_attn." + nm + ".weight", hkv * hd, d); add(p + "self_attn." + nm + ".bias", hkv * hd)
        add(p + "self_attn.o_proj.weight", d, hq * hd)
        add(p + "mlp.gate_proj.weight", f, d); add(p + "mlp.up_proj.weight", f, d); add(p + "mlp.down_proj.weight", d, f)
    add("model.norm.weight", d, one=True)
    return w


def config_3b(vision_depth, lm_layers):
    """Qwen2.5-VL-3B-Instruct's config cut to vision_depth blocks and lm_layers layers, as
    examples/qwenvl's bench3BConfig makes it from the 7B file."""
    cfg = json.load(open(os.path.join(TESTDATA, "models", "qwen2.5-vl-7b-config-nested.json")))
    for m in (cfg, cfg["text_config"]):
        m.update(hidden_size=2048, intermediate_size=11008, num_attention_heads=16, num_key_value_heads=2,
                 vocab_size=151936, num_hidden_layers=lm_layers, tie_word_embeddings=True)
        m.pop("layer_types", None)
    cfg["vision_config"].update(out_hidden_size=2048, depth=vision_depth, fullatt_block_indexes=[vision_depth - 1])
    return cfg


def prompt_3b(cfg):
    """BenchmarkForward3B's prompt: 12 text tokens, one 448×448 image (256 tokens), 12 more."""
    return ([100 + i for i in range(12)] + [cfg["vision_start_token_id"]] + [cfg["image_token_id"]] * 256
            + [cfg["vision_end_token_id"]] + [150 + i for i in range(12)])


def forward():
    """BenchmarkForward3B's twin: Qwen2.5-VL-3B's widths with QWENVL_BENCH_VISION_DEPTH blocks
    (default 4) and QWENVL_BENCH_LM_LAYERS layers (default 2), random weights; the tower on one
    448×448 image (1024 patches), the prefill (tower, scatter, M-RoPE decoder, LM head on the
    last position) and its language-model part alone (given the features), in DTYPE (float32 or bfloat16), REPS timed runs after one warm-up.
    Prints one JSON line per part: the medians of the per-run rates per wall- and CPU-second."""
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    vd = int(os.environ.get("QWENVL_BENCH_VISION_DEPTH", "4"))
    layers = int(os.environ.get("QWENVL_BENCH_LM_LAYERS", "2"))
    reps = int(os.environ.get("REPS", "3"))
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[os.environ.get("DTYPE", "float32")]
    cfg = config_3b(vd, layers)
    g = torch.Generator().manual_seed(0)
    w = random_vision(cfg, g, dtype)
    w.update(random_text(cfg["text_config"], g, dtype))
    m = Twin(cfg, cfg["text_config"], w, dtype)
    del w
    grids = [[1, 32, 32]]
    px = pixels(1024, 1176)
    ids = prompt_3b(cfg)
    ids_t = torch.tensor(ids)

    def tower():
        m.vision(px, grids)

    def prefill(f=None):
        x = m.w["model.embed_tokens.weight"][ids_t]
        if f is None:
            f = m.vision(px, grids)
        x = x.masked_scatter((ids_t == cfg["image_token_id"])[:, None].expand_as(x), f.to(x.dtype))
        positions, _ = m.rope_index(ids, grids, [])
        m.lm(x, positions, last=True).argmax(-1)

    with torch.no_grad():
        feats = m.vision(px, grids)
    parts = (("tower", tower, 1024, "patches"), ("lm", lambda: prefill(feats), len(ids), "tokens"),
             ("prefill", prefill, len(ids), "tokens"))
    for part, run, n, unit in parts:
        walls, cpus = [], []
        with torch.no_grad():
            run()
            for _ in range(reps):
                t0, c0 = time.perf_counter(), time.process_time()
                run()
                walls.append(time.perf_counter() - t0)
                cpus.append(time.process_time() - c0)
        print(json.dumps({"impl": "torch", "version": torch.__version__, "dtype": os.environ.get("DTYPE", "float32"),
                          "threads": torch.get_num_threads(), "part": part, "vision_depth": vd, "lm_layers": layers,
                          unit + "/s": n / statistics.median(walls), unit + "/cpu-s": n / statistics.median(cpus)}))
        sys.stdout.flush()


def gobench():
    """Turns `go test -bench Forward3B` output (stdin) into forward's JSON lines."""
    found = False
    for line in sys.stdin:
        f = line.split()
        if f and f[0].startswith("BenchmarkForward3B/"):
            dt, part = f[0].split("/")[1:3]
            row = {"impl": "go", "dtype": dt, "part": part.rsplit("-", 1)[0]}
            for v, unit in zip(f[2::2], f[3::2]):
                row[unit] = float(v)
            print(json.dumps(row))
            found = True
    if not found:
        sys.exit("no BenchmarkForward3B line in the go test output")


def macs_3b(vision_depth, lm_layers, full_blocks, patches=1024, tokens=282):
    """Multiply-adds of the tower on `patches` patches (windows of 64; full_blocks of the
    blocks attend over all) and of the prefill's decoder over `tokens` tokens (causal
    attention) with the head on the last position, at Qwen2.5-VL-3B's widths."""
    d, f, merged = 1280, 3420, patches // 4
    block = patches * (3 * d * d + d * d + 3 * d * f)
    tower = (patches * 1176 * d + vision_depth * block + (vision_depth - full_blocks) * 2 * patches * 64 * d
             + full_blocks * 2 * patches * patches * d + merged * (4 * d * 4 * d + 4 * d * 2048))
    D, F, kv = 2048, 11008, 256
    layer = tokens * (2 * D * D + 2 * D * kv + 3 * D * F) + tokens * tokens * D
    return tower, lm_layers * layer + D * 151936


def table():
    """Medians over the rounds of forward's and gobench's JSON lines (argv[2]), as Markdown."""
    rows = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
    version = next(r["version"] for r in rows if r["impl"] == "torch")
    cols = [("go", "float32"), ("go", "bf16"), ("torch", "float32"), ("torch", "bfloat16")]
    head = ["Go float32", "Go bf16", f"PyTorch {version} float32", f"PyTorch {version} bfloat16"]
    vd = next(r["vision_depth"] for r in rows if r["impl"] == "torch")
    layers = next(r["lm_layers"] for r in rows if r["impl"] == "torch")
    tokens = next(len(prompt_3b(config_3b(vd, layers))) for _ in [0])

    def med(impl, dt, part, unit):
        v = [r[unit] for r in rows if r["impl"] == impl and r["dtype"] == dt and r.get("part") == part]
        return statistics.median(v) if v else float("nan")
    # CPU- and wall-seconds of each part.
    secs = {}
    for c in cols:
        for kind in ("cpu-s", "s"):
            secs[c, kind] = {"tower": 1024 / med(*c, "tower", "patches/" + kind),
                             "lm": tokens / med(*c, "lm", "tokens/" + kind),
                             "prefill": tokens / med(*c, "prefill", "tokens/" + kind)}
    ct, cl = macs_3b(vd, layers, 1, tokens=tokens)
    ft, fl = macs_3b(32, 36, 4, tokens=tokens)
    print(f"| {vd} vision blocks, {layers} LM layers (measured, medians) | " + " | ".join(head)
          + " | Go f32 / PT f32 | Go bf16 / PT f32 | Go bf16 / PT bf16 |")
    print("|---" * (len(cols) + 4) + "|")

    def line(label, vals, higher=True):
        r = lambda a, b: (a / b if higher else b / a)  # noqa: E731
        print(f"| {label} | " + " | ".join(f"{v:.1f}" for v in vals)
              + f" | {r(vals[0], vals[2]):.2f}x | {r(vals[1], vals[2]):.2f}x | {r(vals[1], vals[3]):.2f}x |")
    for kind, per in (("cpu-s", "CPU-second"), ("s", "wall-second")):
        line(f"tower, 1024 patches: patches per {per}", [1024 / secs[c, kind]["tower"] for c in cols])
        line(f"LM part of the prefill, {tokens} tokens: tokens per {per}", [tokens / secs[c, kind]["lm"] for c in cols])
        line(f"whole prefill, {tokens} tokens: tokens per {per}", [tokens / secs[c, kind]["prefill"] for c in cols])
    # Full depth: each measured part scaled by its multiply-adds (the LM part includes the
    # embedding, scatter and rope index, which do not grow with depth: slightly pessimistic).
    print(f"| **extrapolated** to 32 blocks, 36 layers by multiply-adds ({ft / ct:.2f}x the tower's, {fl / cl:.2f}x the LM's) | | | | | | | |")
    for kind, per in (("cpu-s", "CPU-second"), ("s", "wall-second")):
        full = [secs[c, kind]["tower"] * ft / ct + secs[c, kind]["lm"] * fl / cl for c in cols]
        line(f"full-depth prefill, {tokens} tokens: tokens per {per} (extrapolated)", [tokens / t for t in full])
    print()
    for part, unit in (("tower", "patches/cpu-s"), ("lm", "tokens/cpu-s"), ("prefill", "tokens/cpu-s")):
        print(f"Each round's {part} ({unit}): " + "; ".join(
            f"{h} " + ", ".join(f"{r[unit]:.1f}" for r in rows if (r["impl"], r["dtype"]) == c and r.get("part") == part)
            for c, h in zip(cols, head)))
    rss = {}
    for r in rows:
        if "rss_kb" in r:
            rss.setdefault((r["impl"], r["dtype"]), []).append(r["rss_kb"])
    if rss:
        print()
        print("Peak RSS of each benchmark process (/usr/bin/time -v; a memory measurement): "
              + "; ".join(f"{k[0]} {k[1]}: {max(v) / 2**20:.2f} GiB" for k, v in sorted(rss.items())))


def bench():
    """The vision tower's forward and forward + backward on one 224×224 image (256 patches) at
    the published configs' vision shapes with QWENVL_BENCH_DEPTH blocks (default 2), random
    weights: patches per wall-second and per CPU-second (BenchmarkVisionTower's twin)."""
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    depth = int(os.environ.get("QWENVL_BENCH_DEPTH", "2"))
    reps = int(os.environ.get("REPS", "3"))
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "depth": depth}
    for name, cfgfile in (("qwen2-vl", "qwen2-vl-2b-instruct-config.json"), ("qwen2.5-vl", "qwen2.5-vl-7b-config-nested.json")):
        cfg = json.load(open(os.path.join(TESTDATA, "models", cfgfile)))
        vc = cfg["vision_config"]
        vc["depth"] = depth
        q25 = cfg["model_type"] == "qwen2_5_vl"
        if q25:
            vc["fullatt_block_indexes"] = [depth - 1]
        w = random_vision(cfg, torch.Generator().manual_seed(0))
        grids = [[1, 16, 16]]
        px = pixels(256, 1176)
        for mode in ("forward", "train"):
            m = Twin(cfg, cfg, w, torch.float32, grad=(mode == "train"))
            def run():
                if mode == "forward":
                    with torch.no_grad():
                        m.vision(px, grids)
                else:
                    y = m.vision(px, grids)
                    y.backward(y.detach())
            run()
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(reps):
                run()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            out[f"{name}/{mode}"] = {"patches_per_s": 256 * reps / wall, "patches_per_cpu_s": 256 * reps / cpu}
    print(json.dumps(out))


if __name__ == "__main__":
    {"golden": golden, "golden-bf16": golden_bf16, "bench": bench, "forward": forward, "gobench": gobench, "table": table}[sys.argv[1] if len(sys.argv) > 1 else "golden"]()
