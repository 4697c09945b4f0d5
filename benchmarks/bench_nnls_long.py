"""Benchmark: ``nnls_pack`` and ``compare()`` from L = 512 to 131,072 tokens.

    python benchmarks/bench_nnls_long.py                      # the table of docs/guide.md
    python benchmarks/bench_nnls_long.py --repeat 3           # each time the least of 3 runs
    python benchmarks/bench_nnls_long.py --repeat 3 --no-exact  # nnls_pack alone (the exact recipe takes minutes)
    python benchmarks/bench_nnls_long.py --optimal            # + optimal_pack's gap and time
    python benchmarks/bench_nnls_long.py --reference          # + the enumerating recipe at L = 512
    python benchmarks/bench_nnls_long.py --compare            # + compare(h, L) with its defaults at 2k, 8k, 32k
    python benchmarks/bench_nnls_long.py --lengths 512 4096 --n 20000   # a quick run
    python benchmarks/bench_nnls_long.py --solves --lengths 1024 2048  # the time of each NNLS solve
    python benchmarks/bench_nnls_long.py --shape bimodal --lengths 1024 2048 --depths 3 unlimited  # held out

Input at every ``L``: ``n`` = 200,000 lognormal lengths with median ``L / 4`` and sigma 0.9
(``numpy.random.default_rng(0).lognormal(log(L / 4), 0.9, n)``), rounded and clipped to
``[1, L]``: the same shape at every ``L``, so the lower bound barely moves and the columns
compare the packers, not the data. Up to ``L = 768`` ``nnls_pack`` solves on the lengths
themselves; above, on at most 768 length classes (``plan.info["length_class"]``: the class
width). One row per ``L`` and depth: packs, against the exact recipe (``exact=True``, on the
lengths, where it runs: up to ``L = 2048``; one run, its time beside), the gap to
``packlib.lower_bound``, wall time and CPU time (each the least of ``--repeat`` steady-state
runs: the machine is shared, so wall times are upper bounds and grow with its load; the CPU
time, the process's, the memory sampler's thread included, is what a quiet machine's wall
time would be, about) and the peak resident memory above the start of the call.

``--shape`` swaps the input for a held-out shape (``SHAPES``, seed 1, the same ``n``):
``bimodal`` (80 % short, lognormal median ``L / 16``; 20 % uniform in ``[L / 2, L]``), ``spiky``
(half lognormal median ``L / 5``, half on six spikes from 37 to ``L``), ``long-tail`` (Pareto,
shape 1.2, scaled by ``L / 40``).
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import packlib  # noqa: E402
from benchmarks._common import PeakRss, fmt  # noqa: E402


def lognormal_histogram(L: int, n: int = 200_000, seed: int = 0) -> np.ndarray:
    """The benchmark's input (see the module docstring)."""
    x = np.random.default_rng(seed).lognormal(np.log(L / 4), 0.9, n)
    return packlib.histogram(np.clip(np.rint(x), 1, L).astype(np.int64), L)


def _clip(x, L):
    return np.clip(np.rint(x), 1, L).astype(np.int64)


def _bimodal(L, n, rng):
    k = int(0.8 * n)
    return np.concatenate([rng.lognormal(np.log(L / 16), 0.7, k), rng.uniform(L / 2, L, n - k)])


