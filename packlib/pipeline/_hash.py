"""Content hashes of token segments, for the exactly-once check (input side and output side
hash the same values, so equal multisets of hashes mean every sequence arrived once).

Each segment is hashed in four interleaved lanes (independent multiply-xor chains over
positions ``0, 4, 8, ...``, ``1, 5, 9, ...``, ...), so the loop is not one long dependency
chain; the lanes and the length are then mixed. Any single changed value changes the hash
(every step is a bijection of the lane state); values are taken as 64-bit integers.
"""
from __future__ import annotations

import numpy as np

from .._kernels.segment_hash import hash_packed as _hash_packed
from .._kernels.segment_hash import hash_segments as _hash_segments


def _as_hashable(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind == "f":
        return values.astype(np.float64).view(np.int64)
    if values.dtype.kind == "b":
        return values.view(np.uint8)
    return np.ascontiguousarray(values)


def hash_into(out: np.ndarray, starts: np.ndarray, stops: np.ndarray, values: np.ndarray) -> None:
    """Fold the hash of ``values[starts[i]:stops[i]]`` into ``out[i]`` (one call per column)."""
    _hash_segments(np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(stops, dtype=np.int64),
                   _as_hashable(values), out)


def hash_packed_into(out, row_offsets, seg_offsets, seg_lengths, values) -> int:
    """Fold the hashes of the segments of packed rows into ``out`` (see :func:`packlib._kernels.segment_hash.hash_packed`);
    returns -1, or the first row whose ``seq_lengths`` do not add up to its length."""
    return int(_hash_packed(np.ascontiguousarray(row_offsets, dtype=np.int64),
                            np.ascontiguousarray(seg_offsets, dtype=np.int64),
                            np.ascontiguousarray(seg_lengths, dtype=np.int64), _as_hashable(values), out))


def single_chunk(column):
    """A table column as one array (no copy when it has one chunk)."""
    if hasattr(column, "num_chunks"):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def list_values(col):
    """``(offsets, values)`` numpy arrays of a pyarrow list array (offsets index ``values``)."""
    from ..formats.arrow._numpy import as_numpy

    return as_numpy(col.offsets), as_numpy(col.values, nulls_as=0)
