"""The shuffled blend's Feistel set-up and its range builder.

Position ``s`` of a ``shuffled`` index is sent through a keyed bijection of ``[0, size)``:
a four-round Feistel network over ``Z_a x Z_b`` (``a x b >= size``, cycle-walking over the
spare slots). :func:`feistel_params` derives the shape, the round keys, the datasets'
offsets and a lookup table from ``(counts, size, seed)``; :func:`shuffled_range` computes
any slice with the ``shuffled_fill`` kernel, split over threads for big ranges.
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .._progress import progress_bar
from .._validate import seed_to_int64
from . import _common


def feistel_shape(size: int) -> tuple[int, int]:
    """``a x b >= size`` with the fewest spare slots (each spare slot is a cycle-walking
    step), ``a`` searched from ``sqrt(size)`` down by at most an eighth (and 1024 values),
    so the two halves stay about as large as each other and the rounds mix well."""
    a0 = max(1, math.isqrt(max(size - 1, 0)) + 1)
    if size <= 1:
        return a0, max(1, size)
    a = np.arange(a0, max(0, a0 - min(1024, a0 // 8 + 1)), -1, dtype=np.int64)
    spare = a * (-(-size // a)) - size
    best = int(a[int(np.argmin(spare))])  # first minimum: the largest such a
    return best, -(-size // best)


def feistel_params(counts: np.ndarray, size: int, seed: int):
    from .._kernels import rng

    a, b = feistel_shape(size)
    s64 = seed_to_int64(seed)
    keys = np.array([rng.stream_seed(s64, 101 + r) for r in range(4)], dtype=np.uint64)
    offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    bits = max(1, int(size - 1).bit_length()) if size > 1 else 1
    tbits = min(bits, max(8, (counts.size * 8).bit_length()), 22)
    shift = bits - tbits
    starts = np.arange(0, (size >> shift) + 1, dtype=np.int64) << shift
    table = (np.searchsorted(offsets, starts, side="right") - 1).astype(np.int64)
    np.minimum(table, counts.size - 1, out=table)
    return a, b, keys, offsets, table, shift


def shuffled_range(counts, size, seed, start, stop, progress=False):
    from .._kernels.blend import shuffled_fill

    n = stop - start
    d = _common.alloc(n, _common.index_dtype(counts.size), "blend (shuffled)")
    s = _common.alloc(n, np.int64, "blend (shuffled)")
    if n == 0:
        return d, s
    a, b, keys, offsets, table, shift = feistel_params(counts, size, seed)
    workers = _common.worker_count(n)
    step = _common.CHUNK if progress else -(-n // workers)
    pieces = [(lo, min(stop, lo + step)) for lo in range(start, stop, step)]

    def run(piece):
        lo, hi = piece
        shuffled_fill(lo, hi, size, a, b, keys, offsets, table, shift, d[lo - start :], s[lo - start :])
        return hi - lo

    with progress_bar(n, "blend (shuffled)", progress, unit="sample") as bar:
        if workers == 1 or len(pieces) == 1:
            for piece in pieces:
                bar.update(run(piece))
        else:
            with ThreadPoolExecutor(workers) as pool:
                for done in pool.map(run, pieces):
                    bar.update(done)
    return d, s
