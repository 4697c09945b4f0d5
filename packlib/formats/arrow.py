"""Pack Arrow tables and Hugging Face datasets, whole-dataset, with TRL's output columns.

Needs the ``arrow`` extra (``pyarrow``); :func:`pack_dataset` also the ``hf`` extra
(``datasets``). Both are imported only when a function here is called.

A tokenised dataset has list columns with identical offsets (``input_ids``, ``labels``,
``attention_mask``, …): row ``i`` of every column holds the same number of values.
:func:`pack_table` packs the rows into packed rows of at most ``max_sequence_length``
tokens (TRL's ``seq_length``), moving every selected column together, and adds
``seq_lengths`` (the lengths of the segments in each packed row), the column TRL's
``pack_dataset`` produces, so code written for TRL's output consumes it unchanged:

>>> import pyarrow as pa
>>> from packlib.formats.arrow import pack_table, packing_report
>>> t = pa.table({"input_ids": [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10], [11]],
...               "attention_mask": [[1, 1, 1, 0, 0], [1, 0], [1, 1, 0], [1]]})
>>> packed = pack_table(t, seq_length=4)
>>> packed.to_pydict()
{'input_ids': [[1, 2, 3, 4], [8, 9, 10, 11], [6, 7]], 'attention_mask': [[1, 1, 1, 0], [1, 1, 0, 1], [1, 0]], 'seq_lengths': [[4], [3, 1], [2]]}
>>> packing_report(packed)["truncated_tokens"]
1

Unlike TRL, which packs inside every 1,000-row ``map`` batch, the whole table is packed at
once (fewer packed rows), and the tokens are copied once by compiled code.

The pipeline is four public steps, which the larger-than-memory pipeline
(:mod:`packlib.pipeline`) reuses shard by shard:

1. :func:`select_list_columns` — which columns to pack;
2. :func:`row_lengths` — tokens per row (checking the columns agree);
3. :func:`make_segments` — rows -> segments (``overflow="truncate"`` or ``"split"``),
   dropping empty rows;
4. :func:`packlib.methods.pack` on the segment lengths, then :func:`gather_packs` to copy
   the tokens into packed rows.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from .. import methods as _methods
from .._validate import as_bool, as_capacity, as_depth, as_int_array, as_positive_int, as_seed

__all__ = [
    "pack_table",
    "pack_dataset",
    "packing_report",
    "select_list_columns",
    "row_lengths",
    "make_segments",
    "Segments",
    "gather_packs",
]

#: Schema-metadata key of the packing report (JSON).
REPORT_KEY = b"packlib"
#: The columns the packed output adds.
SEQ_LENGTHS = "seq_lengths"
POSITION_IDS = "position_ids"
# Largest value a 32-bit list offset holds; outputs with 32-bit offsets are split into
# several chunks below it (a module constant so tests can make it small).
_MAX_OFFSET = 2**31 - 1
_OVERFLOW = ("truncate", "split")


def _pyarrow():
    try:
        import pyarrow
    except ImportError:  # pragma: no cover
        raise ImportError("Arrow tables need pyarrow: pip install 'packlib[arrow]'") from None
    return pyarrow


def _datasets():
    try:
        import datasets
    except ImportError:  # pragma: no cover
        raise ImportError("Hugging Face datasets need the datasets package: pip install 'packlib[hf]'") from None
    return datasets


def _as_table_like(table, name: str = "table"):
    """A ``pyarrow.Table`` or ``RecordBatch``, else a TypeError saying what to pass."""
    pa = _pyarrow()
    if isinstance(table, (pa.Table, pa.RecordBatch)):
        return table
    hint = ""
    if type(table).__module__.startswith("datasets"):
        hint = "; for a datasets.Dataset use packlib.formats.arrow.pack_dataset"
    raise TypeError(f"{name} must be a pyarrow.Table or RecordBatch, got {type(table).__name__}{hint}")


def _chunks(column) -> list:
    """The chunks of a table column (a RecordBatch column is one chunk)."""
    return list(column.chunks) if hasattr(column, "chunks") else [column]


def _is_list(t) -> bool:
    pa = _pyarrow()
    return pa.types.is_list(t) or pa.types.is_large_list(t)


# --------------------------------------------------------------------------------------
# The four steps (a stable interface: packlib.pipeline calls them)
# --------------------------------------------------------------------------------------


def select_list_columns(schema, columns=None) -> list[str]:
    """Validate and pick the list columns to pack.

    Parameters
    ----------
    schema : pyarrow.Schema (or a Table / RecordBatch, whose schema is used)
    columns : sequence of str or None, default None
        The columns to pack, in output order. ``None``: every column, which must then all
        be ``list`` or ``large_list`` columns (as in TRL).

    Returns
    -------
    list of str
        The column names, each a ``list`` / ``large_list`` column of ``schema``.

    Raises
    ------
    TypeError
        A selected column is not a list column (the message names it and says to pass
        ``columns=[...]``), or ``columns`` is not a sequence of names.
    ValueError
        An unknown or repeated name, no columns, or a column called ``seq_lengths`` (the
        output adds its own).
    """
    pa = _pyarrow()
    if isinstance(schema, (pa.Table, pa.RecordBatch)):
        schema = schema.schema
    if not isinstance(schema, pa.Schema):
        raise TypeError(f"schema must be a pyarrow.Schema, Table or RecordBatch, got {type(schema).__name__}")
    names = list(schema.names)
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"the table has several columns named {dup[0]!r}; rename them first "
                         "(table.rename_columns([...]))")
    if columns is None:
        if not names:
            raise ValueError("the table has no columns to pack")
        non_list = [n for n in names if not _is_list(schema.field(n).type)]
        if non_list:
            lists = [n for n in names if n not in non_list]
            raise TypeError(
                f"column {non_list[0]!r} is not a list column (type {schema.field(non_list[0]).type}); "
                f"every packed column must be a list or large_list column: pass columns={lists!r} "
                "to pack only the list columns (the others are left out of the packed table)"
            )
        selected = names
    else:
        if isinstance(columns, (str, bytes)) or not hasattr(columns, "__iter__"):
            hint = f"; pass columns=[{columns!r}]" if isinstance(columns, str) else ""
            raise TypeError(f"columns must be a list of column names, got {type(columns).__name__} {columns!r}{hint}")
        selected = list(columns)
        if not selected:
            raise ValueError("columns is empty: name at least one list column to pack")
        for n in selected:
            if not isinstance(n, str):
                raise TypeError(f"columns must hold column names (str), got {type(n).__name__} {n!r}")
        seen = set()
        for n in selected:
            if n in seen:
                raise ValueError(f"column {n!r} is named twice in columns={selected!r}")
            seen.add(n)
            if n not in names:
                raise ValueError(f"no column {n!r} in the table; its columns are {names!r}")
            t = schema.field(n).type
            if not _is_list(t):
                raise TypeError(f"column {n!r} is not a list column (type {t}); pass columns=[...] naming only "
                                "list or large_list columns")
    if SEQ_LENGTHS in selected:
        rest = [n for n in selected if n != SEQ_LENGTHS]
        raise ValueError(f"column {SEQ_LENGTHS!r} cannot be packed: the packed table adds its own; "
                         f"pass columns={rest!r} to leave it out")
    return selected


def _column_lengths(column) -> np.ndarray:
    """Values per row of one list column, int64; null rows count as empty."""
    parts = []
    for chunk in _chunks(column):
        off = chunk.offsets.to_numpy()
        lens = np.diff(off).astype(np.int64, copy=False)
        if chunk.null_count:
            lens = lens.copy()
            lens[~chunk.is_valid().to_numpy(zero_copy_only=False)] = 0
        parts.append(lens)
    if not parts:
        return np.zeros(0, np.int64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def row_lengths(table, columns) -> np.ndarray:
    """Tokens per row (int64, one per table row), checking the columns agree row by row.

    Parameters
    ----------
    table : pyarrow.Table or RecordBatch
    columns : sequence of str
        List columns (as returned by :func:`select_list_columns`).

    Notes
    -----
    Null list rows count as empty (0). Raises ``ValueError`` naming the column and the
    first row where a column's length differs from the first column's.
    """
    table = _as_table_like(table)
    columns = select_list_columns(table.schema, columns)
    first = _column_lengths(table.column(columns[0]))
    for name in columns[1:]:
        lens = _column_lengths(table.column(name))
        bad = lens != first
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"column {name!r} has {lens[i]} values in row {i} but column {columns[0]!r} has {first[i]}; "
                "packed columns must have the same length in every row (pass columns=[...] to pack only "
                "the columns that do)"
            )
    return first


@dataclass(frozen=True, eq=False)
class Segments:
    """Rows cut into packable segments (see :func:`make_segments`).

    Segment ``k`` is values ``start[k] : start[k] + length[k]`` of row ``row[k]``.

    Attributes
    ----------
    row, start, length : int64 arrays, one entry per segment, in row order (a split row's
        fragments in order); empty rows have no segment.
    dropped_rows : int
        Empty (or null) rows, which get no segment.
    truncated_tokens : int
        Tokens cut off by ``overflow="truncate"`` (0 for ``"split"``).
    """

    row: np.ndarray
    start: np.ndarray
    length: np.ndarray
    dropped_rows: int
    truncated_tokens: int

    def __post_init__(self):
        for name in ("row", "start", "length"):
            a = np.ascontiguousarray(getattr(self, name), dtype=np.int64)
            a.setflags(write=False)
            object.__setattr__(self, name, a)

    @property
    def num_segments(self) -> int:
        return self.row.size

    @property
    def num_tokens(self) -> int:
        return int(self.length.sum())


def _as_overflow(overflow) -> str:
    if not isinstance(overflow, str):
        raise TypeError(f"overflow must be 'truncate' or 'split', got {type(overflow).__name__} {overflow!r}")
    if overflow not in _OVERFLOW:
        hint = ""
        if overflow in ("bfd", "bfd_split"):
            hint = f" (TRL's strategy={overflow!r} is overflow={'truncate' if overflow == 'bfd' else 'split'!r} here)"
        raise ValueError(f"overflow must be 'truncate' or 'split', got {overflow!r}{hint}")
    return overflow


def make_segments(lengths, max_sequence_length, *, overflow="truncate") -> Segments:
    """Cut rows of the given lengths into segments of at most ``max_sequence_length``.

    Parameters
    ----------
    lengths : array_like of int
        Tokens per row (>= 0), e.g. from :func:`row_lengths`.
    max_sequence_length : int
        Pack capacity in tokens.
    overflow : {"truncate", "split"}
        What to do with a longer row: ``"truncate"`` (TRL's ``bfd``) keeps its first
        ``max_sequence_length`` tokens; ``"split"`` (TRL's ``bfd_split``) cuts it into
        fragments of ``max_sequence_length`` (the last one shorter), losing nothing.

    Returns
    -------
    Segments
        In row order; empty rows are dropped and counted in ``dropped_rows``.
    """
    L = as_positive_int(max_sequence_length, "max_sequence_length")
    overflow = _as_overflow(overflow)
    lens = as_int_array(lengths, "lengths", minimum=0)
    nonempty = lens > 0
    dropped = int(lens.size - np.count_nonzero(nonempty))
    if overflow == "truncate":
        row = np.flatnonzero(nonempty).astype(np.int64)
        full = lens[row]
        length = np.minimum(full, L)
        return Segments(row, np.zeros(row.size, np.int64), length, dropped, int((full - length).sum()))
    nfrag = -(-lens // L)                                   # 0 for empty rows
    row = np.repeat(np.arange(lens.size, dtype=np.int64), nfrag)
    first = np.cumsum(nfrag) - nfrag                         # first fragment of each row
    k = np.arange(row.size, dtype=np.int64) - first[row]     # fragment number within its row
    start = k * L
    length = np.minimum(L, lens[row] - start)
    return Segments(row, start, length, dropped, 0)


# --------------------------------------------------------------------------------------
# Gathering tokens into packed rows
# --------------------------------------------------------------------------------------

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
        chunks.append(cls.from_arrays(pa.array(o.astype(odt)), values.slice(int(off[a]), int(off[b] - off[a])),
                                      type=list_type))
    return pa.chunked_array(chunks, type=list_type)


def _gather_values(column, row, start, length, out_pos, total, by_row, sources: dict):
    """The selected values of one list column, packed, as one flat pyarrow Array.

    ``by_row`` holds the segments sorted by row (row, start, length, out_pos), so the fast
    path reads each chunk's values front to back; ``sources`` caches source positions per
    chunk layout, reused by columns whose offsets equal those they were computed from (as
    for columns built together)."""
    from .._kernels.arrow import gather_values, token_index

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
                offsets = ch.offsets.to_numpy()
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
        [ch.offsets.to_numpy()[:-1].astype(np.int64) + base[c] for c, ch in enumerate(chunks)]
        or [np.zeros(0, np.int64)])
    idx = token_index(row_value_start, row, start, length, total)
    flat = vals[0] if len(vals) == 1 else pa.concat_arrays(vals)
    return pc.take(flat, pa.array(idx))


def _gather(table, columns, row, start, length, pack_offsets, position_ids: bool, row_sorted=None):
    """:func:`gather_packs` on validated input.

    ``row_sorted``: optionally ``(row, start, length, order)`` of the same segments already
    sorted by row, ``order[k]`` being the sorted index of segment ``k`` (as
    :func:`make_segments` and ``Packs.indices`` give them), which saves sorting them here."""
    from .._kernels.arrow import order_by_row, segment_positions

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
    sl_values = pa.array(length.astype(np.int64 if large else np.int32))
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


# --------------------------------------------------------------------------------------
# The whole thing
# --------------------------------------------------------------------------------------


def _options(max_sequence_length, seq_length, method, max_sequences_per_pack, overflow, position_ids, seed):
    L = as_capacity(max_sequence_length, seq_length)
    m = _methods.get(method)
    depth = as_depth(max_sequences_per_pack)
    overflow = _as_overflow(overflow)
    position_ids = as_bool(position_ids, "position_ids")
    seed = 0 if seed is None else as_seed(seed)
    return L, m.name, depth, overflow, position_ids, seed


def _pack(table, rows_map, L, columns, method, depth, overflow, position_ids, seed):
    """Pack ``table`` (or its rows ``rows_map``, in that order): the packed table with its report."""
    cols = select_list_columns(table.schema, columns)
    if position_ids and POSITION_IDS in cols:
        raise ValueError(f"column {POSITION_IDS!r} is packed and position_ids=True would add another; "
                         "pass position_ids=False, or leave it out with columns=[...]")
    lens = row_lengths(table, cols)
    if rows_map is not None:
        lens = lens[rows_map]
    seg = make_segments(lens, L, overflow=overflow)
    packs = _methods.pack(seg.length, L, depth, method=method, seed=seed)
    order = packs.indices
    row = seg.row[order]
    if rows_map is not None:
        row = rows_map[row]
    row_sorted = (seg.row, seg.start, seg.length, order) if rows_map is None else None
    out = _gather(table, cols, row, seg.start[order], seg.length[order], packs.offsets, position_ids, row_sorted)
    tokens = seg.num_tokens
    rows = packs.num_packs
    bound = -(-tokens // L)
    report = {
        "rows": int(lens.size),
        "packed_rows": rows,
        "segments": seg.num_segments,
        "tokens": tokens,
        "efficiency": tokens / (rows * L) if rows else 1.0,
        "row_bound": bound,
        "rows_over_bound": rows - bound,
        "dropped_empty_rows": seg.dropped_rows,
        "truncated_tokens": seg.truncated_tokens,
        "split_rows": int(np.count_nonzero(seg.start == L)),   # rows cut into 2+ fragments
        "max_sequence_length": L,
        "max_sequences_per_pack": depth,
        "method": method,
        "overflow": overflow,
        "seed": seed,
        "columns": cols,
        "left_out_columns": [n for n in table.schema.names if n not in cols],
        "position_ids": position_ids,
    }
    return out.replace_schema_metadata({REPORT_KEY: json.dumps(report).encode()}), report


def pack_table(table, max_sequence_length=None, *, seq_length=None, columns=None, method="bfd",
               max_sequences_per_pack=None, overflow="truncate", position_ids=False, seed=None):
    """Pack the rows of an Arrow table into rows of at most ``max_sequence_length`` tokens.

    Parameters
    ----------
    table : pyarrow.Table or RecordBatch
        List columns with identical offsets (``input_ids``, ``labels``, ...); chunked
        columns, ``list`` and ``large_list``, any value type.
    max_sequence_length, seq_length : int
        Capacity of a packed row in tokens; ``seq_length=`` (TRL's name) is a keyword
        alias. Give one of them.
    columns : sequence of str or None, default None
        The list columns to pack (moved together, row for row). ``None``: all columns,
        which must then all be list columns. Other columns are left out of the result.
    method : str, default "bfd"
        Any :mod:`packlib.methods` name: ``"bfd"``, ``"ffd"`` (per sequence) or the
        histogram packers ``"nnls"``, ``"optimal"``, ``"lpfhp"``, ``"spfhp"``.
    max_sequences_per_pack : int or None, default None
        At most this many segments per packed row (``None``: unlimited).
    overflow : {"truncate", "split"}, default "truncate"
        A row longer than the capacity keeps its first tokens (TRL's ``bfd``; the rest is
        counted in the report's ``truncated_tokens``) or is cut into fragments of
        ``max_sequence_length`` packed separately (TRL's ``bfd_split``; nothing lost).
    position_ids : bool, default False
        Add a ``position_ids`` column: 0, 1, ... restarting at every segment.
    seed : int or None, default None (means 0)
        Which equal-length segment goes to which packed row (histogram methods only);
        the same input, arguments and seed always give the same table.

    Returns
    -------
    pyarrow.Table
        One row per pack, in the order :func:`packlib.methods.pack` returns the packs (for
        ``"bfd"``: the order packs were opened, longest segments first); inside a row the
        segments in pack order. Columns: the selected ones (same types), ``seq_lengths``
        (as TRL), ``position_ids`` if asked; see :func:`gather_packs`. Empty and null rows
        are dropped and counted. The packing report is in the schema metadata under
        ``b"packlib"`` (JSON); read it with :func:`packing_report`.
    """
    table = _as_table_like(table)
    pa = _pyarrow()
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    L, method, depth, overflow, position_ids, seed = _options(
        max_sequence_length, seq_length, method, max_sequences_per_pack, overflow, position_ids, seed)
    return _pack(table, None, L, columns, method, depth, overflow, position_ids, seed)[0]


def packing_report(table) -> dict:
    """The packing report of a table (or ``datasets.Dataset``) made by :func:`pack_table`
    / :func:`pack_dataset`.

    Keys: ``rows`` (input rows), ``packed_rows``, ``segments``, ``tokens`` (packed),
    ``efficiency`` (tokens / (packed_rows x max_sequence_length)), ``row_bound``
    (⌈tokens / max_sequence_length⌉, no packing can use fewer rows), ``rows_over_bound``,
    ``dropped_empty_rows``, ``truncated_tokens``, ``split_rows`` (rows cut into several
    fragments), ``max_sequence_length``, ``max_sequences_per_pack``, ``method``,
    ``overflow``, ``seed``, ``columns``, ``left_out_columns``, ``position_ids``.

    Parameters
    ----------
    table : pyarrow.Table, pyarrow.Schema or datasets.Dataset
        The packed output.
    """
    pa = _pyarrow()
    schema = table
    if isinstance(table, (pa.Table, pa.RecordBatch)):
        schema = table.schema
    elif hasattr(table, "data") and hasattr(table.data, "schema"):  # datasets.Dataset
        schema = table.data.schema
    if not isinstance(schema, pa.Schema):
        raise TypeError(f"table must be a pyarrow Table, Schema or datasets.Dataset, got {type(table).__name__}")
    meta = schema.metadata or {}
    if REPORT_KEY not in meta and b"huggingface" in meta:
        hf = json.loads(meta[b"huggingface"])
        if isinstance(hf, dict) and "packlib" in hf:
            return hf["packlib"]
    if REPORT_KEY not in meta:
        raise ValueError("this table carries no packing report (schema metadata b'packlib'); "
                         "it was not made by pack_table / pack_dataset, or its metadata was replaced")
    return json.loads(meta[REPORT_KEY])


def pack_dataset(dataset, max_sequence_length=None, *, seq_length=None, columns=None, method="bfd",
                 max_sequences_per_pack=None, overflow="truncate", position_ids=False, seed=None):
    """Pack a Hugging Face ``datasets.Dataset`` (or each split of a ``DatasetDict``), whole.

    Takes the same arguments as :func:`pack_table` and returns the same type it was
    given. The dataset's Arrow table is read in place (a memory-mapped dataset is not
    loaded first; an index mapping from ``select`` / ``shuffle`` is followed without
    flattening it); the packed dataset is held in memory. The dataset's format
    (``with_format("torch")``, ...) is kept, with ``seq_lengths`` (and ``position_ids``)
    added to its columns as TRL does. The report is in the packed table's schema
    metadata: ``packing_report(packed)``.

    Parameters
    ----------
    dataset : datasets.Dataset or datasets.DatasetDict
    max_sequence_length, seq_length, columns, method, max_sequences_per_pack, overflow, position_ids, seed
        As for :func:`pack_table`.
    """
    ds_mod = _datasets()
    if isinstance(dataset, ds_mod.DatasetDict):
        return ds_mod.DatasetDict({
            k: pack_dataset(v, max_sequence_length, seq_length=seq_length, columns=columns, method=method,
                            max_sequences_per_pack=max_sequences_per_pack, overflow=overflow,
                            position_ids=position_ids, seed=seed)
            for k, v in dataset.items()})
    if not isinstance(dataset, ds_mod.Dataset):
        hint = ""
        if isinstance(dataset, (ds_mod.IterableDataset, ds_mod.IterableDatasetDict)):
            hint = ("; an IterableDataset streams and cannot be packed whole: materialise it "
                    "(Dataset.from_generator) or use packlib.pipeline")
        raise TypeError(f"dataset must be a datasets.Dataset or DatasetDict, got {type(dataset).__name__}{hint}")
    L, method, depth, overflow, position_ids, seed = _options(
        max_sequence_length, seq_length, method, max_sequences_per_pack, overflow, position_ids, seed)
    table = dataset.data.table                     # the pyarrow.Table (memory-mapped or in memory)
    rows_map = None
    if dataset._indices is not None:               # after select / shuffle / filter: follow the mapping
        idx = dataset._indices.column(0)
        rows_map = np.concatenate([c.to_numpy() for c in idx.chunks] or [np.zeros(0, np.uint64)]).astype(np.int64)
    packed, report = _pack(table, rows_map, L, columns, method, depth, overflow, position_ids, seed)
    # datasets rewrites the schema metadata to {b"huggingface": ...} but keeps unknown keys
    # inside that JSON: the report rides there too
    packed = packed.replace_schema_metadata({b"huggingface": json.dumps({"packlib": report}).encode()})
    out = ds_mod.Dataset(packed, split=dataset.split, fingerprint=_fingerprint(dataset, report))
    fmt = dataset.format
    if fmt.get("type") is not None or fmt.get("columns") is not None:
        cols = fmt.get("columns")
        if cols is not None:
            added = [SEQ_LENGTHS] + ([POSITION_IDS] if position_ids else [])
            cols = [c for c in cols if c in report["columns"]] + added
        out = out.with_format(type=fmt.get("type"), columns=cols,
                              output_all_columns=fmt.get("output_all_columns", False),
                              **(fmt.get("format_kwargs") or {}))
    return out


def _fingerprint(dataset, report) -> str:
    import hashlib

    h = hashlib.sha256(str(getattr(dataset, "_fingerprint", "")).encode())
    h.update(json.dumps({k: report[k] for k in ("max_sequence_length", "max_sequences_per_pack", "method",
                                                  "overflow", "seed", "columns", "position_ids")}).encode())
    return h.hexdigest()[:16]
