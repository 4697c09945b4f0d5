"""Carried columns in the pipeline (``carry=``): their size, which sets how many packs an
output file holds, and their content hashes, which the verify pass checks pack by pack.

A carried value is a run of elements: a list column's items (an image's row of patches, a
grid ``(t, h, w)``, an encoded image) or a non-list column's one value (none for a null).
Each element is hashed through its leaf values and the lengths at every level, and a run by
a polynomial over its elements' hashes, ``H(e_1 ... e_n) = sum e_j B^(n-j)`` (mod 2**64), so
the hash of a packed row's carried values follows from its sequences' hashes and element
counts, in the row's order: ``H(a + b) = H(a) B^|b| + H(b)``. The driver predicts every
pack's hash from the input side; the verify pass reads it from the output.

>>> import pyarrow as pa
>>> h, n = run_hashes(pa.array([[[1, 2]], [], [[3], [4, 5]]]))
>>> n.tolist()
[1, 0, 2]
>>> both, _ = run_hashes(pa.array([[[1, 2], [3], [4, 5]]]))
>>> bool(both[0] == pack_hashes(h, n, [0, 1, 2], [0, 3])[0][0])
True
"""
from __future__ import annotations

import numpy as np

from ._hash import hash_into, single_chunk
from ..formats.arrow._numpy import as_numpy, validity

_B = np.uint64(0x9E3779B97F4A7C15)  # odd: B^k never vanishes mod 2**64
_LEVEL = np.uint64(0xC2B2AE3D27D4EB4F)  # folds a list level's lengths apart from its values


def _is_list(pa, t) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _is_binary(pa, t) -> bool:
    return pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) or \
        pa.types.is_large_string(t)


