"""Benchmark: ``nnls_pack`` and ``compare()`` from L = 512 to 131,072 tokens.

    python benchmarks/bench_nnls_long.py                      # the table of docs/guide.md
    python benchmarks/bench_nnls_long.py --reference          # + the enumerating recipe at L = 512
    python benchmarks/bench_nnls_long.py --compare            # + compare(h, L) with its defaults at 4k, 32k
    python benchmarks/bench_nnls_long.py --lengths 512 4096 --n 20000   # a quick run
    python benchmarks/bench_nnls_long.py --solves --lengths 1024 2048  # the time of each NNLS solve

Input at every ``L``: ``n`` = 200,000 lognormal lengths with median ``L / 4`` and sigma 0.9
(``numpy.random.default_rng(0).lognormal(log(L / 4), 0.9, n)``), rounded and clipped to
``[1, L]``: the same shape at every ``L``, so the lower bound barely moves and the columns
compare the packers, not the data. Up to ``L = 2048`` ``nnls_pack`` solves on the lengths
themselves; above, on at most 768 length classes. Each row gives packs, the gap to
``packlib.lower_bound``, wall time (one steady-state run: the machine is shared, so times
are upper bounds) and the peak resident memory above the start of the call.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import packlib  # noqa: E402
from benchmarks._common import PeakRss, fmt  # noqa: E402


def lognormal_histogram(L: int, n: int = 200_000, seed: int = 0) -> np.ndarray:
    """The benchmark's input (see the module docstring)."""
    x = np.random.default_rng(seed).lognormal(np.log(L / 4), 0.9, n)
    return packlib.histogram(np.clip(np.rint(x), 1, L).astype(np.int64), L)


def measured(fn):
    with PeakRss() as m:
        out = fn()
    return out, m.seconds, m.peak / 2**20


def gap(packs, bound):
    return f"{packs - bound:,} ({100 * (packs - bound) / bound:.3f} %)"


def reference_rows(L: int, n: int):
    """The published recipe (every depth-3 strategy, dense scipy NNLS, one solve) where it
    runs; its matrix has L x (strategies) entries, 22,102 columns at L = 512."""
    from benchmarks.bench_packing import reference_nnlshp

    h = lognormal_histogram(L, n)
    packs, seconds, mib = measured(lambda: reference_nnlshp(h.astype(float), L, 3))
    bound = packlib.lower_bound(h, L, 3).bound
    return f"| {L:,} | 3 | enumerating recipe + scipy NNLS | {packs:,} | {gap(packs, bound)} | {fmt(seconds)} | {mib:,.0f} MiB |"


def solve_rows(L: int, n: int):
    """The time of each NNLS solve of the depth-3 recipe: ``nnls_pack`` stopped after ``k``
    solves (``repair=False``) less the run stopped after ``k - 1``."""
    h = lognormal_histogram(L, n)
    before = 0.0
    k = 1
    while True:
        plan, seconds, _ = measured(lambda: packlib.nnls_pack(h, L, 3, max_iterations=k, repair=False))
        if plan.info["iterations"] < k:
            return
        yield f"| {L:,} | {k} | {fmt(seconds - before)} | {fmt(seconds)} |"
        before = seconds
        k += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="*", default=[512, 1024, 2048, 4096, 8192, 32768, 131072])
    ap.add_argument("--n", type=int, default=200_000, help="sequences per histogram")
    ap.add_argument("--reference", action="store_true", help="also the enumerating recipe at L = 512")
    ap.add_argument("--compare", action="store_true", help="also compare(h, L) with its defaults at 4k and 32k")
    ap.add_argument("--solves", action="store_true", help="only the time of each NNLS solve (depth 3)")
    args = ap.parse_args()
    packlib.warmup()
    if args.solves:
        print("| L | solve | its time | time of the solves so far |")
        print("|---:|---:|---:|---:|")
        for L in args.lengths:
            for row in solve_rows(L, args.n):
                print(row, flush=True)
        return
    print("| L | depth | method | packs | gap to lower bound | time | peak memory |")
    print("|---:|---|---|---:|---:|---:|---:|")
    if args.reference:
        print(reference_rows(512, args.n), flush=True)
    for L in args.lengths:
        h = lognormal_histogram(L, args.n)
        for depth in (3, None):
            bound = packlib.lower_bound(h, L, depth).bound
            for name, pack in (("nnls_pack", packlib.nnls_pack), ("optimal_pack", packlib.optimal_pack)):
                plan, seconds, mib = measured(lambda: pack(h, L, depth))
                print(f"| {L:,} | {depth or 'unlimited'} | {name} | {plan.num_packs:,} | {gap(plan.num_packs, bound)} | "
                      f"{fmt(seconds)} | {mib:,.0f} MiB |", flush=True)
    if args.compare:
        print("\n| L | compare(h, L) with its defaults: rows | refused | wall time |")
        print("|---:|---:|---:|---:|")
        for L in (4096, 32768):
            h = lognormal_histogram(L, args.n)
            table, seconds, _ = measured(lambda: packlib.compare(h, L, progress=False))
            refused = sum(r.packs is None for r in table)
            print(f"| {L:,} | {len(table)} | {refused} | {fmt(seconds)} |", flush=True)


if __name__ == "__main__":
    main()
