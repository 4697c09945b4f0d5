"""Reading the input: which columns are packed, and each row's length."""
from __future__ import annotations

import numpy as np

from ._numpy import as_numpy, validity

REPORT_KEY = b"packlib"
#: The columns the packed output adds.
SEQ_LENGTHS = "seq_lengths"
POSITION_IDS = "position_ids"
#: Columns whose values are token ids: integers only.
TOKEN_COLUMNS = ("input_ids", "labels")
#: Columns whose values are per-token flags or positions: integers or booleans.
MASK_COLUMNS = ("attention_mask", "completion_mask", "assistant_masks", POSITION_IDS)


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


def refuse_packed_position_ids(columns, position_ids: bool) -> None:
    """A packed ``position_ids`` column and ``position_ids=True`` (which adds another): a ValueError."""
    if position_ids and POSITION_IDS in columns:
        raise ValueError(f"column {POSITION_IDS!r} is packed and position_ids=True would add another; "
                         "pass position_ids=False, or leave it out with columns=[...]")


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
        The columns to pack, in output order. ``None``: every ``list`` / ``large_list``
        column; the others are left out (they cannot be concatenated into packed rows), and
        the reports of :func:`pack_table` and :func:`packlib.pipeline.pack_files` list them.

    Returns
    -------
    list of str
        The column names, each a ``list`` / ``large_list`` column of ``schema``.

    Raises
    ------
    TypeError
        A column named in ``columns`` is not a list column, or ``columns`` is not a sequence
        of names.
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
        selected = [n for n in names if _is_list(schema.field(n).type)]
        if not selected:
            raise TypeError("the table has no list or large_list column to pack (its columns: "
                            + ", ".join(f"{n} {schema.field(n).type}" for n in names[:5]) + "); tokenize it first")
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


def _column_lengths(column, name: str = "", first_row: int = 0) -> np.ndarray:
    """Values per row of one list column, int64; null rows count as empty. A null *value*
    (a null token) is a ``ValueError`` naming the column and row: packed rows cannot hold it."""
    parts, row0 = [], first_row
    for chunk in _chunks(column):
        off = as_numpy(chunk.offsets)
        lens = np.diff(off).astype(np.int64, copy=False)
        valid = None
        if chunk.null_count:
            valid = validity(chunk)
            lens = lens.copy()
            lens[~valid] = 0
        if chunk.values.null_count:
            _refuse_null_values(chunk, off, valid, name, row0)
        parts.append(lens)
        row0 += len(chunk)
    if not parts:
        return np.zeros(0, np.int64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _refuse_null_values(chunk, off, valid, name: str, row0: int) -> None:
    """Raise if a valid row of a list chunk holds a null value (values of null rows are ignored)."""
    nulls = ~validity(chunk.values)
    first = np.flatnonzero(nulls)
    # the row each null value falls in (values outside every row's range are not data)
    rows = np.searchsorted(off, first, side="right") - 1
    inside = (first >= off[0]) & (first < off[-1])
    if valid is not None:
        inside &= valid[np.clip(rows, 0, len(chunk) - 1)]
    if inside.any():
        k = int(np.flatnonzero(inside)[0])
        r = int(rows[k])
        raise ValueError(f"column {name!r} row {row0 + r} holds a null token (position {int(first[k] - off[r])}); "
                         "fill or drop such values first: packed rows cannot hold nulls")


def null_rows(table, column: str, rows=None) -> int:
    """How many rows of a list column are null (they are dropped like empty rows); with
    ``rows`` (int64 row numbers), how many of those."""
    chunks = _chunks(table.column(column))
    if rows is None:
        return int(sum(chunk.null_count for chunk in chunks))
    if not any(chunk.null_count for chunk in chunks):
        return 0
    valid = validity(table.column(column))
    return int(np.count_nonzero(~valid[rows]))


def _check_token_types(schema, columns, lens: np.ndarray, first_row: int) -> None:
    """A ``TypeError`` naming the column and its first non-empty row when a token column
    (``input_ids``, ``labels``) holds anything but integers, or a mask column anything but
    integers or booleans: strings or floats there are untokenised or mistyped data, which a
    model would fail on (or train on) much later."""
    pa = _pyarrow()
    for name in columns:
        if name not in TOKEN_COLUMNS and name not in MASK_COLUMNS:
            continue
        t = schema.field(name).type.value_type
        if pa.types.is_integer(t) or (name in MASK_COLUMNS and pa.types.is_boolean(t)):
            continue
        filled = np.flatnonzero(lens > 0)
        where = f"row {first_row + int(filled[0])}" if filled.size else "every row is empty"
        want = "integer token ids" if name in TOKEN_COLUMNS else "integers or booleans (one per token)"
        raise TypeError(f"column {name!r} holds {t} values ({where}) but must hold {want}; tokenize the text "
                        f"first, or cast the column (table.set_column(..., {name!r}, column.cast(pa.list_(pa.int64()))))")


def row_lengths(table, columns, *, first_row: int = 0) -> np.ndarray:
    """Tokens per row (int64, one per table row), checking the columns agree row by row.

    Parameters
    ----------
    table : pyarrow.Table or RecordBatch
    columns : sequence of str
        List columns (as returned by :func:`select_list_columns`).
    first_row : int, default 0
        The number of the table's first row in error messages (a batch of a larger file).

    Notes
    -----
    Null list rows count as empty (0). Raises ``ValueError`` naming the column and the
    first row where a column's length differs from the first column's, or where a row
    holds a null value (a null token cannot be packed); ``TypeError`` naming the column and
    row when ``input_ids`` or ``labels`` hold anything but integers, or a mask column
    (``attention_mask``, ``completion_mask``, ``assistant_masks``, ``position_ids``)
    anything but integers or booleans.
    """
    table = _as_table_like(table)
    columns = select_list_columns(table.schema, columns)
    first = _column_lengths(table.column(columns[0]), columns[0], first_row)
    _check_token_types(table.schema, columns, first, first_row)
    for name in columns[1:]:
        lens = _column_lengths(table.column(name), name, first_row)
        bad = lens != first
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"column {name!r} has {lens[i]} values in row {first_row + i} but column {columns[0]!r} has {first[i]}; "
                "packed columns must have the same length in every row (pass columns=[...] to pack only "
                "the columns that do, and carry=[...] for those that belong to a row whole, such as images)"
            )
    return first
