"""Gathering the packed rows: one byte-copy pass per column."""
from __future__ import annotations

import numpy as np

from ..._validate import as_bool, as_int_array
from ._columns import (
    POSITION_IDS,
    SEQ_LENGTHS,
    _as_table_like,
    _chunks,
    _pyarrow,
    row_lengths,
    select_list_columns,
)
from ._numpy import as_arrow, as_numpy

# Largest value a 32-bit list offset holds; outputs with 32-bit offsets are split into
# several chunks below it (a module constant so tests can make it small).
_MAX_OFFSET = 2**31 - 1


def _byte_width(value_type):
    """Bytes per value of a fixed-width type copied as bytes, or None (then pyarrow's take)."""
    pa = _pyarrow()
    t = value_type
    if pa.types.is_boolean(t) or pa.types.is_dictionary(t) or isinstance(t, pa.ExtensionType):
        return None
    try:
        bits = t.bit_width
    except ValueError:
        return None
    return bits // 8 if bits % 8 == 0 and bits > 0 else None


def _values_bytes(values, width: int) -> np.ndarray:
    """A zero-copy uint8 view of a fixed-width array's values (its offset applied)."""
    buf = values.buffers()[1]
    if buf is None:  # an empty array may have no data buffer
        return np.zeros(0, np.uint8)
    return np.frombuffer(buf, dtype=np.uint8, count=(values.offset + len(values)) * width)[values.offset * width:]


def _arrow_empty(n: int, dtype):
    """An uninitialised buffer from pyarrow's memory pool and a writable numpy view of it.

    The packed values live in pyarrow's pool like any Arrow data (counted by
    ``pyarrow.total_allocated_bytes``), and the pool can hand recently freed memory straight
    back at once, where a fresh numpy array must be faulted in page by page."""
    pa = _pyarrow()
    buf = pa.allocate_buffer(n * np.dtype(dtype).itemsize)
    return buf, np.frombuffer(buf, dtype=dtype, count=n)


def _cuts(cum: np.ndarray, limit: int) -> list:
    """Pack boundaries ``[0, ..., P]`` of output chunks whose cumulative count ``cum``
    (``P + 1`` values from 0) stays within ``limit`` per chunk."""
    P = cum.size - 1
    if P == 0:
        return [0, 0]
    cuts = [0]
    while cuts[-1] < P:
        a = cuts[-1]
        b = int(np.searchsorted(cum, cum[a] + limit, side="right")) - 1
        if b <= a:
            raise ValueError(f"a packed row holds {int(cum[a + 1] - cum[a])} values, more than a list column's "
                             f"32-bit offsets hold ({limit}); cast the columns to large_list")
        cuts.append(min(b, P))
    return cuts


def _list_column(list_type, values, off: np.ndarray, cuts: list):
    """A chunked list column from flat ``values`` and int64 row offsets ``off``, cut at ``cuts``."""
    pa = _pyarrow()
    odt = np.int64 if pa.types.is_large_list(list_type) else np.int32
    cls = pa.LargeListArray if pa.types.is_large_list(list_type) else pa.ListArray
    chunks = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        o = off[a:b + 1] - off[a]
        chunks.append(cls.from_arrays(as_arrow(o.astype(odt)), values.slice(int(off[a]), int(off[b] - off[a])),
                                      type=list_type))
    return pa.chunked_array(chunks, type=list_type)


