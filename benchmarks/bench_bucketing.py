"""Benchmark: readahead bucketing and streaming packing, packlib against infinibatch 0.1.1.

    python benchmarks/bench_bucketing.py           # 2 M lengths (about 1-2 minutes)
    python benchmarks/bench_bucketing.py --quick   # 200 k lengths, smoke run

Same lengths for every row (lognormal, clipped to [3, 512], benchmarks/_common.py), same
read_ahead (10,000), same seed; infinibatch and packlib run in the same process and the
table prints their ratio (the machine is shared: ratios travel better than times). packlib
times are medians of warm runs; numba compile/cache-load cost is measured separately.
Padding = 1 - real tokens / sum(batch size x longest in batch). Timed loops consume the
batches without keeping them, after gc.freeze() on the dataset; the batches are compared in a
separate untimed pass.
"""
from __future__ import annotations

import argparse
import gc
import pathlib
import statistics
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import packlib  # noqa: E402
from benchmarks._common import fmt, lognormal_lengths, timed  # noqa: E402,F401




def consume(it):
    """Iterate like a training loop: look at every batch, keep none (so the timing is not
    dominated by the garbage collector walking millions of retained batches)."""
    n = 0
    for b in it:
        n += len(b)
    return n


def padding_of(batches, length):
    real = cells = 0
    for b in batches:
        ls = [length(x) for x in b]
        real += sum(ls)
        cells += len(ls) * max(ls)
    return 1 - real / cells


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3, help="interleaved runs per row (median)")
    args = ap.parse_args()
    n = args.n or (200_000 if args.quick else 2_000_000)
    ra = 10_000
    lens = lognormal_lengths(n)
    ints = lens.tolist()
    dicts = [{"id": i, "length": v} for i, v in enumerate(ints)]
    from infinibatch.iterators import BucketedReadaheadBatchIterator as IB
    from infinibatch.iterators import NativeCheckpointableIterator as Native

    from packlib._kernels.bucket import bucket_all  # noqa: F401  (import cost not timed below)

    gc.collect()
    gc.freeze()  # the dataset is long-lived, as in a trainer: keep it out of GC passes

    t0 = time.perf_counter()
    packlib.bucket(lens[:100], read_ahead=10, batch_size=4)
    warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    list(packlib.BucketedReadaheadBatchIterator(ints[:3000], 1000, key=lambda x: x, batch_size=lambda x: 1024 // x))
    warm_it = time.perf_counter() - t0
    print(f"n = {n:,} lengths, read_ahead = {ra:,}; first call of bucket() {warm:.2f} s, "
          f"of the iterator {warm_it:.2f} s (numba compile or cache load)\n")

    print(f"{'configuration':<44}{'infinibatch items/s':>20}{'packlib items/s':>17}{'ratio':>8}{'padding':>10}{'same':>6}")
    for label, items, keyf, dyn in (
        ("int items, batch_size=32", ints, lambda x: x, False),
        ("dict items, batch_size=32", dicts, lambda d: d["length"], False),
        ("int items, batch_size=16384//longest", ints, lambda x: x, True),
        ("dict items, batch_size=16384//longest", dicts, lambda d: d["length"], True),
    ):
        bs = (lambda x, k=keyf: 16384 // k(x)) if dyn else 32
        runs = {"ib": [], "pl": [], "pl2": []}
        fns = {
            "ib": lambda: IB(Native(items), ra, key=keyf, batch_size=bs, seed=0),
            "pl": lambda: packlib.BucketedReadaheadBatchIterator(Native(items), ra, key=keyf, batch_size=bs, seed=0),
            "pl2": lambda: packlib.BucketedReadaheadBatchIterator(items, ra, key=keyf, batch_size=bs, seed=0),
        }
        for _ in range(args.repeat):  # interleaved, so load changes hit both sides
            for name, make in fns.items():
                t, _ = timed(lambda: consume(make()), 1)
                runs[name].append(t)
        t_ib, t_pl, t_pl2 = (statistics.median(runs[k]) for k in ("ib", "pl", "pl2"))
        b_ib, b_pl = list(fns["ib"]()), list(fns["pl2"]())  # untimed: check identical batches
        same = b_ib == b_pl
        pad = padding_of(b_pl, keyf)
        print(f"{label:<44}{n / t_ib / 1e6:>18.2f} M{n / t_pl / 1e6:>15.2f} M{t_ib / t_pl:>7.1f}x{100 * pad:>9.3f}%{str(same):>6}")
        print(f"{'  packlib reading the plain list itself':<44}{'':>20}{n / t_pl2 / 1e6:>15.2f} M{t_ib / t_pl2:>7.1f}x")
        del b_ib, b_pl

    print("\narray path: packlib.bucket(lengths, read_ahead=10000, ...) vs infinibatch on int items (same batches)")
    idx = list(range(n))
    for label, kw, bs in (
        ("batch_size=32", dict(batch_size=32), 32),
        ("max_tokens=16384", dict(max_tokens=16384), lambda i: 16384 // ints[i]),
    ):
        t_b, res = timed(lambda: packlib.bucket(lens, read_ahead=ra, **kw), 5)
        t_ib, _ = timed(lambda: consume(IB(Native(idx), ra, key=ints.__getitem__, batch_size=bs, seed=0)), args.repeat)
        same = res.to_list() == list(IB(Native(idx), ra, key=ints.__getitem__, batch_size=bs, seed=0))
        print(f"  {label:<20} bucket {n / t_b / 1e6:8.1f} M items/s  infinibatch {n / t_ib / 1e6:6.2f} M  "
              f"ratio {t_ib / t_b:6.1f}x  padding {100 * res.padding:.3f} %  same={same}")
    gs = np.sort(lens)[::-1]
    nb = -(-n // 32)
    pad_sorted = 1 - gs.sum() / sum(len(gs[i:i + 32]) * gs[i] for i in range(0, n, 32))
    rnd = np.random.default_rng(0).permutation(lens)
    pad_rand = 1 - rnd.sum() / sum(len(rnd[i:i + 32]) * rnd[i:i + 32].max() for i in range(0, n, 32))
    print(f"  baselines, batches of 32: random {100 * pad_rand:.2f} % padding, global sort {100 * pad_sorted:.4f} % ({nb:,} batches)")
    print("  padding vs read_ahead (batch_size=32): " + ", ".join(
        f"{r:,} -> {100 * packlib.bucket(lens, read_ahead=r, batch_size=32).padding:.3f} %" for r in (1000, 10_000, 100_000)))

    print("\ncheckpoint (dict items, dynamic batch size):")
    it = packlib.BucketedReadaheadBatchIterator(dicts, ra, key=lambda d: d["length"], batch_size=lambda d: 16384 // d["length"])
    for _ in range(1000):
        next(it)
    t_get, st = timed(it.getstate, 101)
    nxt = next(it)

    def resume():
        fresh = packlib.BucketedReadaheadBatchIterator(dicts, ra, key=lambda d: d["length"], batch_size=lambda d: 16384 // d["length"])
        fresh.setstate(st)
        return next(fresh)

    t_set, got = timed(resume, 5)
    print(f"  getstate {t_get * 1e6:.1f} us; construct + setstate + first batch {t_set * 1e3:.1f} ms "
          f"(re-reads the plain list up to the window: O(position)); resumed batch identical: {got == nxt}")

    print("\npack_stream(max_sequence_length=512, bfd) efficiency vs window size:")
    m = min(n, 200_000)
    sub = ints[:m]
    opt = packlib.bfd_pack(lens[:m], 512)
    lb = int(-(-lens[:m].sum() // 512))
    for w in (100, 1000, 10_000, 100_000):
        t_ps, packs = timed(lambda: list(packlib.pack_stream(sub, 512, read_ahead=w, key=lambda x: x)), 1)
        eff = sum(sum(p) for p in packs) / (512 * len(packs))
        print(f"  window {w:>7,}: {len(packs):>7,} packs, efficiency {100 * eff:.3f} %, {m / t_ps / 1e6:.2f} M items/s")
    print(f"  whole set at once (bfd_pack on {m:,}): {opt.num_packs:,} packs, efficiency {100 * opt.efficiency:.3f} % "
          f"(token lower bound {lb:,} packs)")


if __name__ == "__main__":
    main()
