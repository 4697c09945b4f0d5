"""Fixed-width Arrow arrays to numpy and back, through their buffers.

pyarrow's own conversions (``Array.to_numpy``, ``pa.array`` of a numpy array or a list,
``fill_null`` with a Python scalar) import pandas when it is installed, a cost that a
pipeline's driver and each process running its tasks would pay at start. These read and
build integer, float and boolean arrays from their buffers instead: the same values,
without copying where pyarrow would not copy either.
"""
from __future__ import annotations

import numpy as np

__all__ = ["as_numpy", "validity", "as_arrow", "list_array"]


def _bits(buffer, offset: int, n: int) -> np.ndarray:
    """``n`` bits of an Arrow bitmap from bit ``offset`` on, as booleans."""
    if n == 0:
        return np.zeros(0, bool)
    raw = np.frombuffer(buffer, np.uint8, count=(offset + n + 7) // 8)
    return np.unpackbits(raw, bitorder="little", count=offset + n)[offset:].view(bool)


def _fixed_width_dtype(pa, typ):
    """The numpy dtype of an integer, float or boolean Arrow type; None for any other."""
    if pa.types.is_boolean(typ):
        return np.dtype(bool)
    if pa.types.is_integer(typ) or pa.types.is_floating(typ):
        return np.dtype(typ.to_pandas_dtype())
    return None


def as_numpy(array, nulls_as=None) -> np.ndarray:
    """The values of an integer, float or boolean ``pyarrow.Array``: a read-only view of its
    buffer (booleans: unpacked, a copy), nulls left as the buffer holds them, or set to
    ``nulls_as`` (a copy). A ``pyarrow.ChunkedArray`` gives its chunks' values one after the
    other (a view when it has one chunk). Any other type: pyarrow's
    ``to_numpy(zero_copy_only=False)``."""
    import pyarrow as pa

    dtype = _fixed_width_dtype(pa, array.type)
    if dtype is None:
        return array.to_numpy(zero_copy_only=False)
    if isinstance(array, pa.ChunkedArray):
        parts = [as_numpy(chunk, nulls_as) for chunk in array.chunks]
        return parts[0] if len(parts) == 1 else np.concatenate(parts or [np.zeros(0, dtype)])
    n, offset = len(array), array.offset
    if dtype.kind == "b":
        values = _bits(array.buffers()[1], offset, n)
    else:
        values = np.frombuffer(array.buffers()[1], dtype, count=n, offset=offset * dtype.itemsize) if n \
            else np.zeros(0, dtype)
        values.flags.writeable = False  # the table's memory (and read-only arrays, as pyarrow gives)
    if nulls_as is not None and array.null_count:
        values = np.where(validity(array), values, nulls_as)
    return values


def validity(array) -> np.ndarray:
    """True where a row of ``array`` (any ``pyarrow.Array``, or a ``ChunkedArray``: its
    chunks' rows one after the other) is not null."""
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        return np.concatenate([validity(chunk) for chunk in array.chunks] or [np.zeros(0, bool)])
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


def list_array(rows, value_type, large: bool = False):
    """A list (``large``: large_list) array of ``rows``, sequences of numbers or booleans of
    ``value_type``: what ``pyarrow.array(rows, pa.list_(value_type))`` builds."""
    import pyarrow as pa

    offsets = np.cumsum([0] + [len(r) for r in rows], dtype=np.int64 if large else np.int32)
    values = np.concatenate([np.asarray(r) for r in rows]) if len(rows) else np.zeros(0)
    return (pa.LargeListArray if large else pa.ListArray).from_arrays(as_arrow(offsets), as_arrow(values, value_type))
