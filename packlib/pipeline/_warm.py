"""Imported once by the local engine's fork server: its workers are forked from it, so they
start with pyarrow imported and the common kernel specialisations loaded, and share those
pages with each other instead of each loading its own copy."""
from __future__ import annotations

from importlib import import_module

import numpy as np

from ._hash import hash_into, hash_packed_into

import_module("packlib.pipeline._tasks")
for _dt in (np.int32, np.int64):
    hash_into(np.zeros(1, dtype=np.uint64), np.zeros(1, np.int64), np.ones(1, np.int64), np.ones(2, dtype=_dt))
    hash_packed_into(np.zeros(1, dtype=np.uint64), np.array([0, 2], np.int32), np.array([0, 1], np.int32),
                     np.array([2], np.int32), np.ones(2, dtype=_dt))
del _dt

try:
    for _name in ("pyarrow", "pyarrow.compute", "pyarrow.parquet", "pyarrow.ipc"):
        import_module(_name)
except ImportError:  # the mlperf-bert pipeline needs numpy only
    pass
else:
    import pyarrow as _pa

    from ..formats import arrow as _arrow
    from ..formats.arrow._numpy import as_arrow as _as_arrow

    for _large in (False, True):
        for _dt in (np.int32, np.int64):
            _rows = (_pa.LargeListArray if _large else _pa.ListArray).from_arrays(
                _as_arrow(np.array([0, 3], np.int64 if _large else np.int32)), _as_arrow(np.arange(1, 4, dtype=_dt)))
            _arrow.gather_packs(_pa.table({"a": _rows}), ["a"], [0], [0], [2], [0, 1])
    del _pa, _arrow, _as_arrow, _large, _dt, _rows
