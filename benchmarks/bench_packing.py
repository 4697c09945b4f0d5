"""Benchmark: histogram packing, assign and per-sequence packing against plain baselines.

    python benchmarks/bench_packing.py            # full run (the scipy NNLS baseline takes ~30 s)
    python benchmarks/bench_packing.py --quick    # skip the slow baselines
    python benchmarks/bench_packing.py --scaling  # NNLSHP against L up to 2048, 1 M lengths
                                                  # (docs/guide.md's table: bench_nnls_long.py)

Every row times packlib and a straightforward implementation of the same recipe in the
same process and prints the ratio: the machine is shared and noisy, ratios travel better
than absolute times. Times are medians of warm runs; numba compilation is measured
separately (import, first call with a cold cache, first call with a warm cache).
"""
from __future__ import annotations

import argparse
import bisect
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import packlib  # noqa: E402
from benchmarks._common import fmt, lognormal_lengths, timed  # noqa: E402,F401
from tests import naive  # noqa: E402  (plain-Python references double as baselines)






# ----------------------------------------------------------------------- baselines


def reference_nnlshp(h, L, depth):
    """The paper's recipe as published: all exact strategies, dense matrix, scipy NNLS,
    one solve, rounding, every left-over paired with a dummy. Returns the pack count."""
    from scipy.optimize import nnls

    strategies = []

    def rec(prefix, start, remaining, slots):
        if remaining == 0:
            strategies.append(tuple(prefix))
            return
        if slots == 0:
            return
        for x in range(start, remaining + 1):
            rec(prefix + [x], x, remaining - x, slots - 1)

    rec([], 1, L, depth)
    A = np.zeros((L, len(strategies)))
    for j, s in enumerate(strategies):
        for x in s:
            A[x - 1, j] += 1
    w0 = np.ones(L)
    w0[:8] = 8 / (2 * L)
    w = np.sqrt(w0)
    x, _ = nnls(w[:, None] * A, w * h, maxiter=50 * A.shape[1])
    x = np.where(x < 2, np.rint(x), np.floor(x))
    residual = h - A @ x
    return int(x.sum() + residual[residual > 0].sum())


def numpy_assign(plan, lengths, seed):
    """A plain numpy plan -> packs: sort ids by (length, random key), walk the plan."""
    rng = np.random.default_rng(seed)
    order = np.lexsort((rng.random(lengths.size), lengths))
    starts = np.concatenate(([0], np.cumsum(np.bincount(lengths, minlength=plan.max_sequence_length + 1))))
    slot_lengths = np.repeat(plan.strategies, plan.counts, axis=0).ravel()
    slot_lengths = slot_lengths[slot_lengths > 0]
    # k-th slot of length l takes the k-th id of length l
    rank = np.empty(slot_lengths.size, np.int64)
    by_len = np.argsort(slot_lengths, kind="stable")
    sorted_lengths = slot_lengths[by_len]
    rank[by_len] = np.arange(slot_lengths.size) - starts[sorted_lengths]
    return order[starts[slot_lengths] + rank]


