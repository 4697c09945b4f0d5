"""Benchmark: near-optimal histogram packing and its certified lower bound.

    python benchmarks/bench_optimal.py            # full run (the depth-3 arc-flow baseline takes ~1 min)
    python benchmarks/bench_optimal.py --quick    # Wikipedia depth 3 only, arc-flow baseline at depth 2
    python benchmarks/bench_optimal.py --long     # only the long-context rows (L = 8k-128k, and 512 for reference)
    python benchmarks/bench_optimal.py --against DIR   # the split kernels vs another checkout's

Long-context rows (issues 14 and 22): ``optimal_pack`` at L = 8,192 (3 M lognormal lengths,
unlimited and depth 8), 32,768 (2 M, bimodal) and 131,072 (1 M, bimodal); with depth limits
that bind on many short documents beside long ones (8k at depths 3, 4 and 8, 32k at 16,
128k at 64); Wikipedia and a SQuAD-like input at 512 for reference. Each with its gap to
the proven bound, its certificate verified by the independent numpy checker of
``tests/naive_certificate.py`` (which imports nothing from packlib), the peak memory
(tracemalloc, a separate call), and two baselines in the same process: the fill route
(the exact fill with its exchanges, L2 and simple bounds: no grid LP) and per-sequence best-fit decreasing.

Rows: for each input and depth, the packs and time of SPFHP, LPFHP, NNLSHP and
``optimal_pack`` (with each one's gap to the proven bound), and of ``lower_bound`` against a
straightforward baseline in the same process: the arc-flow LP of the cutting-stock problem
(one variable per arc of a (tokens used, sequences used) graph) handed whole to HiGHS
through ``scipy.optimize.linprog``, the generic model of shared/reference/packing.md.
Times are medians of warm runs; the first call (numba compile or cache load, imports) is
reported separately.
"""
from __future__ import annotations

import argparse
import math
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import packlib  # noqa: E402
from benchmarks._common import fmt, interleaved, lognormal_lengths, old_kernels, timed  # noqa: E402,F401