def _gather_values(column, row, start, length, out_pos, total, by_row, sources: dict):
    """The selected values of one list column, packed, as one flat pyarrow Array.

    ``by_row`` holds the segments sorted by row (row, start, length, out_pos), so the fast
    path reads each chunk's values front to back; ``sources`` caches source positions per
    chunk layout, reused by columns whose offsets equal those they were computed from (as
    for columns built together)."""
    from ..._kernels.arrow import gather_values, token_index

    pa = _pyarrow()
    chunks = _chunks(column)
    value_type = column.type.value_type
    width = _byte_width(value_type)
    if width is not None and not any(ch.values.null_count for ch in chunks):
        buf, out = _arrow_empty(total * width, np.uint8)
        if row.size:
            r_all, s_all, n_all, o_all = by_row
            sizes = tuple(len(ch) for ch in chunks)
            layouts = sources.setdefault("layouts", {})
            layout = layouts.setdefault(sizes, len(layouts))   # a small id per chunk layout
            bounds = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
            ptr = np.searchsorted(r_all, bounds)         # chunk c owns sorted segments ptr[c]:ptr[c+1]
            for c, ch in enumerate(chunks):
                a, b = int(ptr[c]), int(ptr[c + 1])
                if a == b:
                    continue
                offsets = as_numpy(ch.offsets)
                key = (layout, c)                         # same layout: same segments
                hit = sources.get(key)
                if hit is not None and np.array_equal(hit[0], offsets):
                    src = hit[1]
                else:
                    src = offsets[r_all[a:b] - bounds[c]] + s_all[a:b]
                    sources[key] = (offsets, src)
                gather_values(_values_bytes(ch.values, width), src, n_all[a:b], o_all[a:b], out, width)
        return pa.Array.from_buffers(value_type, total, [None, buf])
    # any other value type (bool, strings, nested, nulls inside lists): pyarrow's take
    import pyarrow.compute as pc

    vals = [ch.values for ch in chunks]
    base = np.concatenate(([0], np.cumsum([len(v) for v in vals]))).astype(np.int64)
    row_value_start = np.concatenate(
        [as_numpy(ch.offsets)[:-1].astype(np.int64) + base[c] for c, ch in enumerate(chunks)]
        or [np.zeros(0, np.int64)])
    idx = token_index(row_value_start, row, start, length, total)
    flat = vals[0] if len(vals) == 1 else pa.concat_arrays(vals)
    return pc.take(flat, as_arrow(idx))


