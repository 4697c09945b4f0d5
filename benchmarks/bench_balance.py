"""Benchmark: compute balance across data-parallel ranks, packlib against the peers' code.

    pip install -e ".[test]" transformers && pip install --no-deps trl axolotl
    python benchmarks/bench_balance.py            # the four workloads, then 1 M samples x 64 ranks
    python benchmarks/bench_balance.py --quick    # smaller epochs
    python benchmarks/bench_balance.py --windows  # packlib's window trade-off on the same workloads
    python benchmarks/bench_balance.py --only "long documents, 60k"   # one workload
    python benchmarks/bench_balance.py --order    # the order over seeds 0-9 (issue 29's table)
    python benchmarks/bench_balance.py --planners packlib,axolotl   # some planners only
    python benchmarks/bench_balance.py --sensitivity   # plan with one b/a, measure under another; timing noise
    git archive 856cae8 packlib | tar -x -C /tmp/old && python benchmarks/bench_balance.py --order --against /tmp/old

On lengths drawn here (seeded), with a sequence of ``l`` tokens costing ``l + l**2 / (6 h)``
(``h = 4096``, full attention: ``packlib.transformer_cost(4096, causal=False)``), one run,
side by side:

- **packlib**: ``packlib.balance`` (default window);
- **TRL**: ``trl.pack_dataset(strategy="bfd")`` on a ``datasets.Dataset`` of the lengths'
  token lists, its packed rows shuffled and dealt round-robin (``DistributedSampler``: rank
  ``r`` gets rows ``r, r + W, ...``), ``M`` rows per rank per step, the rows that do not
  fill a last step dropped;
- **axolotl**: each rank's shard of the shuffled epoch (``r::W``) packed by axolotl's own
  ``pack_parallel`` (first fit in the shard's order, groups of 100,000, ``safe_mode``, one
  process), ``M`` bins per step, all ranks cut to the shortest rank's number of steps (as
  its sampler's ``reduce_and_broadcast`` does). axolotl's module imports torch and its
  distributed helpers at the top; without torch they are stubbed (the packing functions
  are axolotl's, unchanged).

Columns: balance (total cost / (W x sum over steps of the slowest rank's cost): ranks meet
once per step, DDP with accumulation), micro-batch balance (total cost / (W x sum over
steps and micro-batch rounds of the slowest rank's micro-batch): ranks meet at every
micro-batch, FSDP / ZeRO-3), token efficiency (tokens / (steps x W x M x L)), samples
dropped, planning time (packlib warm: its first call, numba compile or cache load, is
printed apart), peak memory (the planner's process, above its size after its imports: each
planner runs in a fresh process), "tenths": the largest deviation of a tenth of the epoch's
training order (step by step, rank by rank, micro-batch by micro-batch) from the mean sample
length of the whole, beside a plain shuffle's of the same samples (the median of ten
shuffles), and Spearman's correlation of step and sample length (a planner may reorder
samples; it must not sort them, nor drift long ones later).

The workloads: chat-like, long documents (100k), code and prose, Wikipedia lengths, and
issue 29's long-document epoch (60,000 samples, L = 32k, 32 ranks x 2, drawn here with
another seed: the issue's exact lengths are not given); then 1 M chat-like samples x 64
ranks (no TRL: its token lists would not fit this machine's memory). A peer that is not
installed is reported as such.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import pathlib
import resource
import sys
import time
import types

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests import balance_workloads  # noqa: E402

H = 4096


# ------------------------------------------------------------------------------ workloads


def workloads(quick: bool):
    """(name, lengths, L, ranks, micro-batches), drawn with fixed seeds."""
    rng = np.random.default_rng(2026)
    n = 40_000 if quick else 200_000
    chat = np.clip(np.rint(rng.lognormal(np.log(600), 1.0, n)), 1, 8192).astype(np.int64)
    m = n // 2
    docs = np.concatenate([rng.lognormal(np.log(2500), 1.1, int(m * 0.85)), rng.uniform(8000, 60000, m - int(m * 0.85))])
    rng.shuffle(docs)
    docs = np.clip(np.rint(docs), 16, 32768).astype(np.int64)
    code = rng.lognormal(np.log(900), 0.9, n // 2)
    prose = rng.pareto(1.3, n - n // 2) * 1500 + 200
    mix = np.concatenate([code, prose])
    rng.shuffle(mix)
    mix = np.clip(np.rint(mix), 8, 16384).astype(np.int64)
    import packlib

    h = packlib.datasets.wikipedia_512().astype(np.float64)
    wiki = rng.choice(np.arange(1, 513), size=5 * n, p=h / h.sum()).astype(np.int64)
    return [("chat-like", chat, 8192, 8, 4), ("long documents", docs, 32768, 32, 2),
            ("code and prose", mix, 16384, 16, 2), ("Wikipedia lengths", wiki, 512, 16, 4),
            ("long documents, 60k", long_documents(12_000 if quick else 60_000), 32768, 32, 2)]


def long_documents(n, seed=2027):
    """Issue 29's long-document epoch, of its shape (tests/balance_workloads.py builds it)."""
    return balance_workloads.long_documents(n, seed)


