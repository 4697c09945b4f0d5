"""Imported once by the local engine's fork server: its workers are forked from it, so they
start with pyarrow imported and the common kernel specialisations loaded, and share those
pages with each other instead of each loading its own copy."""
from __future__ import annotations

import numpy as np

from . import _tasks  # noqa: F401
from ._hash import hash_into

for _dt in (np.int32, np.int64):
    hash_into(np.zeros(1, dtype=np.uint64), np.zeros(1, np.int64), np.ones(1, np.int64), np.ones(2, dtype=_dt))

try:
    import pyarrow as pa
    import pyarrow.compute  # noqa: F401
    import pyarrow.parquet  # noqa: F401
except ImportError:  # the mlperf-bert pipeline needs numpy only
    pa = None
if pa is not None:
    from ..formats import arrow as _arrow

    for _typ in (pa.list_(pa.int32()), pa.large_list(pa.int32()), pa.list_(pa.int64()), pa.large_list(pa.int64())):
        _t = pa.table({"a": pa.array([[1, 2, 3]], _typ)})
        _arrow.gather_packs(_t, ["a"], [0], [0], [2], [0, 1])
    del _t, _typ, _arrow
del _dt
