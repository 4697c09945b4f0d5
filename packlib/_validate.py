"""Input validation shared by every public function.

Each public function converts its inputs here exactly once; kernels then trust their
arguments. Every failure is a ``ValueError`` (or ``TypeError`` for a wrong kind of object)
that names the argument, says what is wrong and, where it helps, what to do.
"""
from __future__ import annotations

import numbers
import operator

import numpy as np

_INT64_MAX = np.iinfo(np.int64).max


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def as_int_array(values, name: str, *, allow_empty: bool = True) -> np.ndarray:
    """Return ``values`` as a contiguous 1-D int64 array, or raise a clear error.

    Integer dtypes are taken as they are; float arrays are accepted only when every value is
    a finite whole number (``3.0``), never rounded; booleans, strings and objects are refused.
    """
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {arr.shape}")
    if arr.size == 0:
        if not allow_empty:
            raise ValueError(f"{name} is empty: give at least one value")
        return np.zeros(0, dtype=np.int64)
    kind = arr.dtype.kind
    if kind == "b":
        raise ValueError(f"{name} must hold integers, got booleans")
    if kind in "iu":
        if kind == "u" and arr.dtype.itemsize == 8 and int(arr.max()) > _INT64_MAX:
            raise ValueError(f"{name} has a value above 2**63-1 at index {_first_bad(arr > _INT64_MAX)}")
        return np.ascontiguousarray(arr, dtype=np.int64)
    if kind == "f":
        bad = ~np.isfinite(arr)
        if bad.any():
            i = _first_bad(bad)
            raise ValueError(f"{name} must hold whole numbers, got {arr[i]} at index {i}")
        bad = arr != np.floor(arr)
        if bad.any():
            i = _first_bad(bad)
            raise ValueError(
                f"{name} must hold whole numbers, got {arr[i]!r} at index {i}; "
                "round or cast the values yourself if that is what you mean"
            )
        if np.abs(arr).max() > 2.0**62:
            raise ValueError(f"{name} has values too large for int64")
        return arr.astype(np.int64)
    if kind == "O":
        try:
            return as_int_array(np.array([operator.index(v) for v in arr], dtype=np.int64), name)
        except (TypeError, OverflowError):
            pass
    raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")


def as_histogram(histogram, name: str = "histogram") -> np.ndarray:
    """A length histogram: 1-D, non-empty, whole, non-negative counts (``h[i]`` = count of length ``i+1``)."""
    h = as_int_array(histogram, name, allow_empty=False)
    if (h < 0).any():
        i = _first_bad(h < 0)
        raise ValueError(f"{name} must be non-negative, got {h[i]} at index {i} (length {i + 1})")
    return h


def as_lengths(lengths, max_sequence_length: int, name: str = "lengths") -> np.ndarray:
    """Sequence lengths: 1-D whole numbers in ``[1, max_sequence_length]``."""
    arr = as_int_array(lengths, name)
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 1:
            i = _first_bad(arr < 1)
            raise ValueError(f"{name} must be >= 1, got {arr[i]} at index {i}; drop empty sequences first")
        if hi > max_sequence_length:
            i = _first_bad(arr > max_sequence_length)
            raise ValueError(
                f"{name}[{i}] = {arr[i]} exceeds max_sequence_length = {max_sequence_length}; "
                "truncate or split long sequences first, or raise max_sequence_length"
            )
    return arr


def _as_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def as_positive_int(value, name: str) -> int:
    """A whole number >= 1 (``True``/``False`` and floats are refused)."""
    return _as_int(value, name, 1)


def as_nonnegative_int(value, name: str) -> int:
    """A whole number >= 0 (``True``/``False`` and floats are refused)."""
    return _as_int(value, name, 0)


def as_depth(max_sequences_per_pack) -> int | None:
    """``max_sequences_per_pack``: a whole number >= 1, or ``None`` for unlimited."""
    if max_sequences_per_pack is None:
        return None
    return as_positive_int(max_sequences_per_pack, "max_sequences_per_pack")


def as_seed(seed) -> int:
    """A seed: a whole number in ``[0, 2**64)``."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
    seed = int(seed)
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    return seed


def seed_to_int64(seed: int) -> np.int64:
    """Map a validated seed to the int64 that kernels take (bit pattern preserved)."""
    return np.uint64(seed).view(np.int64) if seed >= 2**63 else np.int64(seed)
