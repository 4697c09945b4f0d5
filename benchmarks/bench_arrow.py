"""Benchmark: packing an Arrow table / Hugging Face dataset, against TRL's ``pack_dataset``.

    python benchmarks/bench_arrow.py            # 1,000,000 rows
    python benchmarks/bench_arrow.py --quick    # 100,000 rows, TRL's bfd only
    python benchmarks/bench_arrow.py --rows 400000

Input: lognormal row lengths (``benchmarks._common.lognormal_lengths``, mean ~147 tokens,
clipped to [3, 8192], so a few rows exceed ``seq_length``), ``seq_length=2048``, three list
columns with identical offsets: ``input_ids`` (int32), ``attention_mask`` (int8),
``labels`` (int64). Both packers get the same in-memory ``datasets.Dataset`` (TRL) or its
``pyarrow.Table`` (``pack_table``).

Targets (issue 12): ``pack_table`` >= 20x faster than TRL ``pack_dataset(strategy="bfd")``,
``pack_dataset`` >= 10x; rows within 0.01 % of ceil(tokens / seq_length) for truncate and
split (TRL: +0.29 %); peak memory during ``pack_table`` <= 2x the token data.

Memory is measured two ways on the first full call (untimed, before any other run, so
pyarrow's pool holds no freed memory yet): the peak of the process's resident set (sampled
every 0.5 ms from /proc/self/statm by a thread) above its level before the call, and
tracemalloc's peak (numpy's temporaries) plus the pyarrow memory-pool bytes the call leaves
allocated (``pyarrow.total_allocated_bytes``: the packed output, which is allocated there).

The machine is shared (2 cores, several users) and its load changes by the minute: compare
ratios. TRL runs once per strategy (its map is ~30 s at 1 M rows); each packlib figure is the
median of 4 warm runs, 2 just before and 2 just after the TRL run it is compared with. Wall
and CPU time (``time.process_time``: user + system time of this process, page faults
included) are both shown; CPU time is less disturbed by other users' processes.
"""
from __future__ import annotations

import argparse
import gc
import os
import pathlib
import sys
import time
import tracemalloc

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import packlib  # noqa: E402
from benchmarks._common import PeakRss, fmt, lognormal_lengths  # noqa: E402
from packlib.formats import arrow as pa_arrow  # noqa: E402

L = 2048


def make_table(n: int, seed: int = 0):
    """``n`` rows of lognormal lengths with three list columns sharing the row lengths."""
    import pyarrow as pa

    lengths = lognormal_lengths(n, seed=seed, max_length=4 * L)
    off = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=off[1:])
    tokens = int(off[-1])
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 128_000, tokens, dtype=np.int32)
    mask = np.ones(tokens, np.int8)
    labels = ids.astype(np.int64)
    o32 = pa.array(off.astype(np.int32))
    table = pa.table({
        "input_ids": pa.ListArray.from_arrays(o32, pa.array(ids)),
        "attention_mask": pa.ListArray.from_arrays(o32, pa.array(mask)),
        "labels": pa.ListArray.from_arrays(o32, pa.array(labels)),
    })
    return table, lengths, tokens, ids.nbytes + mask.nbytes + labels.nbytes


