"""Benchmark: near-optimal histogram packing and its certified lower bound.

    python benchmarks/bench_optimal.py            # full run (the depth-3 arc-flow baseline takes ~1 min)
    python benchmarks/bench_optimal.py --quick    # Wikipedia depth 3 only, arc-flow baseline at depth 2

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
from benchmarks._common import fmt, lognormal_lengths, timed  # noqa: E402,F401






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


def lognormal_histogram(L=1024, n=2_000_000, seed=0):
    x = np.random.default_rng(seed).lognormal(np.log(L) - 1.2, 0.8, n)
    lengths = np.clip(np.rint(x), 1, L).astype(np.int64)
    return np.bincount(lengths, minlength=L + 1)[1:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="Wikipedia depth 3 only; arc-flow baseline at depth 2")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    repeat = 1 if args.quick else args.repeat

    wiki = packlib.datasets.wikipedia_512()
    cases = [("wikipedia-512", wiki, 3)]
    if not args.quick:
        cases += [("wikipedia-512", wiki, 2), ("wikipedia-512", wiki, 4), ("wikipedia-512", wiki, None),
                  ("lognormal-1024", lognormal_histogram(), 3)]

    t0 = time.perf_counter()
    packlib.optimal_pack(np.array([0, 3, 1, 2, 0, 1, 1, 1]), 3)
    packlib.optimal_pack(np.array([0, 3, 1, 2, 0, 1, 1, 1]), None)
    first = time.perf_counter() - t0
    print(f"first calls (numba compile or cache load, scipy/HiGHS import): {fmt(first)}\n")

    print(f"{'input':<15} {'depth':>5} {'method':<12} {'packs':>12} {'gap':>7} {'efficiency':>10} {'time':>9}")
    for name, h, depth in cases:
        d = "max" if depth is None else str(depth)
        t_opt, plan = timed(lambda: packlib.optimal_pack(h, depth), repeat)
        bound = plan.lower_bound
        rows = []
        for label, fn in (("spfhp", packlib.spfhp_pack), ("lpfhp", packlib.lpfhp_pack), ("nnlshp", packlib.nnls_pack)):
            t, p = timed(lambda: fn(h, depth), repeat)
            rows.append((label, p, t))
        rows.append(("optimal", plan, t_opt))
        for label, p, t in rows:
            print(f"{name:<15} {d:>5} {label:<12} {p.num_packs:>12,} {p.num_packs - bound:>7,} "
                  f"{100 * p.efficiency:>9.3f}% {fmt(t):>9}")
        t_lb, lb = timed(lambda: packlib.lower_bound(h, depth), repeat)
        print(f"{name:<15} {d:>5} {'lower_bound':<12} {lb.bound:>12,} {'':>7} {'':>10} {fmt(t_lb):>9}"
              f"   LP {lb.lp_value:,.3f}, {lb.info['rounds']} LP solves, {lb.info['columns']} patterns")
        t_nn = rows[2][2]
        print(f"{'':<15} {'':>5} optimal / nnlshp time: {t_opt / t_nn:.2f}x\n")

    print("baseline: whole arc-flow LP with scipy.optimize.linprog(method='highs')")
    base_cases = [(2, "wikipedia-512", wiki)] + ([] if args.quick else [(3, "wikipedia-512", wiki), (None, "wikipedia-512", wiki)])
    for depth, name, h in base_cases:
        t_lb, lb = timed(lambda: packlib.lower_bound(h, depth), repeat)
        t0 = time.perf_counter()
        value, arcs = arc_flow_lp(h, depth)
        t_af = time.perf_counter() - t0
        d = "max" if depth is None else str(depth)
        print(f"{name:<15} {d:>5} arc-flow LP {value:,.3f} (bound {math.ceil(value - 1e-6):,}, {arcs:,} arcs) {fmt(t_af):>9}; "
              f"lower_bound {lb.lp_value:,.3f} (bound {lb.lp_bound:,}) {fmt(t_lb):>9}; speed-up {t_af / t_lb:.0f}x")


if __name__ == "__main__":
    main()
