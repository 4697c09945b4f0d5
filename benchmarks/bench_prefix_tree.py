"""Prefix-tree rows (``PackedCollator(share_prefix=True)``) against plain packing and
``share_prompt``: tokens and attention pairs on generated agentic workloads; the time and peak
memory of collating a tree row and building its flex_attention ``BlockMask`` at 8k-128k
tokens, beside ``create_block_mask`` with the same tree as a ``mask_mod`` where that fits; and,
on a GPU, a training step's time (left ready: it runs only where CUDA is available).

    python benchmarks/bench_prefix_tree.py                      # all CPU parts
    python benchmarks/bench_prefix_tree.py --part masks --sizes 8192 32768 92160 131072
    python benchmarks/bench_prefix_tree.py --part gpu           # a GPU step (skipped without CUDA)

Each mask measurement runs in a fresh process, so its peak memory (``ru_maxrss``, less the
process's resident size before the measurement) is its own.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np

VOCAB = 32_000


def _ids(rng, n):
    return rng.integers(1, VOCAB, int(n)).tolist()


def stepwise_agent(rng, turns=8, system=600, user=(80, 400), answer=(60, 300)):
    """One trajectory's step-wise samples (ROLL / SkyRL style): sample t re-sends the whole
    conversation so far and trains turn t's answer."""
    history, samples = _ids(rng, system), []
    for _ in range(turns):
        history = history + _ids(rng, rng.integers(*user))
        ans = _ids(rng, rng.integers(*answer))
        samples.append({"input_ids": history + ans, "completion_mask": [0] * len(history) + [1] * len(ans)})
        history = history + ans
    return samples


def branching_group(rng, k=8, prompt=4096, stem=(0, 300), answer=(100, 600)):
    """A GRPO group sampled from a search: the answers share the first tokens of a stem."""
    trunk = _ids(rng, stem[1])
    comps = [trunk[:rng.integers(*stem)] + _ids(rng, rng.integers(*answer)) for _ in range(k)]
    return {"prompt_ids": _ids(rng, prompt), "completion_ids": comps}


