"""Benchmark: Megatron-Bridge's packed SFT file, packlib against Megatron-Bridge's own packing.

    python benchmarks/bench_megatron_sft.py            # plans at 30,000 and 1,000,000; the file at 30,000
    python benchmarks/bench_megatron_sft.py --quick    # plans and the file at 10,000

Baseline: Megatron-Bridge 0.3.1's own ``packing_utils`` (``create_packing_strategy`` with
``first_fit_shuffle``, its default, and ``first_fit_decreasing``; ``create_hist`` and
``fill_packing_strategy`` for the file), loaded from its wheel by ``tests/naive_megatron_sft.py``
(``pip install --no-deps megatron-bridge==0.3.1 megatron-core==0.16.1``).

Input: SFT-like sequence lengths, lognormal (mu 6.1, sigma 0.9: mean ~660 tokens) clipped to
[8, 4097] tokens, seed 0; ``packed_sequence_size`` L = 4,096. A sequence of ``n`` tokens
takes ``n - 1`` positions of a pack (Megatron-Bridge's count), and the bound is
⌈Σ (n - 1) / L⌉. With these lengths Megatron-Bridge's default lands 0.39 % above the bound
at 30,000 sequences, as in issue 31's measurement.

1. **Plan** (lengths -> which sequences share a pack): ``create_packing_strategy`` against
   ``packlib.pack(..., method="optimal")``. Megatron-Bridge's first fit scans every open
   bin (recomputing its sum) for every sequence, so its time grows with sequences × packs:
   beyond 30,000 it is not run; its time at 1 M is extrapolated from the times measured
   at 10,000, 20,000 and 30,000 (a fit ``t = a n²``, said so in the table), and its packs
   at 1 M come from a first fit over the same order written here with a segment tree
   (the same packs as Megatron-Bridge's code: checked at the measured sizes).
2. **File** (tokenised rows -> the ``.npy`` + metadata): ``create_hist`` +
   ``create_packing_strategy`` + ``fill_packing_strategy`` + ``np.save`` on the list of
   row dicts Megatron-Bridge tokenises into, against ``write_packed`` on the same rows as
   an Arrow table (random token ids, a per-token ``loss_mask``), and ``np.load`` of the
   file (what each rank's ``GPTSFTPackedDataset`` does). At 1 M only ``write_packed`` runs:
   Megatron-Bridge's path holds ~660 M tokens as Python lists (~25 GB) before it writes.
   Files go to a temporary directory (``BENCH_TMP`` chooses where).

Peak memory: the resident set, sampled every millisecond by a thread, above its level
before the call, each call in a fresh process of its own (``--mem-child``; where freed memory
of earlier calls would be reused unseen) with its inputs built first. The machine is shared: compare the ratios, measured in one process.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import packlib  # noqa: E402
from benchmarks._common import PeakRss, fmt  # noqa: E402
from tests import naive_megatron_sft as naive  # noqa: E402

L = 4096
ALGOS = ("first_fit_shuffle", "first_fit_decreasing")


def sft_lengths(n: int, seed: int = 0) -> np.ndarray:
    """Tokens per sequence: lognormal (mu 6.1, sigma 0.9) clipped to [8, L + 1]."""
    x = np.random.default_rng(seed).lognormal(6.1, 0.9, n)
    return np.clip(np.rint(x), 8, L + 1).astype(np.int64)


def measured(fn):
    """(wall seconds, peak RSS above the start in bytes, result) of one call."""
    with PeakRss() as m:
        out = fn()
    return m.seconds, m.peak, out


def first_fit(order, capacity: int) -> np.ndarray:
    """Bin loads of first fit over ``order`` (each item to the first open bin with room),
    with a max segment tree over the bins' free space: the packs Megatron-Bridge's
    ``first_fit`` makes, in O(n log n) instead of O(n × bins)."""
    n = len(order)
    size = 1
    while size < max(n, 1):
        size *= 2
    free = [capacity] * (2 * size)      # unopened bins have all their room: the leftmost fitting leaf is the bin
    used = 0
    for s in order:
        i = 1
        while i < size:
            i = 2 * i if free[2 * i] >= s else 2 * i + 1
        free[i] -= s
        used = max(used, i - size + 1)
        i //= 2
        while i:
            free[i] = max(free[2 * i], free[2 * i + 1])
            i //= 2
    return capacity - np.asarray(free[size:size + used])


def megatron_order(cost: np.ndarray, algo: str, seed: int) -> list:
    """The order Megatron-Bridge's packer visits the lengths in (its shuffle from numpy's global state)."""
    seqlens = [int(i) for i, c in enumerate(np.bincount(cost, minlength=L + 1)) for _ in range(c)]
    if algo == "first_fit_decreasing":
        return sorted(seqlens, reverse=True)
    np.random.seed(seed)
    np.random.shuffle(seqlens)
    return seqlens


def megatron_plan(cost: np.ndarray, algo: str, seed: int = 0):
    mb = naive.load()
    hist = np.bincount(cost, minlength=L + 1).tolist()
    np.random.seed(seed)
    return mb.packing.create_packing_strategy(hist, L, algo)


def plan_rows(n: int, measured_sizes, rows: list, mem_sizes=(10_000, 30_000, 1_000_000)) -> None:
    cost = sft_lengths(n) - 1
    bound = -(-int(cost.sum()) // L)
    packlib.pack(cost[:1000], L, method="optimal")                      # compiled before timing
    for method in ("optimal", "ffd"):
        times = []
        for _ in range(3):
            wall, peak, packs = measured(lambda: packlib.pack(cost, L, method=method, seed=0))
            times.append((wall, peak))
        wall = sorted(times)[1][0]
        peak = peak_in_child("plan", method, n) if n in mem_sizes else None
        rows.append((n, f"packlib {method}", packs.num_packs, bound, wall, peak, "measured"))
    for algo in ALGOS:
        if n in measured_sizes:
            wall, _, (assign, _) = measured(lambda: megatron_plan(cost, algo))
            peak = peak_in_child("plan", algo, n) if n in mem_sizes else None
            ours = first_fit(megatron_order(cost, algo, 0), L)
            assert sorted(ours.tolist()) == sorted(sum(a) for a in assign), "first_fit differs from Megatron-Bridge"
            rows.append((n, f"Megatron-Bridge {algo}", len(assign), bound, wall, peak, "measured"))
        else:
            ts = [(m, t) for (m, name, *_, t, _p, how) in rows if name.endswith(algo) and how == "measured"]
            a = sum(t * m * m for m, t in ts) / sum(m ** 4 for m, _ in ts)       # least squares t = a n^2
            packs = first_fit(megatron_order(cost, algo, 0), L).size
            rows.append((n, f"Megatron-Bridge {algo}", packs, bound, a * n * n, None,
                         f"extrapolated a·n² from {', '.join(f'{m:,}' for m, _ in ts)}; packs by the same first fit"))


def sft_table(n: int):
    """``n`` tokenised rows: the Arrow table (built in chunks: no large temporaries left
    freed in the process to blur the memory figures), and the lengths."""
    import pyarrow as pa

    lens = sft_lengths(n)
    rng = np.random.default_rng(1)
    off = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    ids = np.empty(int(off[-1]), np.int32)
    mask = np.empty(ids.size, bool)
    for a in range(0, ids.size, 1 << 22):
        b = min(a + (1 << 22), ids.size)
        ids[a:b] = rng.integers(1, 128_000, b - a, dtype=np.int32)
        mask[a:b] = rng.random(b - a, dtype=np.float32) < 0.7
    offsets = pa.array(off.astype(np.int32) if off[-1] < 2**31 else off)
    cls = pa.ListArray if offsets.type == pa.int32() else pa.LargeListArray
    table = pa.table({"input_ids": cls.from_arrays(offsets, pa.array(ids)),
                      "loss_mask": cls.from_arrays(offsets, pa.array(mask))})
    return table, lens


def pa_table_of(table):
    import pyarrow as pa

    return pa.table(table.to_pydict())


def file_rows(n: int, rows: list, megatron: bool = True) -> None:
    from packlib.formats.megatron_sft import write_packed

    table, lens = sft_table(n)
    bound = -(-int((lens - 1).sum()) // L)
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
        write_packed(pa_table_of(table.slice(0, 100)), L, output=os.path.join(d, "w.npy"))   # compiled before timing
        ours = os.path.join(d, "ours.npy")
        wall, _, rep = measured(lambda: write_packed(table, L, output=ours, metadata_output=os.path.join(d, "m.json")))
        size = os.path.getsize(ours)
        peak = peak_in_child("file", "packlib", n) if megatron else measured(lambda: write_packed(table, L, output=ours))[1]
        rows.append((n, "packlib write_packed (optimal)", rep["packs"], bound, wall, peak,
                     f"measured; file {size / 2**20:,.0f} MiB"))
        if not megatron:
            return
        wall, _, loaded = measured(lambda: np.load(ours, allow_pickle=True))
        peak = peak_in_child("file", "load", n)
        rows.append((n, "np.load of that file (each rank's reader)", len(loaded), bound, wall, peak,
                     f"measured; {peak / int(lens.sum()):.0f} bytes per token held"))
        del loaded
        dict_rows = megatron_rows(table)
        del table
        for algo in ALGOS:
            wall, _, packs = measured(lambda: megatron_file(dict_rows, algo, d))
            rows.append((n, f"Megatron-Bridge {algo} + fill + save", packs, bound, wall,
                         peak_in_child("file", algo, n), "measured"))


def _prepared(section: str, name: str, n: int, d: str):
    """The call a memory child measures, its inputs built (and compiled code loaded) first."""
    if section == "plan":
        cost = sft_lengths(n) - 1
        if name in ALGOS:
            naive.load()
            return lambda: megatron_plan(cost, name)
        packlib.pack(cost[:1000], L, method=name)
        return lambda: packlib.pack(cost, L, method=name, seed=0)
    from packlib.formats.megatron_sft import write_packed

    table, _ = sft_table(n)
    out = os.path.join(d, "ours.npy")
    write_packed(pa_table_of(table.slice(0, 100)), L, output=os.path.join(d, "w.npy"))
    if name == "packlib":
        return lambda: write_packed(table, L, output=out)
    if name == "load":
        write_packed(table, L, output=out)
        del table
        return lambda: np.load(out, allow_pickle=True)
    dict_rows = megatron_rows(table)
    del table
    return lambda: megatron_file(dict_rows, name, d)


def peak_in_child(section: str, name: str, n: int) -> int:
    """Peak RSS above the start of one call, in a fresh process (no memory freed earlier in
    this one to be reused unseen)."""
    out = subprocess.run([sys.executable, __file__, "--mem-child", section, name, str(n)], capture_output=True, text=True)
    if out.returncode:
        sys.exit(out.stderr[-3000:])
    return int(out.stdout.split()[-1])


def megatron_rows(table) -> list:
    """The row dicts Megatron-Bridge tokenises into (Python lists), from the table."""
    ids = table.column("input_ids").combine_chunks()
    mask = table.column("loss_mask").combine_chunks()
    off, iv, mv = ids.offsets.to_numpy(), ids.values.to_numpy(), mask.values.to_numpy(zero_copy_only=False)
    return [{"input_ids": iv[a:b].tolist(), "loss_mask": mv[a:b].tolist()} for a, b in zip(off[:-1], off[1:])]


def megatron_file(dict_rows: list, algo: str, d: str) -> int:
    """What prepare_packed_sequence_data does after tokenising, with Megatron-Bridge's own code."""
    mb = naive.load()
    np.random.seed(0)
    sequences, histogram = mb.packing.create_hist(np.array(dict_rows), L)
    assign, _ = mb.packing.create_packing_strategy(histogram, L, algo)
    out = mb.packing.fill_packing_strategy(assign, sequences, L, 0)
    np.save(os.path.join(d, "theirs.npy"), out)
    return len(out)


