"""Command line: ``python -m packlib {demo,pack,compile,mlperf-bert,pack-dataset} ...``.

Every expected failure (bad input, a missing or unwritable file) is one line on stderr,
``error: ...``, and exit status 2 (a failed verify: 1); ``--debug`` shows the traceback.

>>> from packlib.cli import main
>>> main(["pack", "--method", "lpfhp", "--max-sequences-per-pack", "3"])  # doctest: +ELLIPSIS
PackingPlan[lpfhp]: 16,279,552 sequences -> 9,090,154 packs of 512 tokens (max 3 per pack, ...
0
>>> main(["pack", "--histogram", "no/such/file.txt"])
2
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from . import methods

__all__ = ["main"]


def _whole_number(text: str, lo: int, hi: int, what: str, shown: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not lo <= value <= hi:
        raise argparse.ArgumentTypeError(f"must be in {shown}, got {value}")
    return value


def _depth_arg(text: str):
    if text.lower() in ("none", "unlimited", "max", "0"):
        return None
    return _whole_number(text, 1, 2**62, "a whole number >= 1 or 'unlimited'", "[1, 2**62], or 'unlimited'")


def seed_arg(text: str) -> int:
    """``--seed``: a whole number in [0, 2**64)."""
    return _whole_number(text, 0, 2**64 - 1, "a whole number >= 0", "[0, 2**64)")


def _load_histogram(path):
    from .datasets import load_histogram, wikipedia_512

    if path is None:
        return wikipedia_512(), "bundled Wikipedia BERT histogram (packlib.datasets.wikipedia_512)"
    return load_histogram(path), path


def _demo_units(names, depths, L: int = 512) -> list[str]:
    """What the demo compiles, in the order two processes should take it: the methods'
    kernels at the first depth (:func:`packlib._method_warmup.compile_units`) and ``assign``,
    then each method at each depth (by then loading from numba's cache)."""
    from ._method_warmup import compile_units
    from ._warmup import method_unit

    units = compile_units(names, depths[0], L) + ["assign"]
    units += [method_unit("optimal", d, "optimal-kernels") for d in depths[1:] if "optimal" in names]
    return units + [method_unit(name, d) for d in depths for name in names]


def _demo(args) -> int:
    from ._shared_compile import usable_cores
    from ._warmup import warm_in_processes
    from .comparison import _as_methods, compare, warm_method

    h, source = _load_histogram(args.histogram)
    n, tokens, L = int(h.sum()), int((h * np.arange(1, h.size + 1)).sum()), h.size
    print(f"Histogram: {source}")
    print(f"  {n:,} sequences, {tokens:,} tokens, max length {L}; padded to {L}: {100 * tokens / max(n * L, 1):.2f} % efficiency\n")
    depths = args.max_sequences_per_pack or [3, None]
    chosen = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else None
    names = list(_as_methods(chosen))  # checked before any helper starts
    # each method first runs on a tiny histogram: that compiles (fresh install) or loads from
    # numba's cache only the kernels these methods use, two processes sharing a cold compile;
    # the table then times steady state
    t0 = time.perf_counter()
    warm_in_processes(_demo_units(names, depths, L), min(2, usable_cores()))
    for d in depths:
        for name in names:
            warm_method(name, d)
    first = time.perf_counter() - t0
    table = compare(h, max_sequences_per_pack=depths, methods=names, warmup=False)
    print(table.to_markdown())
    print(f"\n(time: steady state after a warm-up call; the first calls took {first:.2f} s to compile or load "
          "the kernels, not counted above; gap: packs above the LP lower bound)")
    if n == 0:
        return 0
    best = table.best(depth=depths[0])
    plan = methods.get(best.method).function(h, max_sequences_per_pack=depths[0])
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
    h, _ = _load_histogram(args.histogram)
    plan = methods.get(args.method, kind="histogram").function(h, max_sequences_per_pack=args.max_sequences_per_pack)
    print(plan.report(), file=sys.stderr if args.output == "-" else sys.stdout)
    if args.output:
        text = json.dumps(plan.to_dict(), indent=1)
        if args.output == "-":
            print(text)
        else:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text)
    return 0


