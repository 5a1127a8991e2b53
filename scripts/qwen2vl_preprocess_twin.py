#!/usr/bin/python3
"""Golden pixel_values, image_grid_thw and M-RoPE position ids for examples/qwenvl.

A NumPy twin of Hugging Face transformers' Qwen2-VL input side, written from
src/transformers/models/qwen2_vl/image_processing_qwen2_vl.py (Qwen2VLImageProcessor, the slow
processor: PIL resize), image_transforms.py (convert_to_rgb, resize, rescale, normalize),
processing_qwen2_vl.py (<|image_pad|> expansion) and get_rope_index of modeling_qwen2_vl.py and
modeling_qwen2_5_vl.py (its torch tensor ops written as the equivalent NumPy ones).
transformers itself is not installable here; Pillow and NumPy are Debian's (run with
/usr/bin/python3).

    /usr/bin/python3 scripts/qwen2vl_preprocess_twin.py examples/qwenvl/testdata

writes images/*.png (the generated inputs), resized/*.png (Pillow's resized uint8 images),
*.f32 (pixel_values, float32 little-endian) and golden.json. With --bench it times the twin on
the 1280x720 image of the Go benchmark instead.
"""
import hashlib
import json
import math
import os
import sys

import numpy as np
import PIL
from PIL import Image

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


# ---- image processor (image_processing_qwen2_vl.py, image_transforms.py) ----