def print_table(title: str, rows: list) -> None:
    print(f"\n### {title}\n")
    print("| sequences | packer | packs | above ⌈tokens/L⌉ | time | peak RSS above start | ratio (time / packlib) | how |")
    print("|---|---|---|---|---|---|---|---|")
    for n, name, packs, bound, wall, peak, how in rows:
        ours = next(r[4] for r in rows if r[0] == n and r[1].startswith("packlib") and "ffd" not in r[1])
        above = packs - bound
        mem = "—" if peak is None else f"{peak / 2**20:,.0f} MiB"
        ratio = f"{wall / ours:,.2f}x" if wall < 10 * ours else f"{wall / ours:,.0f}x"
        t = fmt(wall) if wall < 600 else f"{wall / 3600:.1f} h"
        print(f"| {n:,} | {name} | {packs:,} | {above:,} ({above / bound:.3%}) | {t} | {mem} | {ratio} | {how} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10,000 sequences only")
    ap.add_argument("--no-file-1m", action="store_true", help="skip write_packed at 1 M (~8 GB of memory, a 4 GB file)")
    ap.add_argument("--file-child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mem-child", nargs=3, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mem_child:
        section, name, n = args.mem_child
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
            fn = _prepared(section, name, int(n), d)
            print(measured(fn)[1])
        return
    if args.file_child:
        rows = []
        file_rows(args.file_child, rows, megatron=False)
        print(json.dumps(rows))
        return
    reason = naive.missing_reason()
    if reason:
        sys.exit(f"Megatron-Bridge is needed as the baseline: {reason}")
    naive.load()
    print(f"# L = {L:,}; SFT-like lengths (lognormal 6.1 / 0.9, [8, {L + 1}] tokens, seed 0); "
          f"load average {os.getloadavg()[0]:.1f}")
    rows: list = []
    if args.quick:
        plan_rows(10_000, {10_000}, rows)
    else:
        for n in (10_000, 20_000, 30_000):
            plan_rows(n, {10_000, 20_000, 30_000}, rows)
        plan_rows(1_000_000, set(), rows)
        rows = [r for r in rows if r[0] in (30_000, 1_000_000)]
    print_table("Plan: lengths -> packs (create_packing_strategy vs packlib.pack)", rows)
    rows = []
    file_rows(10_000 if args.quick else 30_000, rows)
    if not args.quick and not args.no_file_1m:    # in a fresh process, so its memory figure is its own
        out = subprocess.run([sys.executable, __file__, "--file-child", "1000000"], capture_output=True, text=True)
        if out.returncode:
            sys.exit(out.stderr)
        rows += [tuple(r) for r in json.loads(out.stdout.splitlines()[-1])]
    print_table("File: tokenised rows -> packed .npy (create_hist + create_packing_strategy + "
                "fill_packing_strategy + np.save vs write_packed)", rows)


if __name__ == "__main__":
    main()
