"""Content hashes of token segments, for the exactly-once check (input side and output side
hash the same values, so equal multisets of hashes mean every sequence arrived once)."""
from __future__ import annotations

import numpy as np

from .._jit import jit

_MUL = np.uint64(0x100000001B3)
_GOLD = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S29, _S33 = np.uint64(29), np.uint64(33)


@jit
def _hash_segments(starts, stops, values, out):  # pragma: no cover - compiled
    for i in range(out.size):
        a = starts[i]
        b = stops[i]
        h = _GOLD ^ (np.uint64(b - a) * _M1)
        for j in range(a, b):
            h = (h ^ np.uint64(np.int64(values[j]))) * _MUL
            h ^= h >> _S29
        h ^= h >> _S33
        h *= _M1
        h ^= h >> _S33
        h *= _M2
        h ^= h >> _S33
        out[i] = out[i] * _GOLD + h


def hash_into(out: np.ndarray, starts: np.ndarray, stops: np.ndarray, values: np.ndarray) -> None:
    """Fold the hash of ``values[starts[i]:stops[i]]`` into ``out[i]`` (one call per column)."""
    if values.dtype.kind == "f":
        values = values.astype(np.float64).view(np.int64)
    elif values.dtype.kind == "b":
        values = values.view(np.uint8)
    _hash_segments(np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(stops, dtype=np.int64),
                   np.ascontiguousarray(values), out)


def list_values(col):
    """``(offsets, values)`` numpy arrays of a pyarrow list array (offsets index ``values``)."""
    import pyarrow.compute as pc

    offsets = col.offsets.to_numpy()
    child = col.values
    if child.null_count:
        child = pc.fill_null(child, 0)
    return offsets, child.to_numpy(zero_copy_only=False)
