"""References for planning vision-language data, in plain Python (no torch, no packlib): the
Qwen2-VL processor's resize rule, a realistic mix of examples, a step cost model from the
models' shapes, and a schedule's balance under any per-sample cost."""
from __future__ import annotations

import math

import numpy as np

# FLOPs of a forward pass, from the shapes of Qwen2-VL-7B: the language model (7.1e9
# parameters, 28 layers of width 3584, causal) and the vision tower (6.75e8 parameters, 32
# full-attention blocks of width 1280, 4 patches per image token)
LANGUAGE = (2 * 7.07e9, 2 * 28 * 3584)  # a per token, b per squared token
VISION = (2 * 6.75e8, 4 * 32 * 1280)  # c1 per patch, c2 per squared patch
PATCHES_PER_TOKEN = 4


def smart_resize(height, width, factor=28, min_pixels=56 * 56, max_pixels=28 * 28 * 1280):
    """transformers' ``smart_resize`` of the Qwen2-VL image processor, transcribed."""
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def realistic_mix(n, seed=0, *, vision_heavy=False):
    """``n`` examples: text 20-500 tokens and 0-4 images of 64-1,300 tokens each
    (log-uniform). Returns ``(text tokens, list of each example's image tokens)``;
    ``vision_heavy``: half the examples text only, half with 2-4 images."""
    rng = np.random.default_rng(seed)
    text = rng.integers(20, 501, n)
    if vision_heavy:
        counts = np.where(rng.random(n) < 0.5, 0, rng.integers(2, 5, n))
    else:
        counts = rng.integers(0, 5, n)
    images = [np.exp(rng.uniform(np.log(64), np.log(1300), c)).astype(np.int64).tolist() for c in counts]
    return text, images


def true_costs(text, images, language=LANGUAGE, vision=VISION):
    """Each example's cost: the language model's over its tokens (text and image) plus the
    vision tower's over each image's patches."""
    out = np.zeros(len(text))
    for i, (t, imgs) in enumerate(zip(text, images)):
        n = t + sum(imgs)
        out[i] = language[0] * n + language[1] * n * n
        for tok in imgs:
            p = PATCHES_PER_TOKEN * tok
            out[i] += vision[0] * p + vision[1] * p * p
    return out


def balance_under(schedule, costs):
    """A schedule's balance under per-sample ``costs``: total / (ranks x the sum over steps
    of the busiest rank), read rank by rank, step by step."""
    per = np.zeros((schedule.num_steps, schedule.world_size))
    for r in range(schedule.world_size):
        for s, micro in enumerate(schedule.rank(r)):
            per[s, r] = sum(float(costs[np.asarray(mb)].sum()) for mb in micro)
    return float(per.sum() / (schedule.world_size * per.max(axis=1).sum()))