def order_figures(lengths, order, step):
    """The largest tenth deviation of ``order`` (sample ids in training order; ``step``: the
    step of each), a plain shuffle's (the median of ten shuffles of the same samples) and
    Spearman's correlation of step and length."""
    from scipy.stats import spearmanr

    shuffles = [np.abs(balance_workloads.tenth_deviations(lengths, np.random.default_rng(100 + k).permutation(order))).max()
                for k in range(10)]
    return {"tenths": float(np.abs(balance_workloads.tenth_deviations(lengths, order)).max()), "shuffle": float(np.median(shuffles)),
            "spearman": float(spearmanr(step, lengths[order]).statistic)}


def measure(lengths, L, W, M, plan_slots):
    """The figures of ``plan_slots`` = list over steps of list over ranks of the rank's ``M``
    rows (arrays of sample ids, micro-batch by micro-batch)."""
    import packlib

    a, b = packlib.transformer_cost(H, causal=False)
    c = a * lengths + b * lengths.astype(np.float64) ** 2
    steps = len(plan_slots)
    cost = np.zeros((steps, W, M))
    tokens = 0
    seen = np.zeros(lengths.size, np.int64)
    for s, ranks in enumerate(plan_slots):
        for r, rows in enumerate(ranks):
            assert len(rows) == M, "M micro-batches per rank per step"
            for m, ids in enumerate(rows):
                ids = np.asarray(ids, dtype=np.int64)
                cost[s, r, m] = c[ids].sum()
                tokens += int(lengths[ids].sum())
                seen[ids] += 1
    assert seen.max(initial=0) <= 1, "a sample scheduled twice"
    worst = cost.sum(axis=2).max(axis=1).sum()
    worst_mb = cost.max(axis=1).sum()
    # the order samples are trained in: step by step, rank by rank, micro-batch by micro-batch
    flat = [np.asarray(ids, dtype=np.int64) for ranks in plan_slots for rows in ranks for ids in rows]
    order = np.concatenate(flat)
    step = np.repeat(np.arange(steps), [sum(len(ids) for rows in ranks for ids in rows) for ranks in plan_slots])
    return {"balance": cost.sum() / (W * worst) if worst else 1.0,
            "micro_batch_balance": cost.sum() / (W * worst_mb) if worst_mb else 1.0,
            "efficiency": tokens / (steps * W * M * L), "dropped": lengths.size - order.size, "steps": steps,
            **order_figures(lengths, order, step)}


