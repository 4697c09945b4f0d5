"""Vision-language packing (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): exactness, tokens against the
padded batch, balance counting the vision tower, and (where asked) step time.

1. Exactness: tiny random models of the three families (tests/naive_vision.py; 2 layers,
   hidden 32, a 2-block vision tower, float32, CPU), four examples with 0-2 images in one
   row from ``VisionPackedCollator`` against each example run alone: the largest logit
   difference over all examples, the token-weighted loss difference and the largest
   gradient difference, under sdpa and eager; then the naive layouts by the same check
   (the largest logit difference over the examples after the first).
2. Tokens: a realistic mix (text 20-500 tokens, 0-4 images of 64-1,300 tokens,
   log-uniform) laid out as padded batches of B examples (each padded to its batch's
   longest, in shuffled order, as the processor pads) and as padding-free packed rows
   (best-fit decreasing at ``--max-sequence-length``).
3. Balance: ``packlib.balance`` at 8 ranks planned on tokens only, on the language model's
   cost, and on the language model's plus the vision tower's (``packlib.vision_cost``), each
   read under the full cost (FLOPs from Qwen2-VL-7B's shapes, tests/naive_vision_plan.py).
4. Step time (``--step-time``): forward + backward per example of a random Qwen2-VL
   (``--hidden``, ``--layers``; vision tower of half the width), the padded batch (2-D
   attention mask, positions computed by the model) against the packed row, on
   ``--device``. On a CPU, sdpa has no variable-length kernel, so the time there is a smoke
   test; the GPU figure is the one to read.

    PYTHONPATH=$PWD python3 benchmarks/bench_vision.py
    PYTHONPATH=$PWD python3 benchmarks/bench_vision.py --step-time --device cuda --hidden 1024 --layers 8
    PYTHONPATH=$PWD python3 benchmarks/bench_vision.py --examples 200 --step-time --timed 4 --scale 0.05  # smoke
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def exactness(out):
    import torch

    from packlib.torch import VisionPackedCollator
    from tests import naive_vision as nv

    out("## Packed row against each example alone (max |difference|, float32, CPU)\n")
    out("| family | attention | logits | loss | gradients (relative to the largest) |")
    out("|---|---|---|---|---|")
    naive = {}
    for family in nv.FAMILIES:
        model = nv.tiny_model(family)
        exs = nv.examples()
        for attn in ("sdpa", "eager"):
            model.set_attn_implementation(attn)
            batch = VisionPackedCollator(model)(exs)
            model.zero_grad()
            ref = nv.alone(model, exs)
            sum(r[1] for r in ref).backward()
            want = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
            model.zero_grad()
            res = model(**batch)
            n = sum(r[2] for r in ref)
            (res.loss * n).backward()
            scale = max(float(g.abs().max()) for g in want.values())
            grads = max(float((p.grad - want[k]).abs().max()) for k, p in model.named_parameters() if k in want) / scale
            parts = res.logits[0].detach().split([r[0].shape[0] for r in ref])
            logits = max(float((p - r[0].detach()).abs().max()) for p, r in zip(parts, ref))
            loss = abs(float(res.loss.detach()) - float(sum(r[1].detach() for r in ref)) / n)
            out(f"| {family} | {attn} | {logits:.1e} | {loss:.1e} | {grads:.1e} |")
        model.set_attn_implementation("sdpa")
        with torch.no_grad():
            ref = nv.alone(model, exs)
            for name, b in nv.naive_layouts(model, exs).items():
                parts = model(**b).logits[0].split([r[0].shape[0] for r in ref])
                naive.setdefault(name, []).append(max(float((p - r[0]).abs().max()) for p, r in zip(parts[1:], ref[1:])))
    out("\n## Naive layouts: max logit difference on the examples after the first (sdpa)\n")
    out("| layout | " + " | ".join(nv.FAMILIES) + " |")
    out("|---|" + "---|" * len(nv.FAMILIES))
    for name, diffs in naive.items():
        out(f"| {name} | " + " | ".join(f"{d:.1f}" for d in diffs) + " |")


def tokens(out, n, L, seed):
    import packlib
    from tests import naive_vision_plan as nvp

    text, images = nvp.realistic_mix(n, seed)
    lengths = text + np.array([sum(i) for i in images])
    real = int(lengths.sum())
    out(f"\n## Tokens: {n:,} examples, text 20-500, 0-4 images of 64-1,300 tokens ({real:,} tokens, "
        f"{int(np.array([sum(i) for i in images]).sum()) / real:.0%} image tokens, longest {lengths.max():,})\n")
    out("| layout | tokens computed | padding | against packed |")
    out("|---|---|---|---|")
    perm = np.random.default_rng(seed).permutation(n)
    for b in (2, 4, 8, 16):
        cut = n // b * b
        batches = lengths[perm[:cut]].reshape(-1, b)
        padded = int(batches.max(axis=1).sum() * b) + int(lengths[perm[cut:]].max(initial=0) * (n - cut))
        out(f"| padded batches of {b} | {padded:,} | {1 - real / padded:.1%} | {padded / real:.2f}x |")
    packs = packlib.pack(lengths, L, method="bfd")
    out(f"| packed rows of {L:,} (padding-free) | {real:,} | 0.0% | 1.00x |")
    out(f"\n{packs.num_packs:,} packed rows, {real / (packs.num_packs * L):.1%} full on average; "
        "the vision tower's work (patches) is the same in every layout: each image is encoded apart.")


def balance_table(out, n, L, seed):
    import packlib
    from tests import naive_vision_plan as nvp

    out("\n## Balance at 8 ranks, read under the full cost (language model + vision tower)\n")
    out("| mix | planned on tokens | planned on the language model's cost | planned on language + vision |")
    out("|---|---|---|---|")
    for heavy in (False, True):
        text, images = nvp.realistic_mix(n, seed, vision_heavy=heavy)
        lengths = text + np.array([sum(i) for i in images])
        true = nvp.true_costs(text, images)
        extra = packlib.vision_cost([[nvp.PATCHES_PER_TOKEN * t for t in im] for im in images], cost=nvp.VISION)
        plans = [packlib.balance(lengths, L, world_size=8, **kw) for kw in
                 (dict(), dict(cost=nvp.LANGUAGE), dict(cost=nvp.LANGUAGE, extra_costs=extra))]
        name = "half text only, half 2-4 images" if heavy else "realistic (0-4 images)"
        out(f"| {name} | " + " | ".join(f"{nvp.balance_under(s, true):.4f}" for s in plans) + " |")


def _step_model(hidden, layers, device):
    import torch
    import transformers as tf

    from tests import naive_vision as nv

    heads = max(2, hidden // 64)
    text = nv._text_config(hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                           num_attention_heads=heads, num_key_value_heads=heads,
                           max_position_embeddings=32768)
    half = hidden // heads // 2
    text["rope_parameters"]["mrope_section"] = [half - 2 * (half // 3), half // 3, half // 3]
    vision = dict(depth=max(1, layers // 2), embed_dim=hidden // 2, hidden_size=hidden, num_heads=heads,
                  patch_size=14, spatial_merge_size=2, temporal_patch_size=2, in_channels=3)
    config = tf.Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=nv.IMG, video_token_id=nv.VIDEO,
                              vision_start_token_id=nv.START, vision_end_token_id=nv.END)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return tf.Qwen2VLForConditionalGeneration(config).to(device).train()


def step_time(out, args):
    import torch

    from packlib.torch import VisionPackedCollator
    from tests import naive_vision as nv
    from tests import naive_vision_plan as nvp

    model = _step_model(args.hidden, args.layers, args.device)
    dim = 3 * 2 * 14 * 14
    text, images = nvp.realistic_mix(args.timed * args.per_batch, args.seed + 1)
    rng = np.random.default_rng(args.seed)
    exs = []
    for t, imgs in zip(text, images):
        grids = [(2, 2 * max(1, round(np.sqrt(tok * args.scale))), 2 * max(1, round(np.sqrt(tok * args.scale))))
                 for tok in imgs]
        e = nv.example(rng, [(1, h, w) for _, h, w in grids], text=(max(1, int(t * args.scale)),
                                                                    max(2, int(t * args.scale) + 1)))
        if "pixel_values" in e:
            e["pixel_values"] = torch.randn(int(e["image_grid_thw"].prod(dim=1).sum()), dim)
        exs.append(e)
    collate = VisionPackedCollator(model)
    batches = {"padded": [], "packed": []}
    for i in range(0, len(exs), args.per_batch):
        chunk = exs[i:i + args.per_batch]
        batches["padded"].append(nv.padded(chunk))
        batches["packed"].append(collate(chunk))
    moved = {k: [{n: v.to(args.device) if hasattr(v, "to") else v for n, v in b.items()} for b in bs]
             for k, bs in batches.items()}
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    out(f"\n## Step time: Qwen2-VL hidden {args.hidden}, {args.layers} layers, {len(exs)} examples in batches of "
        f"{args.per_batch} ({args.device}, sdpa, float32; scale {args.scale})\n")
    out("| layout | tokens | forward + backward per example | against padded |")
    out("|---|---|---|---|")
    times = {}
    for name, bs in moved.items():
        best = float("inf")
        for _ in range(args.repeat + 1):
            sync()
            t0 = time.perf_counter()
            for b in bs:
                model(**b).loss.backward()
            sync()
            best = min(best, time.perf_counter() - t0)
            model.zero_grad(set_to_none=True)
        times[name] = best / len(exs)
        toks = sum(int(b["input_ids"].numel()) for b in bs)
        out(f"| {name} | {toks:,} | {times[name] * 1e3:.2f} ms | {times[name] / times.get('padded', times[name]):.2f}x |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--examples", type=int, default=20000, help="examples of the token and balance tables")
    p.add_argument("--max-sequence-length", type=int, default=8192)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-exactness", action="store_true", help="skip the exactness tables")
    p.add_argument("--step-time", action="store_true", help="also time packed against padded steps")
    p.add_argument("--device", default="cpu")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--timed", type=int, default=8, help="timed batches")
    p.add_argument("--per-batch", type=int, default=4, help="examples per padded batch / packed row")
    p.add_argument("--scale", type=float, default=1.0, help="shrink text and images by this factor")
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args(argv)
    out = print
    print("machine: shared and loaded (2 cores); times are ratios within one process\n" if args.step_time else "",
          end="")
    if not args.no_exactness:
        exactness(out)
    tokens(out, args.examples, args.max_sequence_length, args.seed)
    balance_table(out, args.examples, args.max_sequence_length, args.seed)
    if args.step_time:
        step_time(out, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