def _spiky(L, n, rng):
    spikes = np.array([L, L // 2, L // 3 + 7, L // 8, 37, L - 11])
    return np.concatenate([rng.lognormal(np.log(L / 5), 1.0, n // 2),
                           rng.choice(spikes, n - n // 2, p=[0.1, 0.2, 0.2, 0.2, 0.2, 0.1])])


SHAPES = {"bimodal": _bimodal, "spiky": _spiky,
          "long-tail": lambda L, n, rng: rng.pareto(1.2, n) * L / 40 + 1}


def shape_histogram(shape: str, L: int, n: int = 200_000) -> np.ndarray:
    """The benchmark's input of ``shape``: ``lognormal`` (the default) or one of ``SHAPES``."""
    if shape == "lognormal":
        return lognormal_histogram(L, n)
    return packlib.histogram(_clip(SHAPES[shape](L, n, np.random.default_rng(1)), L), L)


def measured(fn):
    with PeakRss() as m:
        out = fn()
    return out, m.seconds, m.peak / 2**20


def measured_cpu(fn):
    """``measured``, and the CPU seconds of the call (this process): on a loaded machine its
    wall time grows with the load, its CPU time much less."""
    cpu = time.process_time()
    out, seconds, mib = measured(fn)
    return out, seconds, mib, time.process_time() - cpu


def gap(packs, bound):
    return f"{packs - bound:,} ({100 * (packs - bound) / bound:.3f} %)"


def reference_rows(L: int, n: int):
    """The published recipe (every depth-3 strategy, dense scipy NNLS, one solve) where it
    runs; its matrix has L x (strategies) entries, 22,102 columns at L = 512."""
    from benchmarks.bench_packing import reference_nnlshp

    h = lognormal_histogram(L, n)
    packs, seconds, mib = measured(lambda: reference_nnlshp(h.astype(float), L, 3))
    bound = packlib.lower_bound(h, L, 3).bound
    return (f"| {L:,} | 3 | the enumerating recipe + scipy NNLS | {packs:,} | — | {gap(packs, bound)} | {fmt(seconds)} "
            f"| {mib:,.0f} MiB |")


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


def rows(L: int, n: int, depths=(2, 3, None), repeat: int = 1, optimal: bool = False, exact: bool = True,
         shape: str = "lognormal"):
    """The table's rows at capacity ``L``: one per depth (see the module docstring)."""
    from packlib._nnls_limits import MAX_NNLS_LENGTH

    h = shape_histogram(shape, L, n)
    for depth in depths:
        bound = packlib.lower_bound(h, L, depth).bound
        runs = [measured_cpu(lambda: packlib.nnls_pack(h, L, depth)) for _ in range(max(1, repeat))]
        plan, mib = runs[0][0], max(r[2] for r in runs)
        seconds, cpu = min(r[1] for r in runs), min(r[3] for r in runs)
        against = "—"
        if exact and L <= MAX_NNLS_LENGTH:
            recipe, exact_seconds, _, exact_cpu = measured_cpu(lambda: packlib.nnls_pack(h, L, depth, exact=True))
            diff = plan.num_packs - recipe.num_packs
            against = f"{diff:+,} ({100 * diff / recipe.num_packs:+.3f} %), exact {fmt(exact_seconds)} ({fmt(exact_cpu)})"
        row = (f"| {L:,} | {depth or 'unlimited'} | {plan.info['length_class']} | {plan.num_packs:,} | {against} | "
               f"{gap(plan.num_packs, bound)} | {fmt(seconds)} ({fmt(cpu)}) | {mib:,.0f} MiB |")
        if optimal:
            best, opt_seconds, _ = measured(lambda: packlib.optimal_pack(h, L, depth))
            row += f" {best.num_packs - bound:,} | {fmt(opt_seconds)} |"
        yield row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="*",
                    default=[512, 768, 1024, 1536, 2048, 4096, 8192, 16384, 32768, 65536, 131072])
    ap.add_argument("--depths", nargs="*", default=["2", "3", "unlimited"], help="depth limits ('unlimited': None)")
    ap.add_argument("--n", type=int, default=200_000, help="sequences per histogram")
    ap.add_argument("--repeat", type=int, default=1, help="time nnls_pack this many times, report the least")
    ap.add_argument("--no-exact", action="store_true", help="leave out the exact recipe (minutes up to 2,048)")
    ap.add_argument("--optimal", action="store_true", help="also optimal_pack's gap to the bound and its time")
    ap.add_argument("--reference", action="store_true", help="also the enumerating recipe at L = 512")
    ap.add_argument("--compare", action="store_true", help="also compare(h, L) with its defaults at 2k, 8k and 32k")
    ap.add_argument("--solves", action="store_true", help="only the time of each NNLS solve (depth 3)")
    ap.add_argument("--shape", default="lognormal", choices=["lognormal", *SHAPES], help="the lengths' shape")
    args = ap.parse_args()
    depths = [None if d == "unlimited" else int(d) for d in args.depths]
    packlib.warmup()
    if args.solves:
        print("| L | solve | its time | time of the solves so far |")
        print("|---:|---:|---:|---:|")
        for L in args.lengths:
            for row in solve_rows(L, args.n):
                print(row, flush=True)
        return
    extra = " `optimal_pack` gap | time |" if args.optimal else ""
    print("| L | depth | class width | `nnls_pack` packs | against the exact recipe (its time) | gap to lower bound "
          "| time (CPU) | peak memory |" + extra)
    print("|---:|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if args.optimal else ""))
    if args.reference:
        print(reference_rows(512, args.n), flush=True)
    for L in args.lengths:
        for row in rows(L, args.n, depths, args.repeat, args.optimal, not args.no_exact, args.shape):
            print(row, flush=True)
    if args.compare:
        print("\n| L | compare(h, L) with its defaults: rows | refused | wall time |")
        print("|---:|---:|---:|---:|")
        for L in (2048, 8192, 32768):
            h = lognormal_histogram(L, args.n)
            table, seconds, _ = measured(lambda: packlib.compare(h, L, progress=False))
            refused = sum(r.packs is None for r in table)
            print(f"| {L:,} | {len(table)} | {refused} | {fmt(seconds)} |", flush=True)


if __name__ == "__main__":
    main()