def run_packlib(lengths, L, W, M):
    import packlib

    t0 = time.perf_counter()
    packlib.balance(lengths[:2000], L, world_size=min(W, 2), micro_batches=1)  # first call: compile or load
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    s = packlib.balance(lengths, L, world_size=W, micro_batches=M, cost=packlib.transformer_cost(H, causal=False))
    seconds = time.perf_counter() - t0
    o, ix = s.packs.offsets, s.packs.indices
    slots = [[[ix[o[k]:o[k + 1]] for k in range((st * W + r) * M, (st * W + r + 1) * M)] for r in range(W)]
             for st in range(s.num_steps)]
    return seconds, slots, first


def run_trl(lengths, L, W, M, seed=0):
    import datasets
    import pyarrow as pa
    from trl import pack_dataset

    # each row's first token is its row id (the others 0): it survives packing at the start
    # of its segment, which tells which sample every segment of TRL's output is
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    first = np.zeros(int(offsets[-1]), np.int32)
    first[offsets[:-1]] = np.arange(lengths.size, dtype=np.int32)
    ds = datasets.Dataset(pa.table({"input_ids": pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(first))}))
    t0 = time.perf_counter()
    packed = pack_dataset(ds, seq_length=L, strategy="bfd")
    seconds = time.perf_counter() - t0
    table = packed.data.table
    seq = table.column("seq_lengths").combine_chunks()
    tok = table.column("input_ids").combine_chunks()
    seg_len = seq.values.to_numpy().astype(np.int64)
    values = tok.values.to_numpy()[int(tok.offsets[0].as_py()):]
    starts = np.concatenate(([0], np.cumsum(seg_len)[:-1]))
    sample = values[starts].astype(np.int64)
    assert np.array_equal(np.sort(sample), np.arange(lengths.size)), "every sample once in TRL's output"
    rows = np.split(sample, seq.offsets.to_numpy()[1:-1] - seq.offsets.to_numpy()[0])
    perm = np.random.default_rng(seed).permutation(len(rows))  # DistributedSampler(shuffle=True)
    per_rank = len(rows) // W
    steps = per_rank // M
    slots = [[[rows[perm[(st * M + m) * W + r]] for m in range(M)] for r in range(W)] for st in range(steps)]
    return seconds, slots, None


def _axolotl_module():
    """axolotl's multipack module; its torch and distributed imports stubbed if torch is missing."""
    try:
        import torch  # noqa: F401
    except ImportError:
        data = types.ModuleType("torch.utils.data")
        for name in ("BatchSampler", "Sampler", "SequentialSampler"):
            setattr(data, name, type(name, (), {"__class_getitem__": classmethod(lambda cls, item: cls)}))
        torch = types.ModuleType("torch")
        utils = types.ModuleType("torch.utils")
        torch.utils, utils.data = utils, data
        sys.modules.update({"torch": torch, "torch.utils": utils, "torch.utils.data": data})
    for name, attrs in (("axolotl.utils.distributed", {"reduce_and_broadcast": lambda *a, **k: None}),
                        ("axolotl.utils.logging", {"get_logger": lambda name: __import__("logging").getLogger(name)})):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - its heavy dependencies are not installed here
            mod = types.ModuleType(name)
            mod.__dict__.update(attrs)
            sys.modules[name] = mod
    from axolotl.utils.samplers import multipack

    return multipack


def run_axolotl(lengths, L, W, M, seed=0):
    multipack = _axolotl_module()
    perm = np.random.default_rng(seed).permutation(lengths.size)
    multipack.pack_parallel(lengths[:2000].astype(np.int32), bin_capacity=L, group_size=100_000, bin_size=L,
                            num_processes=1, safe_mode=True)  # numba compile
    t0 = time.perf_counter()
    per_rank = []
    for r in range(W):
        shard = perm[r::W]
        bins = multipack.pack_parallel(lengths[shard].astype(np.int32), bin_capacity=L, group_size=100_000,
                                       bin_size=L, num_processes=1, safe_mode=True)
        per_rank.append([shard[np.asarray(b, dtype=np.int64)] for b in bins])
    seconds = time.perf_counter() - t0
    steps = min(len(b) for b in per_rank) // M
    slots = [[per_rank[r][st * M:(st + 1) * M] for r in range(W)] for st in range(steps)]
    return seconds, slots, None


