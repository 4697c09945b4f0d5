"""Shared pieces of :mod:`packlib.blending`: limits, the index dtype, weight handling
(validation itself is :func:`packlib._validate.as_weights`), largest-remainder totals,
thread counts, chunking and progress policy, and allocation with a clear error.

Tests patch ``CHUNK`` and ``worker_count`` here; the other modules read them through this
module (``_common.CHUNK``), so one patch reaches every builder.
"""
from __future__ import annotations

import math
import os
from fractions import Fraction

import numpy as np

from .._validate import allocate, as_weights

METHODS = ("megatron", "smooth", "shuffled")
INT16_LIMIT = 32767  # Megatron: fewer than 32,767 datasets fit its int16 index
INT32_LIMIT = 2**31 - 1
CHUNK = 1 << 22  # steps per kernel call when a progress bar is shown


def index_dtype(k: int):
    """The dataset-index dtype Megatron uses for ``k`` datasets."""
    return np.int16 if k < INT16_LIMIT else np.int32


def weights_for(weights, method: str) -> np.ndarray:
    """Validated, normalised weights for ``method`` (``megatron`` needs every weight > 0)."""
    allow_zero = method != "megatron"
    try:
        w = as_weights(weights, "weights", allow_zero=allow_zero)
    except ValueError as exc:
        if not allow_zero and "does not allow" in str(exc):
            raise ValueError(
                f"{str(exc).split(',')[0]}: method='megatron' (like Megatron-Core) needs every weight > 0; drop the dataset, "
                "or use method='smooth' or 'shuffled', which allow zero weights"
            ) from None
        raise
    if w.size > INT32_LIMIT:
        raise ValueError(f"{w.size} datasets do not fit an int32 dataset index")
    return normalise(w)


def normalise(w: np.ndarray) -> np.ndarray:
    """Megatron's two float64 normalisations (builder, then BlendedDataset)."""
    with np.errstate(over="ignore", invalid="ignore"):
        w = w / w.sum()
        w = w / w.sum()
    if not np.isfinite(w).all():
        raise ValueError("weights overflow when normalised; scale them down")
    return w


def largest_remainder(weights: np.ndarray, size: int) -> np.ndarray:
    """Hamilton totals for ``size`` seats, computed with exact rationals.

    Each dataset gets ``floor(q_i)`` of its quota ``q_i = size * w_i / sum(w)`` (the exact
    values of the float64 weights), and the seats left go one each to the largest
    remainders ``q_i - floor(q_i)``; among equal remainders the lower index goes first.
    """
    fr = [Fraction(float(x)) for x in weights]
    total = sum(fr)
    seats = []
    rem = []
    for q in fr:
        x = q * size / total
        f = math.floor(x)
        seats.append(f)
        rem.append(x - f)
    left = size - sum(seats)
    if left:
        order = sorted(range(len(fr)), key=lambda i: (-rem[i], i))
        for i in order[:left]:
            seats[i] += 1
    return np.array(seats, dtype=np.int64)


def worker_count(n: int) -> int:
    """Threads for a build of ``n`` samples: the kernels release the GIL, so big shuffled
    builds split over the CPUs this process may use (and smooth uses two)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8, n >> 20))


def progress_wanted(progress, work: float) -> bool | None:
    if progress is None:
        return None if work > 2e9 else False
    if not isinstance(progress, (bool, np.bool_)):
        raise TypeError(f"progress must be True, False or None, got {type(progress).__name__} {progress!r}")
    return bool(progress)


def alloc(n: int, dtype, what: str, hint: str = "use a smaller size, or method='shuffled' with materialize=False "
          "and slice() what you need") -> np.ndarray:
    """:func:`packlib._validate.allocate` with the blend-specific advice."""
    return allocate(n, dtype, what, hint)
