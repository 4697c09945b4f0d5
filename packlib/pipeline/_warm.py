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
    from ..formats.arrow._numpy import list_array as _list_array

    for _large in (False, True):
        for _typ in (_pa.int32(), _pa.int64()):
            _arrow.gather_packs(_pa.table({"a": _list_array([[1, 2, 3]], _typ, _large)}), ["a"], [0], [0], [2], [0, 1])
    del _pa, _arrow, _list_array, _large, _typ