def multi_turn(rng, n=5, turns=6):
    """Whole multi-turn trajectories that branch at a turn (every answer trained)."""
    base = stepwise_agent(rng, turns=turns)[-1]
    out = []
    for _ in range(n):
        cut = int(rng.integers(len(base["input_ids"]) // 3, len(base["input_ids"])))
        tail = _ids(rng, rng.integers(100, 600))
        out.append({"input_ids": base["input_ids"][:cut] + tail,
                    "completion_mask": base["completion_mask"][:cut] + [1] * len(tail)})
    return out


def _sizes(seqs):
    lens = np.array([len(s) for s in seqs], np.int64)
    return int(lens.sum()), int((lens * (lens + 1) // 2).sum())


def workload_table(seed=0):
    """Tokens and attention pairs: plain packing, share_prompt (groups), the prefix tree."""
    from packlib.torch.collate._trie import build_trie, read_trajectories

    rng = np.random.default_rng(seed)
    loads = {"step-wise agent (4 trajectories x 8 turns)": [s for _ in range(4) for s in stepwise_agent(rng)],
             "GRPO, group of 8 with branching answers, 4k prompt": [branching_group(rng)],
             "GRPO, group of 4, 4k prompt": [branching_group(rng, k=4)],
             "multi-turn, 5 branching trajectories": multi_turn(rng)}
    rows = []
    for name, examples in loads.items():
        trajs = read_trajectories(examples)
        plain_t, plain_p = _sizes(trajs.sequences)
        if "prompt_ids" in examples[0]:  # the prompt once per group, each completion whole after it
            p = [len(e["prompt_ids"]) for e in examples]
            comps = [len(c) for e in examples for c in e["completion_ids"]]
            share_t = sum(p) + sum(comps)
            share_p = sum(x * (x + 1) // 2 for x in p) + sum(
                c * len(e["prompt_ids"]) + c * (c + 1) // 2 for e in examples for c in map(len, e["completion_ids"]))
        else:  # share_prompt takes groups only: trajectories have no one prompt to lay out once
            share_t = share_p = None
        trie = build_trie(trajs.sequences)
        tree_t, tree_p = trie.ids.size, int(trie.depth.sum()) + trie.ids.size
        rows.append((name, plain_t, share_t, tree_t, plain_p, share_p, tree_p))
    print("| workload | tokens: plain | share_prompt | prefix tree | pairs: plain | share_prompt | prefix tree | "
          "tree vs plain (tokens / pairs) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, pt, st, tt, pp, sp, tp in rows:
        st, sp = ("—", "—") if st is None else (f"{st:,}", f"{sp:,}")
        print(f"| {name} | {pt:,} | {st} | {tt:,} | {pp:,} | {sp} | {tp:,} | {pt / tt:.2f}x / {pp / tp:.2f}x |")
    return rows


def tree_row(size, seed=0):
    """Step-wise agent samples whose prefix tree holds about ``size`` tokens."""
    from packlib.torch.collate._trie import build_trie, read_trajectories

    rng = np.random.default_rng(seed)
    examples, tokens = [], 0
    while True:
        more = stepwise_agent(rng, turns=8)
        t = build_trie(read_trajectories(more).sequences).ids.size
        if tokens + t > size:
            return examples
        examples += more
        tokens += t


def _measure_one(size, how):
    """Run in a fresh process: ``{"seconds", "peak_mib", "tokens"}`` of collate + mask."""
    import torch

    from packlib.torch import PackedCollator, tree_block_mask

    examples = tree_row(size)
    collator = PackedCollator(share_prefix=True)
    collator(examples[:8])  # numba's kernels compiled (or loaded) before the clock starts
    from torch.nn.attention.flex_attention import BlockMask  # noqa: F401  (imported before the clock)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    batch = collator(examples)
    if how == "tree_block_mask":
        mask = tree_block_mask(batch)
    else:  # create_block_mask evaluating the same tree as a mask_mod over every pair
        from torch.nn.attention.flex_attention import create_block_mask

        end = batch["tree_end"].reshape(-1)
        T = end.numel()

        def mask_mod(b, h, q, k):
            return (k <= q) & (q < end[k])

        mask = create_block_mask(mask_mod, None, None, T, T, device="cpu")
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": seconds, "peak_mib": max(peak - base, 0) / 1024, "rss_mib": peak / 1024,
            "tokens": int(batch["input_ids"].shape[1]),
            "unpacked": int(sum(len(e["input_ids"]) for e in examples)), "blocks": int(mask.kv_num_blocks.sum())}


def mask_table(sizes, create_sizes):
    print("| row | tokens (unpacked) | collate + tree_block_mask | its peak (process peak) | "
          "create_block_mask (mask_mod) | its peak |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size in sizes:
        res = {}
        for how in ("tree_block_mask", "create_block_mask"):
            if how == "create_block_mask" and size not in create_sizes:
                continue
            out = subprocess.run([sys.executable, __file__, "--one", str(size), how], capture_output=True, text=True)
            if out.returncode != 0:
                res[how] = None
                print(out.stderr[-2000:], file=sys.stderr)
            else:
                res[how] = json.loads(out.stdout.strip().splitlines()[-1])
        t = res.get("tree_block_mask")
        c = res.get("create_block_mask")
        cells = [f"{t['tokens']:,} ({t['unpacked']:,})", f"{t['seconds']:.2f} s",
                 f"{t['peak_mib']:.0f} MiB ({t['rss_mib']:.0f} MiB)"] if t \
            else ["failed"] * 3
        cells += [f"{c['seconds']:.2f} s", f"{c['peak_mib']:.0f} MiB"] if c else ["not run (too large here)", "—"]
        print(f"| {size:,} | " + " | ".join(cells) + " |")


def gpu_step(size=16_384, hidden=1024, layers=8, repeat=5):
    """A training step (forward + backward) of a Llama with flex_attention on one tree row
    against plain packing of the same trajectories (each whole, kept apart by position_ids) and
    against the same tree with a BlockMask made from a dense ``T x T`` mask (as AReaL builds
    it): left ready, run where CUDA is. The dense mask needs ``T²`` bytes of GPU memory."""
    import torch

    if not torch.cuda.is_available():
        print("gpu part: no CUDA device here, not run")
        return None
    import transformers

    from packlib.torch import PackedCollator, model_inputs, token_logps, tree_block_mask, tree_mask

    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=4 * hidden,
                                   num_hidden_layers=layers, num_attention_heads=hidden // 64,
                                   num_key_value_heads=hidden // 128, max_position_embeddings=131072)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="flex_attention",
                                                          torch_dtype=torch.bfloat16).cuda().train()
    examples = tree_row(size)
    tree = PackedCollator(share_prefix=True)(examples)
    tree = {k: v.cuda() if hasattr(v, "cuda") else v for k, v in tree.items()}
    tree["attention_mask"] = tree_block_mask(tree, device="cuda")
    plain = PackedCollator()([{"input_ids": e["input_ids"]} for e in examples])
    plain = {k: v.cuda() if hasattr(v, "cuda") else v for k, v in plain.items()}

    def step_tree():
        logps, mask = token_logps(model(**model_inputs(tree)).logits, tree)
        ((logps * mask).sum() / mask.sum()).backward()

    def step_plain():
        model(**plain).loss.backward()

    dense = dict(tree)  # AReaL's way: a dense T x T bool mask, then create_block_mask over it
    allowed = tree_mask(tree, dtype=torch.float32)[0, 0] == 0

    def dense_mod(b, h, q, k):
        return allowed[q, k]

    from torch.nn.attention.flex_attention import create_block_mask

    dense["attention_mask"] = create_block_mask(dense_mod, None, None, allowed.shape[0], allowed.shape[0],
                                                device="cuda")

    def step_dense():
        logps, mask = token_logps(model(**model_inputs(dense)).logits, dense)
        ((logps * mask).sum() / mask.sum()).backward()

    for name, fn in (("prefix tree (flex, tree_block_mask)", step_tree),
                     ("prefix tree (flex, dense-mask BlockMask)", step_dense),
                     ("plain packing (flex, position_ids)", step_plain)):
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        torch.cuda.synchronize()
        print(f"{name}: {(time.perf_counter() - t0) / repeat * 1e3:.1f} ms per step")
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("all", "workloads", "masks", "gpu"), default="all")
    ap.add_argument("--sizes", type=int, nargs="*", default=[8192, 32768, 92160, 131072])
    ap.add_argument("--create-sizes", type=int, nargs="*", default=[8192],
                    help="row sizes at which to run create_block_mask too (it takes T x T work and memory)")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(_measure_one(int(args.one[0]), args.one[1])))
        return
    if args.part in ("all", "workloads"):
        workload_table()
    if args.part in ("all", "masks"):
        mask_table(args.sizes, set(args.create_sizes))
    if args.part in ("all", "gpu"):
        gpu_step()


if __name__ == "__main__":
    main()
