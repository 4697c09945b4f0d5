"""Columns carried whole with their rows (``carry=``): a row's images (``pixel_values``,
``image_grid_thw``, encoded image bytes, ...) go into the packed row that holds the row's
tokens, in the packed row's order, never split and never decoded."""
from __future__ import annotations

import numpy as np

from ._columns import POSITION_IDS, SEQ_LENGTHS, _is_list, _pyarrow
from ._numpy import as_arrow, as_numpy, validity


def carry_names(carry) -> list[str]:
    """``carry`` as a list of column names (``None``: none); a ``TypeError`` for anything else."""
    if carry is None:
        return []
    if isinstance(carry, (str, bytes)) or not hasattr(carry, "__iter__"):
        hint = f"; pass carry=[{carry!r}]" if isinstance(carry, str) else ""
        raise TypeError(f"carry must be a list of column names, got {type(carry).__name__} {carry!r}{hint}")
    names = list(carry)
    for n in names:
        if not isinstance(n, str):
            raise TypeError(f"carry must hold column names (str), got {type(n).__name__} {n!r}")
    return names


def carried_columns(schema, carry, packed) -> list[str]:
    """``carry`` checked against ``schema``: a list of column names, each in the table, none
    of them packed or ``seq_lengths``."""
    names = carry_names(carry)
    for n in names:
        if n not in schema.names:
            raise ValueError(f"no column {n!r} in the table to carry; its columns are {list(schema.names)!r}")
        if n in (SEQ_LENGTHS, POSITION_IDS):
            raise ValueError(f"column {n!r} cannot be carried: packing writes its own {n!r}; drop or rename it first")
        if n in packed:
            raise ValueError(f"column {n!r} is both packed and carried: name it in columns=[...] (its values are "
                             "tokens, one per token of input_ids) or in carry=[...] (whole per row), not both")
        if names.count(n) > 1:
            raise ValueError(f"column {n!r} is named twice in carry={names!r}")
    return names


def refuse_cut(carried, overflow) -> None:
    """A row cut by ``overflow`` would part its tokens from what it carries: carrying needs
    ``overflow="error"`` (the one message of :func:`pack_table` and the pipeline)."""
    if carried and overflow != "error":
        raise ValueError(f"carry={list(carried)!r} needs overflow='error': a row cut by overflow={overflow!r} would "
                         "part its tokens from what it carries (an image's tokens from its pixels); drop or shorten "
                         "the long rows first, or raise max_sequence_length")


def packed_candidates(schema, carry) -> list[str] | None:
    """With ``columns=None``: every list column that is not carried (``None`` without carry)."""
    if not carry or isinstance(carry, (str, bytes)):
        return None
    return [n for n in schema.names if _is_list(schema.field(n).type) and n not in set(carry)]


def carry_columns(table, names, row: np.ndarray, offsets: np.ndarray) -> dict:
    """Each carried column as packed rows: packed row ``k`` holds the values of input rows
    ``row[offsets[k]:offsets[k + 1]]`` end to end (a list column's lists concatenated, any
    other column's values listed); a null row carries nothing."""
    pa = _pyarrow()
    take = as_arrow(row.astype(np.int64))
    out = {}
    for name in names:
        col = table.column(name).take(take).combine_chunks()
        large = pa.types.is_large_list(col.type)
        if _is_list(col.type):
            per_row = as_numpy(col.value_lengths(), nulls_as=0).astype(np.int64)
            values = col.flatten()  # nulls contribute nothing
        else:
            per_row = validity(col).astype(np.int64)
            values = col.filter(as_arrow(per_row.astype(bool)))
        ends = np.concatenate(([0], np.cumsum(per_row)))[offsets]
        cls = pa.LargeListArray if large or ends[-1] >= 2**31 else pa.ListArray
        out[name] = cls.from_arrays(as_arrow(ends.astype(np.int64 if cls is pa.LargeListArray else np.int32)), values)
    return out


def carried_features(ds_mod, features, packed_schema, source_schema, carried):
    """The ``datasets.Features`` of a packed dataset whose carried columns keep their
    input's feature (an ``Image()`` column stays images, decoded on access): a list
    column's as it was, any other column's as a list of it; the other columns' from their
    Arrow types. ``None`` when nothing is carried, or the types would not agree."""
    if not carried or features is None:
        return None
    as_list = getattr(ds_mod, "List", None) or ds_mod.Sequence
    out = ds_mod.Features.from_arrow_schema(packed_schema.remove_metadata())
    for name in carried:
        f = features[name]
        out[name] = f if _is_list(source_schema.field(name).type) else as_list(f)
    if out.arrow_schema.remove_metadata() != packed_schema.remove_metadata():
        return None  # e.g. a large_list the features cannot spell: the Arrow types' features, as without carry
    return out

