"""Where a prompt-once row of groups spends its time on a GPU, and a block-aligned layout.

Groups of 8 completions (~400 tokens) under long prompts (~600 tokens), ``--groups-per-row``
groups a row (bench_preference.py's groups), in three layouts: packed (every sequence
``prompt + completion``, a document-causal ``BlockMask``), the prompt laid out once
(``shared_prompt_block_mask``), and the prompt once **block-aligned**: each prompt and each
completion starts on a flex_attention block boundary (padding tokens, a group of their own that
nothing sees, fill each segment's last block), so a query block holds one completion only and
its blocks against its prompt are full blocks, which flex_attention runs without calling the
mask function, and no block is partial across two completions.

For each layout, the median of ``--repeat`` timed runs after a warm-up (flex_attention compiles):
the block mask's construction; flex_attention forward + backward under that mask, on random
queries / keys / values of the model's shape, times its layers; the logits (the LM head and
``sequence_logps``) forward + backward on random hidden states; and the whole step (the model
forward + backward, the mask built inside it). Also each mask's blocks: partial ones (where
flex_attention evaluates the mask function) and full ones (computed without it); the empty
ones are skipped. ``--blocks-only`` counts them without timing anything, on any device. On a CPU (a smoke run at a tiny size) everything runs forward
only, flex_attention uncompiled (its backward needs a GPU), and the whole step through sdpa with
the 4-D mask (transformers compiles its flex_attention path: minutes on a CPU).

    PYTHONPATH=$PWD python3 benchmarks/bench_preference_parts.py --device cuda
    PYTHONPATH=$PWD python3 benchmarks/bench_preference_parts.py --device cuda --model large
    PYTHONPATH=$PWD python3 benchmarks/bench_preference_parts.py --device cpu --model tiny --blocks-only
    PYTHONPATH=$PWD python3 benchmarks/bench_preference_parts.py --device cpu --model tiny --groups 1 --scale 0.1
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

MODELS = {"base": dict(hidden=1024, layers=8, heads=16, kv_heads=8, intermediate=2816, vocab=32000),
          "large": dict(hidden=2048, layers=16, heads=16, kv_heads=8, intermediate=5632, vocab=32000),
          "tiny": dict(hidden=32, layers=2, heads=4, kv_heads=2, intermediate=64, vocab=1000)}


def block_aligned(batch, block: int):
    """The row with each segment (a prompt, or a completion) starting on a multiple of
    ``block``: padding tokens after each segment (group id past the row's, one per run;
    sequence id -1; ``completion_mask`` 0; ``prev_index`` -1), every ``prev_index`` moved
    with its token."""
    import torch

    g, s = batch["group_ids"][0].numpy(), batch["sequence_ids"][0].numpy()
    T = g.size
    starts = np.flatnonzero(np.r_[True, (g[1:] != g[:-1]) | (s[1:] != s[:-1])])
    lens = np.diff(np.r_[starts, T])
    room = -(-lens // block) * block
    first = np.r_[0, np.cumsum(room)[:-1]]
    new = np.repeat(first - starts, lens) + np.arange(T)
    N = int(room.sum())
    pad_group = int(g.max()) + 1 + np.repeat(np.arange(lens.size), room)  # each run of padding its own group
    out = {"input_ids": np.zeros(N, np.int64), "position_ids": np.zeros(N, np.int64),
           "completion_mask": np.zeros(N, np.int64), "sequence_ids": np.full(N, -1, np.int64),
           "group_ids": pad_group.astype(np.int64), "prev_index": np.full(N, -1, np.int64)}
    for key in ("input_ids", "position_ids", "completion_mask", "sequence_ids", "group_ids"):
        out[key][new] = batch[key][0].numpy()
    prev = batch["prev_index"][0].numpy()
    out["prev_index"][new] = np.where(prev >= 0, new[np.maximum(prev, 0)], -1)
    res = {k: torch.from_numpy(v)[None] for k, v in out.items()}
    res["use_cache"] = False
    return res


def layouts(groups, block):
    from packlib.torch import PackedCollator

    packed = PackedCollator(flash_attn_kwargs=False)(groups)
    shared = PackedCollator(share_prompt=True)(groups)
    shared.pop("attention_mask")  # the flex block mask replaces the 4-D one
    return {"packed": packed, "prompt once": shared, "prompt once, block-aligned": block_aligned(shared, block)}


def _timed(fn, device, repeat):
    import torch

    def once():
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    once()  # warm-up: compiles
    return statistics.median(once() for _ in range(repeat))


def parts(name, batch, cfg, model, device, args):
    """One layout's row of the table."""
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    from _preference_gpu import document_block_mask
    from packlib.torch import model_inputs, sequence_logps, shared_prompt_block_mask, shared_prompt_mask

    train = device.type == "cuda"
    b = {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.items()}
    T = b["input_ids"].shape[1]
    build = (lambda: document_block_mask(b, device, args.block)) if name == "packed" else \
        (lambda: shared_prompt_block_mask(b, device=device, block_size=args.block))
    mask = build()
    full = mask.full_kv_num_blocks
    blocks = {"partial": int(mask.kv_num_blocks.sum()), "full": 0 if full is None else int(full.sum())}
    if args.blocks_only:
        return T, blocks, None
    attend = torch.compile(flex_attention) if train else flex_attention
    hd, dtype = cfg["hidden"] // cfg["heads"], model.dtype
    q = torch.randn(1, cfg["heads"], T, hd, device=device, dtype=dtype, requires_grad=train)
    kv = [torch.randn(1, cfg["kv_heads"], T, hd, device=device, dtype=dtype, requires_grad=train) for _ in range(2)]
    hidden = torch.randn(1, T, cfg["hidden"], device=device, dtype=dtype, requires_grad=train)

    def attention():
        out = attend(q, *kv, block_mask=mask, enable_gqa=True)
        if train:
            out.sum().backward()

    def logits():
        out = sequence_logps(model.lm_head(hidden), b).sum()
        if train:
            out.backward()

    def step():
        inputs = model_inputs(b)
        inputs["attention_mask"] = build() if train else shared_prompt_mask(b)  # the CPU's sdpa model: 4-D
        out = sequence_logps(model(**inputs).logits, b).sum()
        if train:
            out.backward()
            model.zero_grad(set_to_none=True)

    with torch.set_grad_enabled(train):
        times = {"mask": _timed(build, device, args.repeat), "attention": _timed(attention, device, args.repeat)
                 * cfg["layers"], "logits": _timed(logits, device, args.repeat), "step": _timed(step, device, args.repeat)}
    return T, blocks, times


