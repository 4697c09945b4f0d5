"""Command line: ``python -m packlib {demo,pack,mlperf-bert} ...``."""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

__all__ = ["main"]


def _depth_arg(text: str):
    if text.lower() in ("none", "unlimited", "max", "0"):
        return None
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1, or 'unlimited'")
    return value


def _load_histogram(path):
    from .datasets import load_histogram, wikipedia_512

    if path is None:
        return wikipedia_512(), "bundled Wikipedia BERT histogram (packlib.datasets.wikipedia_512)"
    return load_histogram(path), path


def _demo(args) -> int:
    from .compare import compare

    h, source = _load_histogram(args.histogram)
    n, tokens, L = int(h.sum()), int((h * np.arange(1, h.size + 1)).sum()), h.size
    print(f"Histogram: {source}")
    print(f"  {n:,} sequences, {tokens:,} tokens, max length {L}; padded to {L}: {100 * tokens / max(n * L, 1):.2f} % efficiency\n")
    depths = args.max_sequences_per_pack or [3, None]
    methods = args.methods.split(",") if args.methods else None
    table = compare(h, methods=methods, max_sequences_per_pack=depths)
    print(table.to_markdown())
    print("\n(time: steady state after a warm-up call; gap: packs above the LP lower bound)")
    if n == 0:
        return 0
    best = table.best(depth=depths[0])
    from .compare import get_packer

    plan = get_packer(best.method)(h, depths[0])
    print(f"\nBest plan at depth {best.depth_label}:\n{plan.report()}\n")
    # turn the plan into packs of sample ids, as a training pipeline would
    rng = np.random.default_rng(args.seed)
    lengths = np.repeat(np.arange(1, L + 1), h)
    rng.shuffle(lengths)
    plan.assign(lengths, seed=args.seed)  # first call compiles or loads the kernel
    t0 = time.perf_counter()
    packs = plan.assign(lengths, seed=args.seed)
    dt = time.perf_counter() - t0
    packs.validate(n)
    print(f"assign(): {n:,} sample ids -> {packs.num_packs:,} packs in {dt:.3f} s; every sample exactly once, no pack over {L} tokens")
    shown = packs.shuffled(args.seed)  # packs come grouped by strategy; show a random few
    print(f"shuffled(seed={args.seed}), first packs:")
    for p in range(min(3, shown.num_packs)):
        ids = shown[p]
        print(f"  pack {p}: samples {ids.tolist()} with lengths {lengths[ids].tolist()}")
    return 0


def _pack(args) -> int:
    from .compare import get_packer

    h, _ = _load_histogram(args.histogram)
    plan = get_packer(args.method)(h, args.max_sequences_per_pack)
    print(plan.report(), file=sys.stderr if args.output == "-" else sys.stdout)
    if args.output:
        text = json.dumps(plan.to_dict(), indent=1)
        if args.output == "-":
            print(text)
        else:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m packlib", description="Sequence packing for ML training data.")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="compare every packer on a histogram and assign sample ids")
    demo.add_argument("--histogram", help="histogram file: one count per line (line i = length i+1), or .npy; default: bundled Wikipedia")
    demo.add_argument("--max-sequences-per-pack", type=_depth_arg, action="append",
                      help="depth to compare (repeatable; 'unlimited' for none); default: 3 and unlimited")
    demo.add_argument("--methods", help="comma-separated subset of spfhp,lpfhp,nnls,optimal")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(run=_demo)

    pack = sub.add_parser("pack", help="pack a histogram with one method; print the report, optionally write the plan as JSON")
    pack.add_argument("--histogram", help="histogram file (default: bundled Wikipedia)")
    pack.add_argument("--method", default="nnls", choices=["spfhp", "lpfhp", "nnls", "optimal"])
    pack.add_argument("--max-sequences-per-pack", type=_depth_arg, default=3)
    pack.add_argument("--output", "-o", help="write the plan (MLPerf metadata keys + strategies) as JSON here ('-' for stdout)")
    pack.set_defaults(run=_pack)

    try:
        from .formats import mlperf_bert
    except ImportError:
        mlperf_bert = None
    if mlperf_bert is not None and hasattr(mlperf_bert, "configure_parser"):
        mb = sub.add_parser("mlperf-bert", help="pack unpacked MLPerf BERT TFRecords into packed TFRecords (no TensorFlow)")
        mlperf_bert.configure_parser(mb)
        mb.set_defaults(run=mlperf_bert.run)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except ValueError as exc:  # bad input: say what is wrong, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