PLANNERS = {"packlib.balance": run_packlib, "TRL bfd, dealt": run_trl, "axolotl multipack": run_axolotl}


def _child(planner, lengths, L, W, M, queue):
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)  # the peers' progress bars and advisories; failures come back through the queue
    import packlib  # noqa: F401 - imports are not the planner's memory
    import packlib._kernels.balance  # noqa: F401
    import packlib._kernels.spread  # noqa: F401
    try:
        if planner.startswith("TRL"):
            import datasets  # noqa: F401
            import trl  # noqa: F401
        elif planner.startswith("axolotl"):
            _axolotl_module()
    except ImportError as exc:
        queue.put((None, None, None, f"not installed here ({type(exc).__name__}: {exc})"))
        return
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        seconds, slots, first = PLANNERS[planner](lengths, L, W, M)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        queue.put((measure(lengths, L, W, M, slots), seconds, first, peak * 1024))
    except Exception as exc:  # noqa: BLE001 - reported in the table
        queue.put((None, None, None, f"{type(exc).__name__}: {exc}"))


def in_child(planner, lengths, L, W, M):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(planner, lengths, L, W, M, q))
    p.start()
    out = q.get()
    p.join()
    return out


def packlib_figures(s, lengths):
    """Order figures of a packlib schedule (training order: its packs' sample ids)."""
    step = np.repeat(np.arange(s.packs.num_packs) // (s.world_size * s.micro_batches), np.diff(s.packs.offsets))
    return order_figures(lengths, s.packs.indices, step)


def windows(quick: bool, only: str | None, seeds: int = 5):
    """packlib.balance for several windows: balance, micro-batch balance, efficiency, the
    tenths (seed 0's and the median over ``seeds`` seeds) beside a shuffle's, Spearman."""
    import packlib

    cost = packlib.transformer_cost(H, causal=False)
    print(f"{'workload':<22} {'window':>6} {'balance':>8} {'per-mb':>8} {'efficiency':>10} {'tenths':>7} "
          f"{'median':>7} {'shuffle':>7} {'spearman':>9} {'time':>8}")
    for name, lengths, L, W, M in workloads(quick):
        if only and only != name:
            continue
        for window in (2, 4, 8, 16, 32, 64):
            t0 = time.perf_counter()
            s = packlib.balance(lengths, L, world_size=W, micro_batches=M, cost=cost, window=window)
            seconds = time.perf_counter() - t0
            fig = packlib_figures(s, lengths)
            others = [packlib.balance(lengths, L, world_size=W, micro_batches=M, cost=cost, window=window, seed=k)
                      for k in range(1, seeds)]
            med = np.median([fig["tenths"]] + [packlib_figures(o, lengths)["tenths"] for o in others])
            print(f"{name:<22} {window:>6} {s.balance:>8.4f} {s.micro_batch_balance:>8.4f} {s.efficiency:>10.4f} "
                  f"{100 * fig['tenths']:>6.1f}% {100 * med:>6.1f}% {100 * fig['shuffle']:>6.1f}% "
                  f"{fig['spearman']:>+9.4f} {seconds:>7.2f}s")
        print()


def order_across_seeds(seeds: int = 10):
    """Issue 29's table: each tenth's mean length against the epoch's, seeds 0-2, and over
    ``seeds`` seeds the largest tenth (median, max) beside a shuffle's, Spearman, and how
    alike the tenths of two seeds are (their correlation, averaged over pairs)."""
    import packlib

    print(f"packlib from {pathlib.Path(packlib.__file__).parent}")
    cost = packlib.transformer_cost(H, causal=False)
    cases = [("long documents, 60k", long_documents(60_000), 32768, 32, 2)]
    cases += [c for c in workloads(False) if c[0] == "code and prose"]
    for name, lengths, L, W, M in cases:
        print(f"{name}: seed | tenths 1 .. 10 (%) | largest | a shuffle's | Spearman | balance")
        devs, spearman, largest, shuffles = [], [], [], []
        for seed in range(seeds):
            s = packlib.balance(lengths, L, world_size=W, micro_batches=M, cost=cost, seed=seed)
            fig = packlib_figures(s, lengths)
            devs.append(balance_workloads.tenth_deviations(lengths, s.packs.indices))
            spearman.append(fig["spearman"])
            largest.append(fig["tenths"])
            shuffles.append(fig["shuffle"])
            if seed < 3:
                print(f"| {seed} | " + " ".join(f"{100 * x:+.1f}" for x in devs[-1]) + f" | {100 * fig['tenths']:.1f} % | "
                      f"{100 * fig['shuffle']:.1f} % | {fig['spearman']:+.4f} | {s.balance:.4f} |")
        corr = np.corrcoef(np.array(devs))[np.triu_indices(seeds, 1)]
        print(f"seeds 0-{seeds - 1}: largest tenth median {100 * np.median(largest):.1f} % (max {100 * max(largest):.1f} %), "
              f"a shuffle's {100 * np.median(shuffles):.1f} %; |Spearman| max {max(map(abs, spearman)):.4f}; "
              f"tenths of two seeds correlated {corr.mean():+.2f} on average\n")


def costs_of(s, lengths, cost):
    """``(steps, ranks, micro_batches)`` costs of schedule ``s``'s rows under ``cost``."""
    lens = lengths.astype(np.float64)[s.packs.indices]
    pack = np.repeat(np.arange(s.packs.num_packs), np.diff(s.packs.offsets))
    tokens = np.bincount(pack, weights=lens, minlength=s.packs.num_packs)
    squares = np.bincount(pack, weights=lens * lens, minlength=s.packs.num_packs)
    return (cost[0] * tokens + cost[1] * squares).reshape(s.num_steps, s.world_size, s.micro_batches)


def balances(t):
    """Balance (ranks meet once a step) and per micro-batch, of row costs ``t``."""
    W = t.shape[1]
    return t.sum() / (W * t.sum(axis=2).max(axis=1).sum()), t.sum() / (W * t.max(axis=1).sum())


def sensitivity(factors=(0.25, 0.5, 1.0, 2.0, 4.0), sigmas=(0.0, 0.01, 0.02, 0.05), draws=20):
    """From the cost model alone: packlib.balance planned with ``b/a`` = factor x the FLOP
    model's, measured under another factor (and planned with the token cost), on three
    workloads; then the balance a plan shows when every row's time carries a relative noise
    of ``sigma`` (one timing per row, the mean over ``draws`` draws) against the best of two."""
    import packlib

    a, b = packlib.transformer_cost(H, causal=False)
    cases = [("long documents, L = 16k, 8 x 2, 8,000 (bench_balance_gpu's)", balance_workloads.long_documents_at(8000, 16384), 16384, 8, 2)]
    cases += [(f"{name}, L = {L // 1024}k, {W} x {M}", lengths, L, W, M) for name, lengths, L, W, M in workloads(False)
              if name in ("long documents", "code and prose")]
    head = " | ".join(f"measured x{f:g}" for f in factors)
    for name, lengths, L, W, M in cases:
        print(f"{name}: balance / per micro-batch; b/a of the FLOP model = {b / a:.3g}")
        print(f"| planned with | {head} |\n|---|" + "---:|" * len(factors))
        plans = [(f"b/a x{f:g}", (a, b * f)) for f in factors] + [("token cost (1, 0)", (1.0, 0.0))]
        for label, cost in plans:
            s = packlib.balance(lengths, L, world_size=W, micro_batches=M, cost=cost)
            cells = [balances(costs_of(s, lengths, (a, b * f))) for f in factors]
            print(f"| {label} | " + " | ".join(f"{x:.4f} / {y:.4f}" for x, y in cells) + " |")
        s = packlib.balance(lengths, L, world_size=W, micro_batches=M, cost=(a, b))
        t = costs_of(s, lengths, (a, b))
        rng = np.random.default_rng(0)
        print("timing noise (relative sigma per row; planned and measured with the FLOP model): one timing | best of two")
        for sigma in sigmas:
            one = [balances(t * (1 + sigma * np.abs(rng.standard_normal(t.shape))))[0] for _ in range(draws)]
            two = [balances(t * (1 + sigma * np.minimum(np.abs(rng.standard_normal(t.shape)),
                                                        np.abs(rng.standard_normal(t.shape)))))[0] for _ in range(draws)]
            print(f"| {100 * sigma:g} % | {np.mean(one):.4f} | {np.mean(two):.4f} |")
        print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-large", action="store_true", help="skip 1 M samples x 64 ranks")
    ap.add_argument("--windows", action="store_true", help="packlib only: balance and order against the window")
    ap.add_argument("--only", help="one workload, by name (e.g. 'long documents, 60k')")
    ap.add_argument("--planners", help="only the planners whose name contains this (e.g. 'packlib')")
    ap.add_argument("--order", action="store_true", help="packlib only: the order over seeds 0-9 (issue 29's table)")
    ap.add_argument("--against", help="with --order: import packlib from this checkout (e.g. an older commit's)")
    ap.add_argument("--sensitivity", action="store_true", help="packlib only: balance when the cost planned with is off")
    args = ap.parse_args()
    if args.sensitivity:
        return sensitivity()
    if args.against:
        sys.path.insert(0, str(pathlib.Path(args.against).resolve()))
    if args.order:
        return order_across_seeds()
    if args.windows:
        return windows(args.quick, args.only)
    print(f"{'workload':<36} {'planner':<18} {'balance':>8} {'per-mb':>8} {'efficiency':>10} {'dropped':>15} "
          f"{'steps':>6} {'time':>9} {'peak memory':>12} {'tenths':>7} {'shuffle':>7} {'spearman':>9}")
    cases = workloads(args.quick)
    if not args.skip_large:
        rng = np.random.default_rng(7)
        big = np.clip(np.rint(rng.lognormal(np.log(600), 1.0, 1_000_000)), 1, 8192).astype(np.int64)
        cases.append(("1 M chat-like, 64 ranks", big, 8192, 64, 2))
    for name, lengths, L, W, M in cases:
        if args.only and args.only != name:
            continue
        label = f"{name}, L={L // 1024 if L >= 1024 else L}{'k' if L >= 1024 else ''}, {W}x{M}"
        for planner in PLANNERS:
            if planner.startswith("TRL") and name.startswith("1 M"):
                continue
            if args.planners and not any(p in planner for p in args.planners.split(",")):
                continue
            fig, seconds, first, peak = in_child(planner, lengths, L, W, M)
            if fig is None:
                print(f"{label:<36} {planner:<18} {peak}", flush=True)
                continue
            drop = f"{fig['dropped']:,} ({100 * fig['dropped'] / lengths.size:.1f} %)"
            extra = f"  (first call {first:.1f} s)" if first else ""
            print(f"{label:<36} {planner:<18} {fig['balance']:>8.4f} {fig['micro_batch_balance']:>8.4f} "
                  f"{fig['efficiency']:>10.4f} {drop:>15} {fig['steps']:>6,} {seconds:>8.2f}s "
                  f"{peak / 2**20:>9.0f} MiB {100 * fig['tenths']:>6.1f}% {100 * fig['shuffle']:>6.1f}% "
                  f"{fig['spearman']:>+9.4f}{extra}", flush=True)
        print()


if __name__ == "__main__":
    main()