def _gather(table, columns, row, start, length, pack_offsets, position_ids: bool, row_sorted=None):
    """:func:`gather_packs` on validated input.

    ``row_sorted``: optionally ``(row, start, length, order)`` of the same segments already
    sorted by row, ``order[k]`` being the sorted index of segment ``k`` (as
    :func:`make_segments` and ``Packs.indices`` give them), which saves sorting them here."""
    from ..._kernels.arrow import order_by_row, segment_positions

    pa = _pyarrow()
    seg_off = np.zeros(row.size + 1, np.int64)
    np.cumsum(length, out=seg_off[1:])
    total = int(seg_off[-1])
    out_pos = seg_off[:-1]
    tok_off = seg_off[pack_offsets]                      # token offset of every packed row
    types = [table.schema.field(n).type for n in columns]
    large = pa.types.is_large_list(types[0])
    any_32 = any(pa.types.is_list(t) for t in types) or (position_ids and not large)
    cuts = _cuts(tok_off if any_32 else pack_offsets, _MAX_OFFSET)
    if row_sorted is None:
        perm = order_by_row(row, table.num_rows)
        by_row = (row[perm], start[perm], length[perm], out_pos[perm])
        del perm
    else:
        r_s, s_s, n_s, order = row_sorted
        o_s = np.empty_like(out_pos)
        o_s[order] = out_pos
        by_row = (r_s, s_s, n_s, o_s)
    sources: dict = {}
    arrays, fields = [], []
    for name, t in zip(columns, types):
        values = _gather_values(table.column(name), row, start, length, out_pos, total, by_row, sources)
        arrays.append(_list_column(t, values, tok_off, cuts))
        fields.append(table.schema.field(name).remove_metadata())
    # TRL: list<int32> (list<int64> when the first column is a large_list), 32-bit offsets
    sl_type = pa.list_(pa.int64() if large else pa.int32())
    sl_values = as_arrow(length.astype(np.int64 if large else np.int32))
    arrays.append(_list_column(sl_type, sl_values, pack_offsets, cuts))
    fields.append(pa.field(SEQ_LENGTHS, sl_type))
    if position_ids:
        pos_type = pa.large_list(pa.int64()) if large else pa.list_(pa.int64())
        buf, pos = _arrow_empty(total, np.int64)
        segment_positions(length, pos)
        arrays.append(_list_column(pos_type, pa.Array.from_buffers(pa.int64(), total, [None, buf]), tok_off, cuts))
        fields.append(pa.field(POSITION_IDS, pos_type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def gather_packs(table, columns, row, start, length, pack_offsets, *, position_ids=False):
    """Copy segments of rows into packed rows: the packed table.

    Packed row ``p`` is the concatenation, in order, of segments
    ``pack_offsets[p] : pack_offsets[p + 1]``, segment ``k`` being
    ``table[column][row[k]][start[k] : start[k] + length[k]]``, for every column.

    Parameters
    ----------
    table : pyarrow.Table or RecordBatch
        Chunked columns are read chunk by chunk, never concatenated.
    columns : sequence of str
        List columns with identical row lengths (:func:`select_list_columns`).
    row, start, length : array_like of int, one entry per segment
        ``length >= 1`` and ``start + length`` within the row.
    pack_offsets : array_like of int, ``P + 1`` values
        From 0 to the number of segments, non-decreasing (``Packs.offsets``).
    position_ids : bool, default False
        Add ``position_ids``: ``0 .. length - 1`` for every segment, laid end to end.

    Returns
    -------
    pyarrow.Table
        ``P`` rows; the selected columns (same types: ``list`` stays ``list``,
        ``large_list`` stays ``large_list``, values keep their type), then ``seq_lengths``
        (the segment lengths of each packed row; ``list<int32>``, or ``list<int64>`` when
        the first column is a ``large_list``, exactly as TRL's ``pack_dataset``), then
        ``position_ids`` (``list<int64>``, ``large_list`` like the first column) if asked.
        A column with 32-bit offsets whose values would pass 2**31 - 1 is split into
        several chunks. No schema metadata.

    Tokens are copied once: fixed-width values (ints, floats, float16, temporal, decimal,
    fixed-size binary) as bytes by a compiled kernel straight from the value buffers; other
    value types (bool, strings, dictionaries, nested lists, lists holding nulls) through
    ``pyarrow.compute.take``.
    """
    table = _as_table_like(table)
    columns = select_list_columns(table.schema, columns)
    position_ids = as_bool(position_ids, "position_ids")
    if position_ids and POSITION_IDS in columns:
        raise ValueError(f"column {POSITION_IDS!r} is packed and position_ids=True would add another; "
                         "pass position_ids=False, or leave it out with columns=[...]")
    row = as_int_array(row, "row")
    start = as_int_array(start, "start")
    length = as_int_array(length, "length")
    if not row.size == start.size == length.size:
        raise ValueError(f"row, start and length must have one entry per segment, got sizes "
                         f"{row.size}, {start.size}, {length.size}")
    po = as_int_array(pack_offsets, "pack_offsets", allow_empty=False)
    if po[0] != 0 or po[-1] != row.size or (np.diff(po) < 0).any():
        raise ValueError(f"pack_offsets must run from 0 to the number of segments ({row.size}), non-decreasing")
    lens = row_lengths(table, columns)
    if row.size:
        bad = (row < 0) | (row >= lens.size)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise ValueError(f"row[{k}] = {row[k]} does not index the table's {lens.size} rows")
        bad = (start < 0) | (length < 1) | (start + length > lens[row])
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise ValueError(f"segment {k} (row {row[k]}, start {start[k]}, length {length[k]}) is not a non-empty "
                             f"part of row {row[k]}, which holds {lens[row[k]]} values")
    return _gather(table, columns, row, start, length, po, position_ids)