def _binary_offsets(pa, arr) -> tuple:
    """``(offsets, bytes)`` of a binary or string array, through its buffers."""
    large = pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)
    bufs = arr.buffers()
    offs = np.frombuffer(bufs[1], np.int64 if large else np.int32, count=len(arr) + 1, offset=arr.offset *
                         (8 if large else 4)).astype(np.int64) if len(arr) else np.zeros(1, np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return offs, data


def _plain(pa, arr):
    """``arr`` without its dictionary or extension wrapping."""
    while True:
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        elif isinstance(arr.type, pa.ExtensionType):
            arr = arr.storage
        else:
            return arr


def element_hashes(arr, starts, stops) -> np.ndarray:
    """One hash per element: element ``i`` is ``arr[starts[i]:stops[i]]`` (any Arrow type:
    lists, fixed-size lists, structs, binary, strings, numbers)."""
    import pyarrow as pa

    h = np.zeros(len(starts), np.uint64)
    starts, stops = np.asarray(starts, np.int64), np.asarray(stops, np.int64)
    arr = _plain(pa, arr)
    t = arr.type
    if _is_list(pa, t):
        offs = as_numpy(arr.offsets).astype(np.int64)
        hash_into(h, starts, stops, np.diff(offs))  # the items' lengths: the nesting counts too
        return h * _LEVEL + element_hashes(arr.values, offs[starts], offs[stops])
    if pa.types.is_fixed_size_list(t):
        k = t.list_size
        return element_hashes(arr.flatten(), starts * k, stops * k)
    if pa.types.is_struct(t):
        for i, child in enumerate(arr.flatten()):
            h = h * _LEVEL + element_hashes(child, starts, stops) + np.uint64(i)
        return h
    if _is_binary(pa, t):
        offs, data = _binary_offsets(pa, arr)
        hash_into(h, starts, stops, np.diff(offs))
        hash_into(h, offs[starts], offs[stops], data)
        return h
    if pa.types.is_null(t):
        return h
    hash_into(h, starts, stops, _bits_of(as_numpy(arr, nulls_as=0)))
    return h


def _bits_of(values: np.ndarray) -> np.ndarray:
    """Float values as integers of their own width, without a copy (pixel values are most of
    a carried column's bytes: widening them to 64 bits would copy them twice over)."""
    if values.dtype.kind == "f" and values.dtype.itemsize in (4, 8):
        return values.view(np.int32 if values.dtype.itemsize == 4 else np.int64)
    return values


def _powers(k) -> np.ndarray:
    """``B ** k`` (mod 2**64), element by element."""
    k = np.asarray(k, np.int64).copy()
    out = np.ones(k.size, np.uint64)
    base = np.full(k.size, _B, np.uint64)
    while k.any():
        odd = (k & 1).astype(bool)
        out[odd] *= base[odd]
        base *= base
        k >>= 1
    return out


def _ranges(a, b) -> tuple:
    """The positions ``a[i], ..., b[i] - 1`` of every ``i`` end to end, and the ``i`` of each."""
    n = b - a
    row = np.repeat(np.arange(a.size, dtype=np.int64), n)
    first = np.concatenate(([0], np.cumsum(n)))[:-1]
    return a[row] + np.arange(row.size, dtype=np.int64) - first[row], row


def _run_sums(values, starts, stops) -> np.ndarray:
    """``values[starts[i]:stops[i]].sum()`` (mod 2**64) for every ``i``."""
    cs = np.concatenate((np.zeros(1, np.uint64), np.cumsum(values, dtype=np.uint64)))
    return cs[stops] - cs[starts]


def run_hashes(column) -> tuple:
    """``(hashes, counts)`` per row of a carried column: each row's run of elements hashed
    (see the module), and how many elements it holds."""
    import pyarrow as pa

    arr = _plain(pa, single_chunk(column))
    n = len(arr)
    if _is_list(pa, arr.type):
        offs = as_numpy(arr.offsets).astype(np.int64)
        items = np.arange(offs[0], offs[-1], dtype=np.int64)
        e = np.zeros(offs[-1], np.uint64)
        e[items] = element_hashes(arr.values, items, items + 1)
        a, b = offs[:-1], offs[1:]
    else:
        valid = validity(arr)
        rows = np.arange(n, dtype=np.int64)
        e = element_hashes(arr, rows, rows + 1)
        a, b = rows, rows + valid.astype(np.int64)
    pos, row = _ranges(a, b)
    terms = np.zeros(e.size, np.uint64)
    terms[pos] = e[pos] * _powers(b[row] - 1 - pos)
    return _run_sums(terms, a, b), (b - a).astype(np.int64)


def pack_hashes(hashes, counts, order, pack_offsets) -> tuple:
    """``(hashes, counts)`` of packed rows, from their sequences' (``order``: the sequence
    ids in pack order; ``pack_offsets``: where each pack starts in ``order``)."""
    h, n = np.asarray(hashes, np.uint64)[order], np.asarray(counts, np.int64)[order]
    offs = np.asarray(pack_offsets, np.int64)
    cs = np.concatenate(([0], np.cumsum(n)))
    pack = np.repeat(np.arange(offs.size - 1), np.diff(offs))
    after = cs[offs[1:]][pack] - cs[1:]  # the elements after each sequence in its pack
    terms = h * _powers(after)
    return _run_sums(terms, offs[:-1], offs[1:]), cs[offs[1:]] - cs[offs[:-1]]


def carried_bytes(column) -> int:
    """The bytes of a carried column, counted element by element (the same total however
    the rows are split into batches or files): offsets, value bytes, fixed-width values."""
    import pyarrow as pa

    arr = _plain(pa, column.combine_chunks() if hasattr(column, "num_chunks") else column)
    t = arr.type
    if _is_list(pa, t):
        return (8 if pa.types.is_large_list(t) else 4) * len(arr) + carried_bytes(arr.flatten())
    if pa.types.is_fixed_size_list(t):
        return carried_bytes(arr.flatten())
    if pa.types.is_struct(t):
        return sum(carried_bytes(c) for c in arr.flatten())
    if _is_binary(pa, t):
        offs, _ = _binary_offsets(pa, arr)
        return 4 * len(arr) + int(offs[-1] - offs[0])
    if pa.types.is_null(t):
        return 0
    try:
        return len(arr) * max(1, t.bit_width // 8)
    except ValueError:
        return int(arr.nbytes)


def write_with_carried(path, out, carried, order, pack_offsets, rows_per_group, finish, options) -> None:
    """Write the packed rows ``out`` to the Parquet file ``path`` with the ``carried`` columns
    (one array each, over the spilled sequences; the dict is emptied, so that they are freed
    before the last row group is written) carried into them, a row group of
    ``rows_per_group`` packs at a time (``order``: the sequences in pack order;
    ``pack_offsets``: where each pack starts in it); ``finish`` (folding the masks) is
    applied to every row group's table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..formats.arrow._carry import carry_columns

    names = list(carried)
    src = pa.Table.from_arrays([carried[c] for c in names], names=names)
    carried.clear()  # the caller's references: the spilled values go with src, before the last group is written
    writer = None
    try:
        for a in range(0, out.num_rows, rows_per_group):
            b = min(out.num_rows, a + rows_per_group)
            offs = pack_offsets[a:b + 1]
            part = out.slice(a, b - a)
            for name, values in carry_columns(src, names, order[offs[0]:offs[-1]], offs - offs[0]).items():
                part = part.append_column(name, values)
            if b == out.num_rows:
                del src
            part = finish(part)
            if writer is None:
                writer = pq.ParquetWriter(path, part.schema, **options)
            writer.write_table(part, row_group_size=rows_per_group)
    finally:
        if writer is not None:
            writer.close()