def _compile(args) -> int:
    from ._precompile import UNITS, built_dir, compile_into_package
    from ._warmup import family_units

    units = list(UNITS) + (family_units() if args.all else [])
    seconds = compile_into_package(units, processes=args.processes)
    print(f"compiled the kernels of {'every family' if args.all else 'the first calls'} into {built_dir()} in "
          f"{seconds:.1f} s: every process on this machine loads them from there (numba, Python and the "
          "package as they are now; anything else compiles on first use)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the full traceback of an error (default: one line)")
    parser = argparse.ArgumentParser(prog="python -m packlib", description="Sequence packing for ML training data.",
                                     parents=[common])
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name, **kwargs):
        return sub.add_parser(name, parents=[common], **kwargs)

    demo = add("demo", help="compare every packer on a histogram and assign sample ids")
    demo.add_argument("--histogram", help="histogram file: one count per line (line i = length i+1), or .npy; default: bundled Wikipedia")
    demo.add_argument("--max-sequences-per-pack", type=_depth_arg, action="append",
                      help="depth to compare (repeatable; 'unlimited' for none); default: 3 and unlimited")
    demo.add_argument("--methods", help=f"comma-separated subset of {','.join(methods.names('histogram'))}")
    demo.add_argument("--seed", type=seed_arg, default=0)
    demo.set_defaults(run=_demo)

    pack = add("pack", help="pack a histogram with one method; print the report, optionally write the plan as JSON")
    pack.add_argument("--histogram", help="histogram file (default: bundled Wikipedia)")
    pack.add_argument("--method", default="nnls", choices=methods.names("histogram"))
    pack.add_argument("--max-sequences-per-pack", type=_depth_arg, default=3)
    pack.add_argument("--output", "-o", help="write the plan (MLPerf metadata keys + strategies) as JSON here ('-' for stdout)")
    pack.set_defaults(run=_pack)

    comp = add("compile", help="compile the kernels of the first calls into the installed package, for every later "
                               "process on this machine (an image's or a shared install's build step)")
    comp.add_argument("--all", action="store_true", help="every kernel family (what packlib.warmup() compiles), "
                                                        "not only the first calls'")
    comp.add_argument("--processes", type=lambda t: _whole_number(t, 1, 256, "a whole number >= 1", "[1, 256]"),
                      help="compile in this many processes at once (default: 2 where there are two cores)")
    comp.set_defaults(run=_compile)

    from .pipeline.mlperf import cli as mlperf_cli

    mb = add("mlperf-bert", help="pack unpacked MLPerf BERT TFRecords into packed TFRecords (no TensorFlow)")
    mlperf_cli.configure_parser(mb)
    mb.set_defaults(run=mlperf_cli.run)
    try:
        from .pipeline import cli as pipeline_cli
    except ImportError:
        pipeline_cli = None
    if pipeline_cli is not None:
        pd = add("pack-dataset", help="pack Parquet / Arrow / TFRecord datasets larger than memory into Parquet")
        pipeline_cli.configure_parser(pd)
        pd.set_defaults(run=pipeline_cli.run)
    return parser


def describe_error(exc: BaseException) -> str:
    """One line for an expected failure: the message, with the file for OS errors."""
    if isinstance(exc, OSError) and exc.filename is not None:
        what = exc.strerror or type(exc).__name__
        return f"{exc.filename}: {what}" + ("" if exc.filename2 is None else f" ({exc.filename2})")
    if isinstance(exc, MemoryError):
        return "out of memory; use a smaller input or a machine with more memory"
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())


def main(argv=None) -> int:
    """Run the command line; returns the exit status.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default: ``sys.argv[1:]``).
    """
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except (ValueError, TypeError, OSError, MemoryError) as exc:  # expected failures: one line, no traceback
        if getattr(args, "debug", False):
            raise
        print(f"error: {describe_error(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP during a pipeline run
        from .pipeline._errors import report_interrupt

        return report_interrupt(exc)