def arc_flow_lp(h, depth):
    """Baseline: the arc-flow LP (Valerio de Carvalho, 1999) solved whole by HiGHS.

    Nodes are (tokens used, sequences used); an item arc adds one present length, a loss
    arc closes a pack. Minimise the packs leaving the empty node, subject to flow
    conservation and each length covered at least ``h`` times. Returns the LP value."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    L = len(h)
    present = np.flatnonzero(h) + 1
    D = L if depth is None else depth
    levels = 1 if depth is None else D + 1  # unlimited: the sequence count is irrelevant

    def node(u, c):
        return u * levels + (0 if depth is None else c)

    n_nodes = (L + 1) * levels
    sink = n_nodes
    tails, heads, lens = [], [], []
    for u in range(L):
        for c in range(levels if depth is not None else 1):
            if depth is not None and c >= D:
                continue
            for l in present:
                if u + l <= L:
                    tails.append(node(u, c))
                    heads.append(node(u + l, c + (0 if depth is None else 1)))
                    lens.append(l)
    n_item = len(tails)
    for u in range(1, L + 1):  # loss arcs: close the pack
        for c in range(levels):
            tails.append(node(u, c))
            heads.append(sink)
            lens.append(0)
    tails, heads, lens = np.array(tails), np.array(heads), np.array(lens)
    A = len(tails)
    src = node(0, 0)
    # conservation at every node except source and sink: inflow - outflow = 0
    rows = np.concatenate([heads, tails])
    cols = np.concatenate([np.arange(A), np.arange(A)])
    vals = np.concatenate([np.ones(A), -np.ones(A)])
    keep = (rows != src) & (rows != sink)
    A_eq = coo_matrix((vals[keep], (rows[keep], cols[keep])), shape=(n_nodes + 1, A)).tocsr()
    row_of = np.full(L + 1, -1)
    row_of[present] = np.arange(present.size)
    item = np.flatnonzero(lens > 0)
    A_ub = coo_matrix((-np.ones(item.size), (row_of[lens[item]], item)), shape=(present.size, A)).tocsr()
    cost = (tails == src).astype(float)
    res = linprog(cost, A_ub=A_ub, b_ub=-h[present - 1].astype(float), A_eq=A_eq,
                  b_eq=np.zeros(n_nodes + 1), bounds=(0, None), method="highs")
    assert res.status == 0, res.message
    return res.fun, A


def bimodal_histogram(L, n, seed=0, short_fraction=0.8):
    """A mix of short and long documents: 80 % lognormal around 600 tokens (sigma 0.9),
    20 % lognormal around ``L / e`` (sigma 0.6), clipped to ``[1, L]``."""
    rng = np.random.default_rng(seed)
    n_short = rng.binomial(n, short_fraction)
    short = rng.lognormal(np.log(600), 0.9, n_short)
    long = rng.lognormal(np.log(L) - 1.0, 0.6, n - n_short)
    lengths = np.clip(np.rint(np.concatenate([short, long])), 1, L).astype(np.int64)
    return np.bincount(lengths, minlength=L + 1)[1:]


def mixed_histogram(L, n, short_fraction, seed=1):
    """Issue 22's shape: many short documents beside long ones (:func:`bimodal_histogram`
    with another seed and share of short ones)."""
    return bimodal_histogram(L, n, seed=seed, short_fraction=short_fraction)


def squad_like_histogram(n=88_000, seed=0):
    """A SQuAD-1.1-like input at L = 512 (synthetic: no SQuAD histogram ships with packlib):
    question + context windows, lognormal around 160 tokens (sigma 0.45), at least 24, and
    the 384-token windows of long contexts cut with a document stride."""
    x = np.random.default_rng(seed).lognormal(np.log(160), 0.45, n)
    lengths = np.clip(np.rint(x), 24, 384).astype(np.int64)
    return np.bincount(lengths, minlength=513)[1:]


LONG_CASES = [  # (name, L, histogram factory, depth, goal in seconds)
    ("lognormal-8k, 3M", 8192, lambda: lognormal_histogram(8192, 3_000_000), None, 5.0),
    ("lognormal-8k, 3M", 8192, lambda: lognormal_histogram(8192, 3_000_000), 8, 10.0),
    ("bimodal-32k, 2M", 32768, lambda: bimodal_histogram(32768, 2_000_000), None, 20.0),
    ("bimodal-128k, 1M", 131072, lambda: bimodal_histogram(131072, 1_000_000), None, 60.0),
    # issue 22: depth limits that bind, on many short documents beside long ones
    ("mixed-8k 70%, 2M", 8192, lambda: mixed_histogram(8192, 2_000_000, 0.7), 4, 10.0),
    ("mixed-8k 80%, 3M", 8192, lambda: mixed_histogram(8192, 3_000_000, 0.8), 8, 10.0),
    ("mixed-8k 70%, 2M", 8192, lambda: mixed_histogram(8192, 2_000_000, 0.7), 3, 10.0),
    ("mixed-32k 88%, 1.5M", 32768, lambda: mixed_histogram(32768, 1_500_000, 0.88), 16, 20.0),
    ("mixed-128k 90%, 0.8M", 131072, lambda: mixed_histogram(131072, 800_000, 0.9), 64, 60.0),
    ("wikipedia-512", 512, lambda: packlib.datasets.wikipedia_512(), 3, 5.0),
    ("wikipedia-512", 512, lambda: packlib.datasets.wikipedia_512(), None, 5.0),
    ("squad-like-512", 512, squad_like_histogram, 3, 5.0),
]


def fill_route(h, L, depth):
    """The long-context route without the grid LPs, in this process: the best exact fill
    (this checkout's, the depth repair by exchanges included), and the best of the simple
    and L2 bounds (packlib 0.3's bounds; its fill had no exchanges beyond the shortest
    sequences)."""
    from packlib.optimal._certificates import _best_certificate, _l2_certificate, _simple_certificates, _verified
    from packlib.optimal._solver import _fill_plan

    packs = int(_fill_plan(h, L, depth)[2].sum())
    cert = _best_certificate(_simple_certificates(h, L, depth) + [_verified(_l2_certificate(h, L, depth)[0])])
    return packs, cert.bound


def long_context(repeat):
    """The issue-14 and issue-22 rows: time, gap, independent certificate check, memory,
    the fill route and BFD as baselines."""
    import tracemalloc

    sys.path.insert(0, str(ROOT / "tests"))
    import naive_certificate  # noqa: E402  (independent of packlib)

    print("long context: optimal_pack vs the fill route (exact fill and exchanges, L2 bound) and per-sequence BFD, same process")
    print(f"{'input':<21} {'depth':>5} {'packs':>10} {'bound':>10} {'gap':>5} {'gap %':>8} {'time':>8} {'goal':>5} "
          f"{'peak mem':>9} {'cert check':>11} {'fill packs':>10} {'fill bound':>10} {'BFD packs':>10} {'BFD time':>9}")
    for name, L, make, depth, goal in LONG_CASES:
        h = make()
        packlib.optimal_pack(h[:64], max_sequences_per_pack=depth)  # kernels loaded
        t_opt, plan = timed(lambda: packlib.optimal_pack(h, max_sequences_per_pack=depth), repeat)
        tracemalloc.start()
        packlib.optimal_pack(h, max_sequences_per_pack=depth)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        t_lb, lb = timed(lambda: packlib.lower_bound(h, max_sequences_per_pack=depth), 1)
        assert lb.bound == plan.lower_bound
        t0 = time.perf_counter()
        proven = naive_certificate.check_fast(plan.bound.certificate, h)
        t_check = time.perf_counter() - t0
        assert proven == plan.lower_bound, (proven, plan.lower_bound)
        old_packs, old_bound = fill_route(h, L, depth) if L > 1024 else (None, None)
        lengths = np.repeat(np.arange(1, L + 1), h)
        t_bfd, bfd = timed(lambda: packlib.bfd_pack(lengths, L, depth), 1)
        d = "max" if depth is None else str(depth)
        gap_pct = 100 * plan.gap / plan.lower_bound
        old = f"{old_packs:>10,} {old_bound:>10,}" if old_packs else f"{'-':>10} {'-':>10}"
        print(f"{name:<21} {d:>5} {plan.num_packs:>10,} {plan.lower_bound:>10,} {plan.gap:>5,} {gap_pct:>7.4f}% "
              f"{fmt(t_opt):>8} {goal:>4.0f}s {peak / 2**20:>7.0f} MB {fmt(t_check):>11} {old} {len(bfd):>10,} "
              f"{fmt(t_bfd):>9}")
        grid = plan.bound.info.get("grids") or "-"
        print(f"{'':<21} {'':>5} within 0.01 % or 1 pack: {'yes' if plan.gap <= max(1, plan.lower_bound // 10_000) else 'NO'}; "
              f"time goal: {'met' if t_opt <= goal else 'NOT met'}; source {plan.info['source']}, grids {grid}; "
              f"lower_bound alone {fmt(t_lb)}; {plan.message}")
    print()


def lognormal_histogram(L=1024, n=2_000_000, seed=0):
    x = np.random.default_rng(seed).lognormal(np.log(L) - 1.2, 0.8, n)
    lengths = np.clip(np.rint(x), 1, L).astype(np.int64)
    return np.bincount(lengths, minlength=L + 1)[1:]


def compare_kernels(old_root: str, repeat: int = 7) -> None:
    """The kernels split into helpers in 0.3 (exact_fill, the greedy packers,
    NNLSHP's column generation) against another checkout's, same inputs, same process,
    interleaved, best of ``repeat``; the results must be identical."""
    from packlib._kernels import greedy, nnls, optimal

    old = old_kernels(old_root, ["growable", "greedy", "nnls", "optimal"])
    wiki = packlib.datasets.wikipedia_512()
    rng = np.random.default_rng(0)
    h8k = np.bincount(np.clip(rng.lognormal(np.log(8192) - 2.0, 1.2, 3_000_000).astype(np.int64), 1, 8192),
                      minlength=8193)[1:].astype(np.int64)
    h32k = np.bincount(np.concatenate([rng.integers(1, 2048, 1_500_000), rng.integers(2048, 32768, 500_000)]),
                       minlength=32769)[1:].astype(np.int64)
    w = np.sqrt(np.where(np.arange(512) < 8, 8 / 1024, 1.0))
    cases = [
        ("exact_fill, L=8k, mode 2", lambda m: m["optimal"].exact_fill(h8k, 8192, 0, 2), optimal.exact_fill, (h8k, 8192, 0, 2)),
        ("exact_fill, L=8k, depth 8, mode 3", None, optimal.exact_fill, (h8k, 8192, 8, 3)),
        ("exact_fill, L=32k, depth 16, mode 4", None, optimal.exact_fill, (h32k, 32768, 16, 4)),
        # depth_repair: rows in an arena since issue 22 (it returns CSR now), not compared
        ("spfhp, Wikipedia, depth 3", None, greedy.spfhp, (wiki, 512, 3)),
        ("lpfhp, Wikipedia, unlimited", None, greedy.lpfhp, (wiki, 512, 512)),
        ("nnls_histogram_pack, Wikipedia, depth 3", None, nnls.nnls_histogram_pack, (wiki, 512, 3, w, 20)),
    ]
    print(f"# kernels of {old_root} (old) vs this checkout (new), best of {repeat}, interleaved")
    print(f"{'kernel':<42} {'old':>10} {'new':>10} {'new/old':>8}  same")
    for label, _, fn, args in cases:
        module = fn.__module__.rsplit(".", 1)[1]
        old_fn = getattr(old[module], fn.__name__)
        a, b = old_fn(*args), fn(*args)
        same = all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a, b))
        t_old, t_new = interleaved([lambda: old_fn(*args), lambda: fn(*args)], repeat)
        print(f"{label:<42} {fmt(t_old):>10} {fmt(t_new):>10} {t_new / t_old:>8.3f}  {same}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="Wikipedia depth 3 only; arc-flow baseline at depth 2")
    ap.add_argument("--long", action="store_true", help="only the long-context rows (L = 8k-128k)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--against", metavar="DIR", help="time the split kernels against the checkout in DIR")
    args = ap.parse_args()
    if args.against:
        compare_kernels(args.against)
        return
    repeat = 1 if args.quick else args.repeat
    if args.long:
        long_context(repeat)
        return

    wiki = packlib.datasets.wikipedia_512()
    cases = [("wikipedia-512", wiki, 3)]
    if not args.quick:
        cases += [("wikipedia-512", wiki, 2), ("wikipedia-512", wiki, 4), ("wikipedia-512", wiki, None),
                  ("lognormal-1024", lognormal_histogram(), 3)]

    t0 = time.perf_counter()
    packlib.optimal_pack(np.array([0, 3, 1, 2, 0, 1, 1, 1]), max_sequences_per_pack=3)
    packlib.optimal_pack(np.array([0, 3, 1, 2, 0, 1, 1, 1]), max_sequences_per_pack=None)
    first = time.perf_counter() - t0
    print(f"first calls (numba compile or cache load, scipy/HiGHS import): {fmt(first)}\n")

    print(f"{'input':<15} {'depth':>5} {'method':<12} {'packs':>12} {'gap':>7} {'efficiency':>10} {'time':>9}")
    for name, h, depth in cases:
        d = "max" if depth is None else str(depth)
        t_opt, plan = timed(lambda: packlib.optimal_pack(h, max_sequences_per_pack=depth), repeat)
        bound = plan.lower_bound
        rows = []
        for label, fn in (("spfhp", packlib.spfhp_pack), ("lpfhp", packlib.lpfhp_pack), ("nnls", packlib.nnls_pack)):
            t, p = timed(lambda: fn(h, max_sequences_per_pack=depth), repeat)
            rows.append((label, p, t))
        rows.append(("optimal", plan, t_opt))
        for label, p, t in rows:
            print(f"{name:<15} {d:>5} {label:<12} {p.num_packs:>12,} {p.num_packs - bound:>7,} "
                  f"{100 * p.efficiency:>9.3f}% {fmt(t):>9}")
        t_lb, lb = timed(lambda: packlib.lower_bound(h, max_sequences_per_pack=depth), repeat)
        print(f"{name:<15} {d:>5} {'lower_bound':<12} {lb.bound:>12,} {'':>7} {'':>10} {fmt(t_lb):>9}"
              f"   LP {lb.lp_value:,.3f}, {lb.info['rounds']} LP solves, {lb.info['columns']} patterns")
        t_nn = rows[2][2]
        print(f"{'':<15} {'':>5} optimal / nnls time: {t_opt / t_nn:.2f}x\n")

    if not args.quick:
        long_context(repeat)

    print("baseline: whole arc-flow LP with scipy.optimize.linprog(method='highs')")
    base_cases = [(2, "wikipedia-512", wiki)] + ([] if args.quick else [(3, "wikipedia-512", wiki), (None, "wikipedia-512", wiki)])
    for depth, name, h in base_cases:
        t_lb, lb = timed(lambda: packlib.lower_bound(h, max_sequences_per_pack=depth), repeat)
        t0 = time.perf_counter()
        value, arcs = arc_flow_lp(h, depth)
        t_af = time.perf_counter() - t0
        d = "max" if depth is None else str(depth)
        print(f"{name:<15} {d:>5} arc-flow LP {value:,.3f} (bound {math.ceil(value - 1e-6):,}, {arcs:,} arcs) {fmt(t_af):>9}; "
              f"lower_bound {lb.lp_value:,.3f} (bound {lb.lp_bound:,}) {fmt(t_lb):>9}; speed-up {t_af / t_lb:.0f}x")


if __name__ == "__main__":
    main()