def python_bfd(lengths, L):
    """Best-fit decreasing in plain Python: a sorted list of (free space, pack) + bisect."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    free = []  # sorted (free, pack id)
    n_packs = 0
    for i in order:
        l = lengths[i]
        k = bisect.bisect_left(free, (l, -1))
        if k == len(free):
            bisect.insort(free, (L - l, n_packs))
            n_packs += 1
        else:
            f, p = free.pop(k)
            bisect.insort(free, (f - l, p))
    return n_packs


# ------------------------------------------------------------------- measurements


def compile_costs(tmp):
    """Import time and first-call times with a cold and a warm numba cache (subprocesses)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=tmp)
    code = (
        "import time; t=time.perf_counter(); import packlib; ti=time.perf_counter()-t; "
        "h=packlib.datasets.wikipedia_512(); t=time.perf_counter(); "
        "[f(h, 3) for f in (packlib.spfhp_pack, packlib.lpfhp_pack, packlib.nnls_pack)]; "
        "packlib.bfd_pack([3, 4], 8); packlib.ffd_pack([3, 4], 8); "
        "packlib.lpfhp_pack([1, 1], max_sequences_per_pack=3).assign([1, 2]); print(ti, time.perf_counter()-t)"
    )
    rows = []
    for label in ("cold cache", "warm cache"):
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        t_import, t_first = map(float, out.stdout.split())
        rows.append((label, t_import, t_first))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="skip the slow baselines (scipy NNLS on Wikipedia)")
    ap.add_argument("--scaling", action="store_true", help="only NNLSHP against L up to 2048 (1 M lengths)")
    args = ap.parse_args()
    if args.scaling:
        return scaling()
    h = packlib.datasets.wikipedia_512()
    L = h.size
    rows = []  # (what, packlib time, baseline time, baseline name, note)

    with tempfile.TemporaryDirectory() as tmp:
        costs = compile_costs(tmp)
    packlib.warmup()

    # histogram packers
    for name, pack, longest in (("SPFHP", packlib.spfhp_pack, False), ("LPFHP", packlib.lpfhp_pack, True)):
        for depth in (3, None):
            t, plan = timed(lambda: pack(h, max_sequences_per_pack=depth), 20)
            tb, ref = timed(lambda: naive.greedy_histogram_pack(h.tolist(), L, depth, longest), 3)
            assert sum(ref[1]) == plan.num_packs
            rows.append((f"{name} Wikipedia depth {depth or 'unlimited'}", t, tb, "plain Python", f"{plan.num_packs:,} packs"))

    for depth in (3, None):
        t, plan = timed(lambda: packlib.nnls_pack(h, max_sequences_per_pack=depth), 5)
        tb = ref_packs = None
        if depth == 3 and not args.quick:
            tb, ref_packs = timed(lambda: reference_nnlshp(h.astype(float), L, 3), 1)
        note = f"{plan.num_packs:,} packs ({100 * plan.efficiency:.3f} %)"
        if ref_packs:
            note += f"; reference recipe {ref_packs:,}"
        base = "recipe + scipy NNLS" if depth else "none: ~10^21 strategies to list"
        rows.append((f"NNLSHP Wikipedia depth {depth or 'unlimited'}", t, tb, base, note))

    # assign: 16.3 M lengths drawn from the histogram
    lengths = naive.lengths_from_histogram(h, seed=0)
    plan = packlib.nnls_pack(h, max_sequences_per_pack=3)
    t, packs = timed(lambda: plan.assign(lengths, seed=0), 5)
    tb, _ = timed(lambda: numpy_assign(plan, lengths, 0), 2)
    rows.append((f"assign {lengths.size / 1e6:.1f} M lengths", t, tb, "numpy sort + gather", f"{packs.num_packs:,} packs"))
    mem = assign_memory()

    # per-sequence packers: 2 M lognormal lengths clipped to [3, 512]
    seq = lognormal_lengths(2_000_000, seed=0)
    bound = -(-int(seq.sum()) // 512)
    t_ffd, ffd = timed(lambda: packlib.ffd_pack(seq, 512), 5)
    t_bfd, bfd = timed(lambda: packlib.bfd_pack(seq, 512), 5)
    tb, n_py = timed(lambda: python_bfd(seq.tolist(), 512), 1)
    assert n_py == bfd.num_packs
    rows.append(("FFD 2 M lognormal lengths", t_ffd, tb, "plain Python BFD", f"{ffd.num_packs:,} packs"))
    rows.append(("BFD 2 M lognormal lengths", t_bfd, tb, "plain Python BFD", f"{bfd.num_packs:,} packs (bound {bound:,})"))

    print(f"packlib {packlib.__version__}, numba {__import__('numba').__version__}, numpy {np.__version__}, {os.cpu_count()} cores\n")
    print("| what | packlib | baseline | baseline time | speed-up | result |")
    print("|---|---:|---|---:|---:|---|")
    for what, t, tb, base, note in rows:
        ratio = f"{tb / t:,.0f}x" if tb else "—"
        print(f"| {what} | {fmt(t)} | {base} | {fmt(tb)} | {ratio} | {note} |")
    print("\n| compile cost | import packlib | first calls (all kernels above) |")
    print("|---|---:|---:|")
    for label, ti, tf in costs:
        print(f"| {label} | {fmt(ti)} | {fmt(tf)} |")
    print(f"\nassign peak extra memory: {mem:.2f} int64 per sequence (its outputs alone are 2.5)")


def scaling(max_lengths=(256, 512, 1024, 2048)):
    """NNLSHP against L: 1 M lognormal lengths with median L/4 (sigma 0.9) at each L."""
    print("| L | depth | nnls packs | lpfhp packs | tokens / L | nnls time |")
    print("|---:|---|---:|---:|---:|---:|")
    packlib.warmup()
    for L in max_lengths:
        x = np.random.default_rng(0).lognormal(np.log(L / 4), 0.9, 1_000_000)
        h = packlib.histogram(np.clip(np.rint(x), 1, L).astype(np.int64), L)
        for depth in (3, None):
            t, plan = timed(lambda: packlib.nnls_pack(h, max_sequences_per_pack=depth), 1)
            lp = packlib.lpfhp_pack(h, max_sequences_per_pack=depth)
            print(f"| {L} | {depth or 'unlimited'} | {plan.num_packs:,} | {lp.num_packs:,} | "
                  f"{-(-plan.num_tokens // L):,} | {fmt(t)} |", flush=True)


def assign_memory():
    """Peak resident-memory growth of ``plan.assign`` on 16.3 M lengths, in int64 per
    sequence (Linux: the peak is reset through /proc/self/clear_refs just before)."""
    code = """
import numpy as np, packlib
def status(key):
    for line in open('/proc/self/status'):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
h = packlib.datasets.wikipedia_512(); plan = packlib.nnls_pack(h, max_sequences_per_pack=3)
lengths = np.repeat(np.arange(1, 513), h); np.random.default_rng(0).shuffle(lengths)
packlib.lpfhp_pack([1, 1], max_sequences_per_pack=3).assign([1, 2])
open('/proc/self/clear_refs', 'w').write('5')
r0 = status('VmRSS:'); p = plan.assign(lengths); r1 = status('VmHWM:')
print((r1 - r0) / 8 / lengths.size)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return float(out.stdout.strip())


if __name__ == "__main__":
    main()
