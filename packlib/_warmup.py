"""Explicit compilation: pay numba's compile (or cache-load) cost when you choose."""
from __future__ import annotations

import time

import numpy as np

__all__ = ["warmup"]


def warmup(verbose: bool = False) -> float:
    """Compile (or load from numba's on-disk cache) every packing kernel now.

    Kernels otherwise compile on their first call: a few seconds each the first time on a
    machine, well under a second once cached (numba caches next to the package, or in
    ``NUMBA_CACHE_DIR`` when that is set, e.g. for a read-only install). Call this at
    start-up, before timing anything, or before forking data-loader workers.

    Returns the seconds it took.
    """
    from .packing import bfd_pack, ffd_pack, lpfhp_pack, nnls_pack, spfhp_pack

    t0 = time.perf_counter()
    h = np.array([0, 2, 0, 1, 0, 0, 1, 1], dtype=np.int64)
    lengths = np.repeat(np.arange(1, h.size + 1), h)
    for pack in (spfhp_pack, lpfhp_pack, nnls_pack):
        plan = pack(h, 3)
        if verbose:
            print(f"warmed {pack.__name__}")
    plan.assign(lengths, seed=0).shuffled(0)
    nnls_pack(h, None)
    ffd_pack(lengths, h.size)
    bfd_pack(lengths, h.size)
    from .bucketing import BucketedReadaheadBatchIterator, bucket

    bucket(lengths, 4, batch_size=2)
    bucket(lengths, 4, max_tokens=h.size)
    list(BucketedReadaheadBatchIterator(list(range(2000)), 2000, key=lambda x: x % 7, batch_size=1))
    return time.perf_counter() - t0