def smart_resize(height, width, factor=28, min_pixels=56 * 56, max_pixels=14 * 14 * 4 * 1280):
    if height < factor or width < factor:
        raise ValueError(f"height:{height} or width:{width} must be larger than factor:{factor}")
    elif max(height, width) / min(height, width) > 200:
        raise ValueError("absolute aspect ratio must be smaller than 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = math.floor(height / beta / factor) * factor
        w_bar = math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def processor_config(overrides):
    """Qwen2VLImageProcessor.__init__'s defaults; min_pixels/max_pixels override size."""
    cfg = dict(do_resize=True, resample=3, do_rescale=True, rescale_factor=1 / 255,
               do_normalize=True, image_mean=CLIP_MEAN, image_std=CLIP_STD, do_convert_rgb=True,
               min_pixels=56 * 56, max_pixels=28 * 28 * 1280, patch_size=14,
               temporal_patch_size=2, merge_size=2)
    o = dict(overrides)
    if "size" in o:
        size = o.pop("size")
        cfg["min_pixels"], cfg["max_pixels"] = size["shortest_edge"], size["longest_edge"]
    cfg.update(o)
    for k in ("image_mean", "image_std"):
        if not isinstance(cfg[k], (list, tuple)):
            cfg[k] = [cfg[k]] * 3
    return cfg


def convert_to_rgb(image):
    if image.mode == "RGB":
        return image
    return image.convert("RGB")


def rescale(image, scale):
    return (image.astype(np.float64) * scale).astype(np.float32)


def normalize(image, mean, std):  # channels last
    if not np.issubdtype(image.dtype, np.floating):
        image = image.astype(np.float32)
    mean = np.array(mean, dtype=image.dtype)
    std = np.array(std, dtype=image.dtype)
    return (image - mean) / std


def hf_resize(image, height, width, resample):
    # image_transforms.resize on a uint8 HWC array: to PIL, PIL resize, back to numpy.
    pil = Image.fromarray(image)
    return np.array(pil.resize((width, height), resample=resample, reducing_gap=None))


def preprocess_one(frames, cfg):
    """Qwen2VLImageProcessor._preprocess for one image (one frame) or one video."""
    images = [convert_to_rgb(f) if cfg["do_convert_rgb"] else f for f in frames]
    images = [np.array(im) for im in images]
    height, width = images[0].shape[:2]
    resized_height, resized_width = height, width
    factor = cfg["patch_size"] * cfg["merge_size"]
    processed, resized = [], []
    for image in images:
        if cfg["do_resize"]:
            resized_height, resized_width = smart_resize(
                height, width, factor=factor, min_pixels=cfg["min_pixels"], max_pixels=cfg["max_pixels"])
            image = hf_resize(image, resized_height, resized_width, cfg["resample"])
        resized.append(image)
        if cfg["do_rescale"]:
            image = rescale(image, cfg["rescale_factor"])
        if cfg["do_normalize"]:
            image = normalize(image, cfg["image_mean"], cfg["image_std"])
        processed.append(image.transpose(2, 0, 1))  # channels first
    patches = np.array(processed)
    tps, ps, m = cfg["temporal_patch_size"], cfg["patch_size"], cfg["merge_size"]
    if patches.shape[0] % tps != 0:
        repeats = np.repeat(patches[-1][np.newaxis], tps - 1, axis=0)
        patches = np.concatenate([patches, repeats], axis=0)
    channel = patches.shape[1]
    grid_t = patches.shape[0] // tps
    grid_h, grid_w = resized_height // ps, resized_width // ps
    patches = patches.reshape(grid_t, tps, channel, grid_h // m, m, ps, grid_w // m, m, ps)
    patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    flat = patches.reshape(grid_t * grid_h * grid_w, channel * tps * ps * ps)
    return flat, (grid_t, grid_h, grid_w), resized[0]


def preprocess(items, cfg):
    """preprocess(images=...) (each item one frame) or preprocess(videos=...)."""
    values, grids, resized = [], [], []
    for frames in items:
        flat, grid, r = preprocess_one(frames, cfg)
        values.extend(flat)
        grids.append(grid)
        resized.append(r)
    return np.array(values), np.array(grids), resized


# ---- generated test images ----

def make_images(rng):
    """Small inputs of awkward sizes and modes; structure plus noise so resampling shows."""
    def texture(h, w, noise):
        y, x = np.mgrid[0:h, 0:w].astype(np.float64)
        base = np.stack([
            127 + 120 * np.sin(x / 3.1 + y / 7.3),
            127 + 120 * np.cos(np.hypot(x - w / 3, y - h / 2) / 2.3),
            (x * 255 / max(w - 1, 1) + 64 * ((x // 5 + y // 5) % 2)) % 256,
        ], axis=-1)
        base += rng.normal(0, noise, base.shape)
        return np.clip(np.rint(base), 0, 255).astype(np.uint8)

    imgs = {}
    imgs["odd_rgb"] = Image.fromarray(texture(61, 97, 40))
    imgs["tiny_gray"] = Image.fromarray(texture(30, 40, 30)[..., 1], mode="L")
    rgba = np.concatenate([texture(90, 130, 25), rng.integers(0, 256, (90, 130, 1), dtype=np.uint8)], axis=-1)
    imgs["rgba"] = Image.fromarray(rgba, mode="RGBA")
    imgs["palette"] = Image.fromarray(texture(50, 75, 20)).quantize(colors=37)
    la = np.stack([texture(47, 33, 30)[..., 0], rng.integers(0, 256, (47, 33), dtype=np.uint8)], axis=-1)
    imgs["gray_alpha"] = Image.fromarray(la, mode="LA")
    imgs["wide"] = Image.fromarray(texture(29, 600, 20))
    y, x = np.mgrid[0:700, 0:900]  # integer patterns: sharp edges, fine stripes, a small PNG
    imgs["huge"] = Image.fromarray(np.stack([
        ((x * x + y * y) >> 7) & 0xFF, 255 * ((x // 2 + y // 9) % 2), (x ^ y) & 0xF0], axis=-1).astype(np.uint8))
    imgs["exact"] = Image.fromarray(texture(56, 84, 35))
    for i in range(3):
        imgs[f"frame{i}"] = Image.fromarray(texture(30, 60, 30 + 10 * i))
    imgs["too_small"] = Image.fromarray(texture(20, 50, 10))
    return imgs


CASES = [
    # name, images (one list of frames per image or video), video, config overrides,
    # full pixel_values stored, resized images stored as PNG (else only their SHA-256)
    ("odd_rgb", [["odd_rgb"]], False, {}, True, True),
    ("tiny_gray", [["tiny_gray"]], False, {}, False, True),
    ("rgba", [["rgba"]], False, {}, False, True),
    ("palette", [["palette"]], False, {}, False, True),
    ("gray_alpha", [["gray_alpha"]], False, {}, False, True),
    ("wide", [["wide"]], False, {}, False, False),
    ("huge_small_max", [["huge"]], False, {"max_pixels": 28 * 28 * 20}, False, True),
    ("huge_default", [["huge"]], False, {}, False, False),
    ("huge_size_key", [["huge"]], False, {"size": {"shortest_edge": 3136, "longest_edge": 200704},
                                          "image_mean": 0.5, "image_std": 0.5}, False, False),
    ("exact_no_resize", [["exact"]], False, {"do_resize": False}, False, False),
    ("no_rescale", [["odd_rgb"]], False, {"do_rescale": False}, False, False),
    ("no_normalize", [["odd_rgb"]], False, {"do_normalize": False}, False, False),
    ("multi_image_row", [["odd_rgb"], ["tiny_gray"], ["palette"]], False, {}, False, False),
    ("video", [["frame0", "frame1", "frame2"]], True, {"min_pixels": 784}, True, True),
]

ERROR_CASES = [("too_small", [["too_small"]], {})]


def stats(v):
    v64 = v.astype(np.float64).ravel()
    return dict(mean=float(v64.mean()), std=float(v64.std()), min=float(v64.min()),
                max=float(v64.max()), sum=float(v64.sum()))


def image_goldens(out, rng):
    os.makedirs(os.path.join(out, "images"), exist_ok=True)
    os.makedirs(os.path.join(out, "resized"), exist_ok=True)
    imgs = make_images(rng)
    for name, im in imgs.items():
        im.save(os.path.join(out, "images", name + ".png"), optimize=True)
    # Reload from the files, as the Go side does.
    loaded = {name: Image.open(os.path.join(out, "images", name + ".png")) for name in imgs}
    cases = []
    for name, items, video, overrides, full, keep_png in CASES:
        cfg = processor_config(overrides)
        values, grids, resized = preprocess([[loaded[f] for f in frames] for frames in items], cfg)
        case = dict(name=name, images=items, video=video, config=overrides,
                    modes=[loaded[frames[0]].mode for frames in items],
                    grids=grids.tolist(), shape=list(values.shape), stats=stats(values),
                    resized_size=[[int(r.shape[1]), int(r.shape[0])] for r in resized],
                    resized_sha256=[hashlib.sha256(np.ascontiguousarray(r).tobytes()).hexdigest() for r in resized])
        if keep_png:
            case["resized_png"] = []
            for i, r in enumerate(resized):
                fn = f"resized/{name}_{i}.png"
                Image.fromarray(r).save(os.path.join(out, fn), optimize=True)
                case["resized_png"].append(fn)
        flat = values.astype("<f4").ravel()
        if full:
            case["pixel_values"] = name + ".f32"
            flat.tofile(os.path.join(out, name + ".f32"))
        idx = rng.choice(flat.size, size=min(flat.size, 128), replace=False)
        case["samples"] = [[int(i), float(flat[i])] for i in sorted(idx)]
        cases.append(case)
    errors = []
    for name, items, overrides in ERROR_CASES:
        try:
            preprocess([[loaded[f] for f in frames] for frames in items], processor_config(overrides))
        except ValueError as e:
            errors.append(dict(name=name, images=items, config=overrides, error=str(e)))
        else:
            raise SystemExit(f"{name}: expected an error")
    return cases, errors


def smart_resize_goldens(rng):
    rows = []
    sizes = [(42, 70), (28, 28), (70, 98), (126, 42), (29, 600), (5000, 28), (28, 5600)]
    sizes += [tuple(int(v) for v in rng.integers(28, 4000, 2)) for _ in range(100)]
    bounds = [(3136, 1003520), (3136, 12845056), (784, 15680), (200704, 200704 * 4)]
    for h, w in sizes:
        for lo, hi in bounds:
            try:
                rh, rw = smart_resize(h, w, 28, lo, hi)
            except ValueError:
                rh, rw = -1, -1
            rows.append([h, w, lo, hi, rh, rw])
    return rows


# ---- token expansion (processing_qwen2_vl.py) and get_rope_index (modeling_qwen2[_5]_vl.py) ----

VISION_START, VISION_END, IMAGE, VIDEO = 151652, 151653, 151655, 151656


def expand_text(texts, image_grid_thw, video_grid_thw, merge_size):
    text = list(texts)
    merge_length = merge_size ** 2
    for token, grids in (("<|image_pad|>", image_grid_thw), ("<|video_pad|>", video_grid_thw)):
        if grids is None:
            continue
        index = 0
        for i in range(len(text)):
            while token in text[i]:
                n = int(np.prod(grids[index])) // merge_length
                text[i] = text[i].replace(token, "<|placeholder|>" * n, 1)
                index += 1
            text[i] = text[i].replace("<|placeholder|>", token)
    return text


def get_rope_index(input_ids, image_grid_thw, video_grid_thw, attention_mask, spatial_merge_size,
                   tokens_per_second=None, second_per_grid_ts=None):
    """get_rope_index of Qwen2-VL (tokens_per_second None) or Qwen2.5-VL, torch ops in NumPy."""
    image_token_id, video_token_id, vision_start_token_id = IMAGE, VIDEO, VISION_START
    mrope_position_deltas = []
    if input_ids is not None and (image_grid_thw is not None or video_grid_thw is not None):
        total_input_ids = input_ids
        if attention_mask is None:
            attention_mask = np.ones_like(total_input_ids)
        position_ids = np.ones((3, input_ids.shape[0], input_ids.shape[1]), dtype=input_ids.dtype)
        image_index, video_index = 0, 0
        for i, input_ids in enumerate(total_input_ids):
            input_ids = input_ids[attention_mask[i] == 1]
            vision_start_indices = np.argwhere(input_ids == vision_start_token_id)[:, 0]
            vision_tokens = input_ids[vision_start_indices + 1]
            image_nums = (vision_tokens == image_token_id).sum()
            video_nums = (vision_tokens == video_token_id).sum()
            input_tokens = input_ids.tolist()
            llm_pos_ids_list = []
            st = 0
            remain_images, remain_videos = image_nums, video_nums
            for _ in range(image_nums + video_nums):
                if image_token_id in input_tokens and remain_images > 0:
                    ed_image = input_tokens.index(image_token_id, st)
                else:
                    ed_image = len(input_tokens) + 1
                if video_token_id in input_tokens and remain_videos > 0:
                    ed_video = input_tokens.index(video_token_id, st)
                else:
                    ed_video = len(input_tokens) + 1
                if ed_image < ed_video:
                    t, h, w = image_grid_thw[image_index]
                    second_per_grid_t = 0
                    image_index += 1
                    remain_images -= 1
                    ed = ed_image
                else:
                    t, h, w = video_grid_thw[video_index]
                    second_per_grid_t = second_per_grid_ts[video_index] if second_per_grid_ts is not None else 1.0
                    video_index += 1
                    remain_videos -= 1
                    ed = ed_video
                llm_grid_t, llm_grid_h, llm_grid_w = int(t), int(h) // spatial_merge_size, int(w) // spatial_merge_size
                text_len = ed - st
                st_idx = llm_pos_ids_list[-1].max() + 1 if len(llm_pos_ids_list) > 0 else 0
                llm_pos_ids_list.append(np.broadcast_to(np.arange(text_len).reshape(1, -1), (3, text_len)) + st_idx)
                if tokens_per_second is None:  # Qwen2-VL
                    t_index = np.broadcast_to(np.arange(llm_grid_t).reshape(-1, 1), (llm_grid_t, llm_grid_h * llm_grid_w)).ravel()
                else:  # Qwen2.5-VL: torch.as_tensor(second_per_grid_t, dtype=long) truncates first
                    range_tensor = np.arange(llm_grid_t).reshape(-1, 1)
                    expanded_range = np.broadcast_to(range_tensor, (llm_grid_t, llm_grid_h * llm_grid_w))
                    second_per_grid_t = np.asarray(second_per_grid_t).astype(range_tensor.dtype)
                    time_tensor = expanded_range * second_per_grid_t * tokens_per_second
                    t_index = time_tensor.astype(np.int64).ravel()
                h_index = np.broadcast_to(np.arange(llm_grid_h).reshape(1, -1, 1), (llm_grid_t, llm_grid_h, llm_grid_w)).ravel()
                w_index = np.broadcast_to(np.arange(llm_grid_w).reshape(1, 1, -1), (llm_grid_t, llm_grid_h, llm_grid_w)).ravel()
                llm_pos_ids_list.append(np.stack([t_index, h_index, w_index]) + text_len + st_idx)
                st = ed + llm_grid_t * llm_grid_h * llm_grid_w
            if st < len(input_tokens):
                st_idx = llm_pos_ids_list[-1].max() + 1 if len(llm_pos_ids_list) > 0 else 0
                text_len = len(input_tokens) - st
                llm_pos_ids_list.append(np.broadcast_to(np.arange(text_len).reshape(1, -1), (3, text_len)) + st_idx)
            llm_positions = np.concatenate(llm_pos_ids_list, axis=1).reshape(3, -1)
            position_ids[:, i, attention_mask[i] == 1] = llm_positions
            mrope_position_deltas.append(llm_positions.max() + 1 - len(total_input_ids[i]))
        return position_ids, np.array(mrope_position_deltas).reshape(-1, 1)
    if attention_mask is not None:
        position_ids = attention_mask.astype(np.int64).cumsum(-1) - 1
        position_ids[attention_mask == 0] = 1
        position_ids = np.broadcast_to(position_ids[np.newaxis], (3,) + position_ids.shape)
        max_position_ids = position_ids.max(0).max(-1, keepdims=True)
        mrope_position_deltas = max_position_ids + 1 - attention_mask.shape[-1]
    else:
        position_ids = np.broadcast_to(np.arange(input_ids.shape[1]).reshape(1, 1, -1), (3,) + input_ids.shape)
        mrope_position_deltas = np.zeros([input_ids.shape[0], 1], dtype=input_ids.dtype)
    return position_ids, mrope_position_deltas


def tokens_of(text, rng):
    """A stand-in tokenizer: special tokens by id, other characters as small ids."""
    specials = {"<|vision_start|>": VISION_START, "<|vision_end|>": VISION_END,
                "<|image_pad|>": IMAGE, "<|video_pad|>": VIDEO}
    ids, i = [], 0
    while i < len(text):
        for s, sid in specials.items():
            if text.startswith(s, i):
                ids.append(sid)
                i += len(s)
                break
        else:
            ids.append(ord(text[i]) % 1000 + 10)
            i += 1
    return ids


def rope_goldens(rng):
    img = "<|vision_start|><|image_pad|><|vision_end|>"
    vid = "<|vision_start|><|video_pad|><|vision_end|>"
    cases = [
        dict(name="text_only", texts=["hello there", "hi"], images=[], videos=[]),
        dict(name="text_only_no_mask", texts=["abcdef", "ghijkl"], images=[], videos=[], no_mask=True),
        dict(name="one_image", texts=[img + "Describe the picture."], images=[[1, 4, 6]], videos=[]),
        dict(name="two_rows_left_pad", texts=["Q: " + img + " and " + img + " same?", "A " + img + "?"],
             images=[[1, 4, 6], [1, 2, 2], [1, 6, 4]], videos=[]),
        dict(name="row_without_image", texts=[img + "x", "only text here"], images=[[1, 2, 4]], videos=[]),
        dict(name="image_first_token", texts=[img], images=[[1, 2, 2]], videos=[], no_mask=True),
        dict(name="video_qwen2", texts=["v: " + vid + " what happens?"], images=[], videos=[[3, 4, 4]]),
        dict(name="image_video_qwen25", texts=[img + "then" + vid + "end", vid + "x" + img],
             images=[[1, 4, 4], [1, 2, 6]], videos=[[2, 4, 2], [3, 2, 2]], tokens_per_second=2,
             second_per_grid_ts=[1.0, 2.0]),
        dict(name="video_qwen25_default_seconds", texts=[vid + "?"], images=[], videos=[[4, 2, 2]],
             tokens_per_second=2),
        dict(name="video_qwen25_fractional_seconds", texts=["a" + vid + "b" + vid], images=[],
             videos=[[2, 2, 2], [3, 2, 4]], tokens_per_second=25, second_per_grid_ts=[0.5, 1.5]),
    ]
    out = []
    for c in cases:
        expanded = expand_text(c["texts"], c["images"] or None, c["videos"] or None, 2)
        raw = [tokens_of(t, rng) for t in c["texts"]]
        ids = [tokens_of(t, rng) for t in expanded]
        width = max(len(r) for r in ids)
        padded = [[0] * (width - len(r)) + r for r in ids]  # left padding, pad id 0
        mask = [[0] * (width - len(r)) + [1] * len(r) for r in ids]
        input_ids = np.array(padded, dtype=np.int64)
        attn = None if c.get("no_mask") else np.array(mask, dtype=np.int64)
        grids_i = np.array(c["images"], dtype=np.int64) if c["images"] else None
        grids_v = np.array(c["videos"], dtype=np.int64) if c["videos"] else None
        spg = np.array(c["second_per_grid_ts"]) if "second_per_grid_ts" in c else None
        pos, deltas = get_rope_index(input_ids, grids_i, grids_v, attn, 2, c.get("tokens_per_second"), spg)
        out.append(dict(name=c["name"], texts=c["texts"], expanded_texts=expanded, raw_ids=raw,
                        input_ids=padded, mask=None if attn is None else mask, images=c["images"],
                        videos=c["videos"], tokens_per_second=c.get("tokens_per_second", 0),
                        second_per_grid_ts=c.get("second_per_grid_ts"),
                        positions=pos.tolist(), deltas=deltas[:, 0].tolist()))
    return out


def bench(reps=20):
    """Seconds per preprocess of the 1280x720 image of BenchmarkPreprocess1280x720."""
    import time
    i = np.arange(1280 * 720 * 3, dtype=np.int64)
    pix = ((i * 7 + i // 3840 * 13) % 256).astype(np.uint8).reshape(720, 1280, 3)
    im, cfg = Image.fromarray(pix), processor_config({})
    preprocess([[im]], cfg)
    t0 = time.perf_counter()
    for _ in range(reps):
        preprocess([[im]], cfg)
    per = (time.perf_counter() - t0) / reps
    print(f"twin (Pillow {PIL.__version__}, NumPy {np.__version__}): {per * 1e3:.1f} ms/image, "
          f"{1 / per:.2f} images/s, {1280 * 720 / 1e6 / per:.2f} MP/s")


def main():
    if sys.argv[1:] == ["--bench"]:
        return bench()
    out = sys.argv[1] if len(sys.argv) > 1 else "examples/qwenvl/testdata"
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(23)
    cases, errors = image_goldens(out, rng)
    golden = dict(pillow=PIL.__version__, numpy=np.__version__, cases=cases, errors=errors,
                  smart_resize=smart_resize_goldens(rng))
    golden["rope"] = rope_goldens(rng)
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