def main(argv=None):
    import torch
    import transformers

    import bench_preference as bench

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", choices=sorted(MODELS), default="base")
    ap.add_argument("--groups", type=int, default=8, help="groups measured, one row each")
    ap.add_argument("--groups-per-row", type=int, default=1)
    ap.add_argument("--scale", type=float, default=1.0, help="lengths scaled (bench_preference's groups)")
    ap.add_argument("--block", type=int, default=128, help="flex_attention's block size")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--blocks-only", action="store_true", help="count the masks' blocks, time nothing (any device)")
    args = ap.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)
    device, cfg = torch.device(args.device), MODELS[args.model]
    conf = transformers.LlamaConfig(vocab_size=cfg["vocab"], hidden_size=cfg["hidden"],
                                    intermediate_size=cfg["intermediate"], num_hidden_layers=cfg["layers"],
                                    num_attention_heads=cfg["heads"], num_key_value_heads=cfg["kv_heads"],
                                    max_position_embeddings=16384)
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(
            conf, attn_implementation="flex_attention" if device.type == "cuda" else "sdpa")
    model = model.to(torch.bfloat16 if device.type == "cuda" else torch.float32).train()
    data = bench.groups(args.groups, 8, args.scale)
    rows = [data[i:i + args.groups_per_row] for i in range(0, len(data), args.groups_per_row)]
    totals = {}
    for row in rows:
        for name, batch in layouts(row, args.block).items():
            T, blocks, times = parts(name, batch, cfg, model, device, args)
            acc = totals.setdefault(name, {"tokens": 0, "partial": 0, "full": 0, "times": {}})
            acc["tokens"] += T
            acc["partial"] += blocks["partial"]
            acc["full"] += blocks["full"]
            for k, v in (times or {}).items():
                acc["times"][k] = acc["times"].get(k, 0.0) + v
    _table(totals, len(rows), device, cfg, args)


def _table(totals, n, device, cfg, args):
    import torch

    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"# prompt-once parts on {where}: model {args.model} {cfg}, {n} rows of {args.groups_per_row} group(s) "
          f"of 8, block {args.block}" + ("; blocks counted only" if args.blocks_only else "")
          + ("" if device.type == "cuda" or args.blocks_only else
             "; forward only, flex_attention uncompiled, the step through sdpa") + "\n")
    print("| layout | tokens | partial blocks | full blocks | mask build | attention (all layers) | logits | "
          "whole step | step faster than packed |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, acc in totals.items():
        t = acc["times"]
        ms = {k: f"{t[k] / n * 1e3:.2f} ms" if k in t else "—" for k in ("mask", "attention", "logits", "step")}
        faster = f"{totals['packed']['times']['step'] / t['step']:.2f}x" if t else "—"
        print(f"| {name} | {acc['tokens'] // n:,} | {acc['partial'] / n:,.0f} | {acc['full'] / n:,.0f} | "
              f"{ms['mask']} | {ms['attention']} | {ms['logits']} | {ms['step']} | {faster} |")


if __name__ == "__main__":
    main()
