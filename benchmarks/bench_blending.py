"""Benchmark: blended-dataset indices against Megatron's loop and the memory-write floor.

    python benchmarks/bench_blending.py           # 1000 datasets x 10M (megatron), x 50M (smooth/shuffled)
    python benchmarks/bench_blending.py --quick   # 1000 x 1M and 1000 x 5M

Rows, all in one process:
- ``megatron``: ``packlib.blend(w, n)`` against the O(n*k) loop, a plain numba
  transcription of Megatron-Core's helpers.cpp ``build_blending_indices`` (defined below),
  on lognormal, near-equal-but-distinct, exactly equal and few (k=8) weights; outputs are
  checked equal.
- ``smooth`` / ``shuffled``: against the memory-write floor (writing the two output arrays
  once: ``np.full`` of int16 plus ``np.arange`` of int64), and numpy's in-place shuffle of
  the int16 dataset index (what the "largest remainder + shuffle" redesign spends its time
  on).
Times are medians of warm runs; the first call (numba compile or cache load) is reported
separately.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numba
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import packlib  # noqa: E402
from benchmarks._common import fmt, lognormal_lengths, timed  # noqa: E402,F401


@numba.njit(cache=True)
def megatron_cpp_loop(dataset_index, dataset_sample_index, weights, size):
    """Baseline: helpers.cpp build_blending_indices, line by line."""
    k = weights.shape[0]
    current = np.zeros(k, np.int64)
    for s in range(size):
        t = max(float(s), 1.0)
        best = 0
        best_err = weights[0] * t - float(current[0])
        for i in range(1, k):
            err = weights[i] * t - float(current[i])
            if err > best_err:
                best_err = err
                best = i
        dataset_index[s] = best
        dataset_sample_index[s] = current[best]
        current[best] += 1






def normalise(w):
    w = w / w.sum()
    return w / w.sum()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n_meg = 1_000_000 if args.quick else 10_000_000
    n_big = 5_000_000 if args.quick else 50_000_000
    k = 1000
    rng = np.random.default_rng(0)

    # warm-up (compile or cache load), measured separately
    t0 = time.perf_counter()
    for m in ("megatron", "smooth", "shuffled"):
        packlib.blend(rng.lognormal(size=50), 2000, m)
    warm_packlib = time.perf_counter() - t0
    t0 = time.perf_counter()
    megatron_cpp_loop(np.empty(10, np.int16), np.empty(10, np.int64), np.full(2, 0.5), 10)
    warm_loop = time.perf_counter() - t0
    print(f"first call: packlib (3 methods) {fmt(warm_packlib)}, baseline loop {fmt(warm_loop)}")
    print(f"numba {numba.__version__}, numpy {np.__version__}\n")

    print(f"megatron, {k if not args.quick else k} datasets x {n_meg:,} samples (k=8 row: 8 datasets)")
    print(f"{'weights':<22}{'loop':>10}{'packlib':>10}{'speed-up':>10}  equal")
    cases = [
        ("lognormal", rng.lognormal(0, 1, k), n_meg),
        ("near-equal distinct", 1 + rng.random(k) * 1e-9, n_meg),
        ("equal", np.ones(k), n_meg),
        ("lognormal, k=8", rng.lognormal(0, 1, 8), n_meg),
    ]
    for name, w, n in cases:
        ww = normalise(w)
        d0 = np.empty(n, np.int16)
        s0 = np.empty(n, np.int64)
        t_loop, _ = timed(lambda: megatron_cpp_loop(d0, s0, ww, n), 1 if not args.quick else 2)
        t_pk, idx = timed(lambda: packlib.blend(w, n), 3)
        same = np.array_equal(idx.dataset_index, d0) and np.array_equal(idx.dataset_sample_index, s0)
        print(f"{name:<22}{fmt(t_loop):>10}{fmt(t_pk):>10}{t_loop / t_pk:>9.1f}x  {same}")
        del d0, s0, idx

    print(f"\nsmooth / shuffled, {k} datasets x {n_big:,} samples (lognormal weights)")
    w = rng.lognormal(0, 1, k)

    def floor():
        a = np.full(n_big, 3, np.int16)
        b = np.arange(n_big, dtype=np.int64)
        return a, b

    t_floor, _ = timed(floor, 5)
    counts = packlib.blend(w, n_big, "shuffled", materialize=False).counts
    base = np.repeat(np.arange(k, dtype=np.int16), counts)
    gen = np.random.default_rng(1)
    t_np_shuffle, _ = timed(lambda: gen.shuffle(base), 1)
    print(f"{'what':<34}{'time':>10}{'x floor':>10}")
    print(f"{'write floor (np.full + np.arange)':<34}{fmt(t_floor):>10}{1.0:>10.1f}")
    print(f"{'numpy in-place shuffle (int16)':<34}{fmt(t_np_shuffle):>10}{t_np_shuffle / t_floor:>10.1f}")
    for m in ("smooth", "shuffled"):
        t, idx = timed(lambda: packlib.blend(w, n_big, m, seed=1), 3 if m == "shuffled" else 2)
        print(f"{'packlib ' + m:<34}{fmt(t):>10}{t / t_floor:>10.1f}")
        del idx
    lazy = packlib.blend(w, n_big, "shuffled", seed=1, materialize=False)
    t, _ = timed(lambda: lazy.slice(n_big // 2, n_big // 2 + 1_000_000), 5)
    print(f"{'shuffled: one 1M slice, no build':<34}{fmt(t):>10}")


if __name__ == "__main__":
    main()
