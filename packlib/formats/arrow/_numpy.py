"""Fixed-width Arrow arrays to numpy and back, through their buffers.

pyarrow's own conversions (``Array.to_numpy``, ``pa.array`` of a numpy array or a list,
``fill_null`` with a Python scalar) import pandas when it is installed, a cost that a
pipeline's driver and each process running its tasks would pay at start. These read and
build integer, float and boolean arrays from their buffers instead: the same values,
without copying where pyarrow would not copy either.
"""
from __future__ import annotations

import numpy as np

__all__ = ["as_numpy", "validity", "as_arrow"]


def _bits(buffer, offset: int, n: int) -> np.ndarray:
    """``n`` bits of an Arrow bitmap from bit ``offset`` on, as booleans."""
    if n == 0:
        return np.zeros(0, bool)
    raw = np.frombuffer(buffer, np.uint8, count=(offset + n + 7) // 8)
    return np.unpackbits(raw, bitorder="little", count=offset + n)[offset:].view(bool)


def as_numpy(array) -> np.ndarray:
    """The values of an integer, float or boolean ``pyarrow.Array``, nulls left unmasked:
    a read-only view of its buffer (booleans: unpacked, a copy). Any other type: pyarrow's
    ``array.to_numpy(zero_copy_only=False)``."""
    import pyarrow as pa

    n, offset = len(array), array.offset
    if pa.types.is_boolean(array.type):
        return _bits(array.buffers()[1], offset, n)
    if not (pa.types.is_integer(array.type) or pa.types.is_floating(array.type)):
        return array.to_numpy(zero_copy_only=False)
    dtype = np.dtype(array.type.to_pandas_dtype())
    view = np.frombuffer(array.buffers()[1], dtype, count=n, offset=offset * dtype.itemsize) if n else np.zeros(0, dtype)
    view.flags.writeable = False  # the table's memory (and read-only arrays, as pyarrow gives)
    return view


def validity(array) -> np.ndarray:
    """True where a row of ``array`` (any ``pyarrow.Array``) is not null."""
    if array.null_count == 0:
        return np.ones(len(array), bool)
    bitmap = array.buffers()[0]
    if bitmap is None:  # an array of Arrow's null type: every row is null
        return np.zeros(len(array), bool)
    return _bits(bitmap, array.offset, len(array))


def as_arrow(values, type=None):
    """A ``pyarrow.Array`` without nulls over the 1-d numpy array ``values`` (zero-copy when
    it is contiguous and of ``type``'s width already); ``type`` defaults to the Arrow type of
    ``values.dtype``. Like ``pyarrow.array(values, type)``, without importing pandas; a
    value that ``type`` cannot hold is a ``ValueError``, as pyarrow's is an error."""
    import pyarrow as pa

    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"as_arrow takes a 1-d array, got shape {values.shape}")
    type = pa.from_numpy_dtype(values.dtype) if type is None else type
    if pa.types.is_boolean(type):
        data = np.packbits(values.astype(bool, copy=False), bitorder="little")
    else:
        data = np.ascontiguousarray(values, dtype=np.dtype(type.to_pandas_dtype()))
        if data.dtype != values.dtype and not np.array_equal(data, values):
            raise ValueError(f"values of type {values.dtype} do not fit Arrow type {type}")
    return pa.Array.from_buffers(type, len(values), [None, pa.py_buffer(data)])