def timed_cpu(fn):
    """(wall seconds, CPU seconds of this process, result) of one call of ``fn``."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w0, time.process_time() - c0, out


def peak_memory(fn):
    """(peak RSS above the start, tracemalloc peak + pyarrow allocation peak) while ``fn`` runs."""
    import pyarrow as pa

    arrow0 = pa.total_allocated_bytes()
    tracemalloc.start()
    try:
        with PeakRss(interval=0.0005) as m:
            out = fn()
            arrow_peak = pa.total_allocated_bytes() - arrow0
    finally:
        _, traced = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    del out
    return m.peak, traced + max(arrow_peak, 0)


def seq_lengths_sorted(table_or_dataset):
    """All segment lengths of a packed result, sorted (to compare packers' segments)."""
    t = table_or_dataset.data.table if hasattr(table_or_dataset, "data") else table_or_dataset
    chunks = t.column("seq_lengths").chunks
    return np.sort(np.concatenate([c.flatten().to_numpy() for c in chunks]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100,000 rows; TRL's bfd only")
    ap.add_argument("--rows", type=int, default=None, help="number of rows (default 1,000,000; --quick 100,000)")
    ap.add_argument("--no-trl", action="store_true", help="skip the TRL baseline")
    args = ap.parse_args()
    n = args.rows or (100_000 if args.quick else 1_000_000)

    import datasets
    import pyarrow as pa

    datasets.disable_progress_bars()
    table, lengths, raw_tokens, token_bytes = make_table(n)
    ds = datasets.Dataset(datasets.table.InMemoryTable(table))
    print(f"packlib {packlib.__version__}, pyarrow {pa.__version__}, datasets {datasets.__version__}, "
          f"{os.cpu_count()} cores; {n:,} rows, {raw_tokens:,} tokens ({token_bytes / 2**30:.2f} GiB of token data "
          f"in 3 columns), seq_length {L}, {int((lengths > L).sum()):,} rows longer than seq_length\n")

    # first call: compile or load the kernels
    t0 = time.perf_counter()
    pa_arrow.pack_table(table.slice(0, 1000), L, overflow="truncate")
    t_first = time.perf_counter() - t0

    # memory first, before pyarrow's pool holds memory freed by earlier runs
    extra_rss, traced = peak_memory(lambda: pa_arrow.pack_table(table, L, overflow="truncate"))

    try:
        from trl.data_utils import pack_dataset as trl_pack
    except Exception as e:  # pragma: no cover
        print(f"TRL not importable ({e}); no baseline\n")
        trl_pack = None
    if args.no_trl:
        trl_pack = None

    # The machine is shared and its load changes by the minute, so every packlib figure is
    # the median of runs taken just before and just after the TRL run it is compared with.
    runs = {}   # (what, overflow) -> list of (wall, cpu); last report
    reports = {}
    results = {}

    def ours(overflow, rounds):
        for what, fn in (("packlib `pack_table`", lambda: pa_arrow.pack_table(table, L, overflow=overflow)),
                         ("packlib `pack_dataset`", lambda: pa_arrow.pack_dataset(ds, L, overflow=overflow))):
            for _ in range(rounds):
                wall, cpu, out = timed_cpu(fn)
                runs.setdefault((what, overflow), []).append((wall, cpu))
                reports[(what, overflow)] = pa_arrow.packing_report(out)
                if what.endswith("`pack_table`"):
                    results[overflow] = seq_lengths_sorted(out)
                del out
                gc.collect()

    trl = {}    # overflow -> (wall, cpu, rows, tokens)
    strategies = ["bfd"] if args.quick else ["bfd", "bfd_split"]
    for strategy in strategies:
        overflow = "truncate" if strategy == "bfd" else "split"
        ours(overflow, 2)
        if trl_pack is not None:
            wall, cpu, out = timed_cpu(lambda: trl_pack(ds, seq_length=L, strategy=strategy))
            sl = seq_lengths_sorted(out)
            trl[overflow] = (wall, cpu, len(out), int(sl.sum()))
            same = np.array_equal(sl, results[overflow])
            print(f"TRL strategy={strategy!r}: same multiset of segment lengths as packlib overflow={overflow!r}: {same}")
            del out
            gc.collect()
        ours(overflow, 2)
    if args.quick:
        ours("split", 3)

    rows = []   # (what, overflow, wall, cpu, packed rows, tokens)
    for (what, overflow), ts in runs.items():
        rep = reports[(what, overflow)]
        rows.append((what, overflow, float(np.median([t[0] for t in ts])), float(np.median([t[1] for t in ts])),
                     rep["packed_rows"], rep["tokens"]))
    for overflow in ("truncate", "split"):
        pa_arrow.pack_table(table.slice(0, 1000), L, method="optimal")
        ts = []
        for _ in range(2):
            wall, cpu, out = timed_cpu(lambda: pa_arrow.pack_table(table, L, method="optimal", overflow=overflow))
            ts.append((wall, cpu))
            rep = pa_arrow.packing_report(out)
            del out
            gc.collect()
        rows.append(("packlib `pack_table(method=\"optimal\")`", overflow, float(np.median([t[0] for t in ts])),
                     float(np.median([t[1] for t in ts])), rep["packed_rows"], rep["tokens"]))
    clipped = np.minimum(lengths, L)
    packlib.bfd_pack(clipped, L)
    wall, cpu, packs = timed_cpu(lambda: packlib.bfd_pack(clipped, L))
    rows.append(("(`packlib.bfd_pack` on the lengths alone)", "truncate", wall, cpu, packs.num_packs, packs.num_tokens))
    for overflow, (wall, cpu, nrows, tokens) in trl.items():
        strategy = "bfd" if overflow == "truncate" else "bfd_split"
        rows.append((f"TRL `pack_dataset(strategy=\"{strategy}\")`", overflow, wall, cpu, nrows, tokens))

    print("\n| what | overflow | wall time | CPU time | packed rows | over ⌈tokens/L⌉ | vs TRL, same overflow: wall | CPU |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for what, overflow, wall, cpu, nrows, tokens in rows:
        bound = -(-tokens // L)
        rw = f"{trl[overflow][0] / wall:.1f}×" if overflow in trl else "—"
        rc = f"{trl[overflow][1] / cpu:.1f}×" if overflow in trl else "—"
        print(f"| {what} | {overflow} | {fmt(wall)} | {fmt(cpu)} | {nrows:,} | +{100 * (nrows - bound) / bound:.3f} % "
              f"({nrows - bound:,}) | {rw} | {rc} |")
    print(f"\nfirst pack_table call (kernel compile or cache load, 1,000 rows): {fmt(t_first)}")

    print(f"\npeak memory during pack_table (first full call): +{extra_rss / 2**30:.2f} GiB RSS "
          f"({extra_rss / token_bytes:.2f}× the token data), tracemalloc + pyarrow "
          f"{traced / 2**30:.2f} GiB ({traced / token_bytes:.2f}×); the packed output alone is 1.00× plus offsets")


if __name__ == "__main__":
    main()
