"""The in-memory entry points: :func:`pack_table`, :func:`pack_dataset`, :func:`packing_report`."""
from __future__ import annotations

import json

import numpy as np

from ... import methods as _methods
from ..._validate import as_bool, as_capacity, as_depth, as_seed
from ._columns import (
    POSITION_IDS,
    REPORT_KEY,
    SEQ_LENGTHS,
    _as_table_like,
    _datasets,
    _pyarrow,
    null_rows,
    refuse_packed_position_ids,
    row_lengths,
    select_list_columns,
)
from ._carry import carried_columns, carried_features, carry_columns, packed_candidates, refuse_cut
from ._gather import _gather
from ._labels import LABELS, fold_masks
from ._numpy import as_numpy
from ._segments import _as_overflow, make_segments


def _options(max_sequence_length, seq_length, method, max_sequences_per_pack, overflow, position_ids, seed,
             fold):
    L = as_capacity(max_sequence_length, seq_length)
    m = _methods.get(method)
    depth = as_depth(max_sequences_per_pack)
    overflow = _as_overflow(overflow)
    position_ids = as_bool(position_ids, "position_ids")
    fold = as_bool(fold, "fold_masks")
    seed = 0 if seed is None else as_seed(seed)
    return L, m, depth, overflow, position_ids, seed, fold


def _pack(table, rows_map, L, columns, method, depth, overflow, position_ids, seed, fold=False, carry=None):
    """Pack ``table`` (or its rows ``rows_map``, in that order): the packed table with its report."""
    cols = select_list_columns(table.schema, packed_candidates(table.schema, carry) if columns is None else columns)
    carried = carried_columns(table.schema, carry, cols)
    refuse_cut(carried, overflow)
    refuse_packed_position_ids(cols, position_ids)
    lens = row_lengths(table, cols)
    if rows_map is not None:
        lens = lens[rows_map]
    seg = make_segments(lens, L, overflow=overflow)
    packs = _methods._pack(seg.length, L, depth, method, seed)  # checked once, by _options
    order = packs.indices
    row = seg.row[order]
    if rows_map is not None:
        row = rows_map[row]
    row_sorted = (seg.row, seg.start, seg.length, order) if rows_map is None else None
    out = _gather(table, cols, row, seg.start[order], seg.length[order], packs.offsets, position_ids, row_sorted)
    for name, values in carry_columns(table, carried, row, packs.offsets).items():
        out = out.append_column(name, values)
    out, folded = fold_masks(out, cols) if fold else (out, [])
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
        "dropped_null_rows": null_rows(table, cols[0], rows_map),
        "truncated_tokens": seg.truncated_tokens,
        "split_rows": int(np.count_nonzero(seg.start == L)),   # rows cut into 2+ fragments
        "max_sequence_length": L,
        "max_sequences_per_pack": depth,
        "method": method.name,
        "overflow": overflow,
        "seed": seed,
        "columns": cols,
        "left_out_columns": [n for n in table.schema.names if n not in cols and n not in carried],
        "carried_columns": carried,
        "position_ids": position_ids,
        "folded_masks": folded,
    }
    return out.replace_schema_metadata({REPORT_KEY: json.dumps(report).encode()}), report


def pack_table(table, max_sequence_length=None, *, seq_length=None, columns=None, method="bfd",
               max_sequences_per_pack=None, overflow="error", position_ids=False, fold_masks=False, seed=0,
               carry=None):
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
        The list columns to pack (moved together, row for row). ``None``: every list
        column. Other columns are left out of the result and listed in the report's
        ``left_out_columns`` (the same rule as :func:`packlib.pipeline.pack_files`).
    method : str, default "bfd"
        Any :mod:`packlib.methods` name: ``"bfd"``, ``"ffd"`` (per sequence) or the
        histogram packers ``"nnls"``, ``"optimal"``, ``"lpfhp"``, ``"spfhp"``.
    max_sequences_per_pack : int or None, default None
        At most this many segments per packed row (``None``: unlimited).
    overflow : {"error", "truncate", "split"}, default "error"
        A row longer than the capacity is refused with a ``ValueError`` naming the row
        (the default: no token is lost unless asked), keeps its first tokens (TRL's
        ``bfd``; the rest is counted in the report's ``truncated_tokens``) or is cut into
        fragments of ``max_sequence_length`` packed separately (TRL's ``bfd_split``;
        nothing lost). The command line and :func:`packlib.pipeline.pack_files` share
        this default.
    position_ids : bool, default False
        Add a ``position_ids`` column: 0, 1, ... restarting at every segment.
    fold_masks : bool, default False
        Where ``completion_mask`` or ``assistant_masks`` is packed, also write ``labels``:
        -100 wherever one of them is 0, else the given ``labels`` (``input_ids`` when
        there are none). The masks stay too; they and the labels say the same.
    seed : int, default 0
        Which equal-length segment goes to which packed row (histogram methods only);
        the same input, arguments and seed always give the same table.
    carry : sequence of str, optional
        Columns carried whole with their rows, not packed token by token: a packed row
        holds the carried values of its rows end to end, in the row's order (a list
        column's lists concatenated: ``pixel_values`` and ``image_grid_thw`` of processed
        vision-language data, as :class:`packlib.torch.VisionPackedCollator` reads them;
        any other column's values listed, e.g. encoded images, never decoded). With
        ``columns=None`` every other list column is packed. Needs ``overflow="error"``.

    Returns
    -------
    pyarrow.Table
        One row per pack, in the order :func:`packlib.methods.pack` returns the packs (for
        ``"bfd"``: the order packs were opened, longest segments first); inside a row the
        segments in pack order. Columns: the selected ones (same types), ``seq_lengths``
        (as TRL), ``position_ids`` if asked, ``labels`` if folded; see :func:`gather_packs`.
        Empty and null rows are dropped and counted. The packing report is in the schema metadata under
        ``b"packlib"`` (JSON); read it with :func:`packing_report`.
    """
    table = _as_table_like(table)
    pa = _pyarrow()
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    L, method, depth, overflow, position_ids, seed, fold = _options(
        max_sequence_length, seq_length, method, max_sequences_per_pack, overflow, position_ids, seed, fold_masks)
    return _pack(table, None, L, columns, method, depth, overflow, position_ids, seed, fold, carry)[0]


def packing_report(table) -> dict:
    """The packing report of a table (or ``datasets.Dataset``) made by :func:`pack_table`
    / :func:`pack_dataset`.

    Keys: ``rows`` (input rows), ``packed_rows``, ``segments``, ``tokens`` (packed),
    ``efficiency`` (tokens / (packed_rows x max_sequence_length)), ``row_bound``
    (⌈tokens / max_sequence_length⌉, no packing can use fewer rows), ``rows_over_bound``,
    ``dropped_empty_rows``, ``truncated_tokens``, ``split_rows`` (rows cut into several
    fragments), ``max_sequence_length``, ``max_sequences_per_pack``, ``method``,
    ``overflow``, ``seed``, ``columns``, ``left_out_columns``, ``carried_columns``, ``position_ids``.

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
                 max_sequences_per_pack=None, overflow="error", position_ids=True, fold_masks=True, seed=0,
                 carry=None):
    """Pack a Hugging Face ``datasets.Dataset`` (or each split of a ``DatasetDict``), whole.

    Takes the same arguments as :func:`pack_table` and returns the same type it was
    given, except that ``position_ids`` and ``fold_masks`` default to ``True``, for
    ``transformers.Trainer``'s default ``remove_unused_columns=True``, which keeps only the
    columns its model's ``forward`` names and so drops ``seq_lengths``, ``completion_mask``
    and ``assistant_masks``: the packed rows carry ``position_ids`` restarting at every
    sequence (which tell :class:`packlib.torch.PackedCollator` where a row's sequences
    start) and ``labels`` holding the masks (-100 where a mask is 0). The dataset's Arrow table is read in place (a memory-mapped dataset is not
    loaded first; an index mapping from ``select`` / ``shuffle`` is followed without
    flattening it); the packed dataset is held in memory. The dataset's format
    (``with_format("torch")``, ...) is kept, with ``seq_lengths`` (and ``position_ids``)
    added to its columns as TRL does. The report is in the packed table's schema
    metadata: ``packing_report(packed)``.

    Parameters
    ----------
    dataset : datasets.Dataset or datasets.DatasetDict
    max_sequence_length, seq_length, columns, method, max_sequences_per_pack, overflow, seed, carry
        As for :func:`pack_table`.
    position_ids : bool, default True
        Add the ``position_ids`` column (``False``: only TRL's columns).
    fold_masks : bool, default True
        Write ``labels`` from ``completion_mask`` / ``assistant_masks`` where the data has
        one (``False``: as :func:`pack_table`, the masks alone).
    """
    ds_mod = _datasets()
    if isinstance(dataset, ds_mod.DatasetDict):
        return ds_mod.DatasetDict({
            k: pack_dataset(v, max_sequence_length, seq_length=seq_length, columns=columns, method=method,
                            max_sequences_per_pack=max_sequences_per_pack, overflow=overflow,
                            position_ids=position_ids, fold_masks=fold_masks, seed=seed, carry=carry)
            for k, v in dataset.items()})
    if not isinstance(dataset, ds_mod.Dataset):
        hint = ""
        if isinstance(dataset, (ds_mod.IterableDataset, ds_mod.IterableDatasetDict)):
            hint = ("; an IterableDataset streams and cannot be packed whole: materialise it "
                    "(Dataset.from_generator) or use packlib.pipeline")
        raise TypeError(f"dataset must be a datasets.Dataset or DatasetDict, got {type(dataset).__name__}{hint}")
    L, method, depth, overflow, position_ids, seed, fold = _options(
        max_sequence_length, seq_length, method, max_sequences_per_pack, overflow, position_ids, seed, fold_masks)
    table = dataset.data.table                     # the pyarrow.Table (memory-mapped or in memory)
    rows_map = None
    if dataset._indices is not None:               # after select / shuffle / filter: follow the mapping
        idx = dataset._indices.column(0)
        rows_map = as_numpy(idx).astype(np.int64)
    packed, report = _pack(table, rows_map, L, columns, method, depth, overflow, position_ids, seed, fold, carry)
    # datasets rewrites the schema metadata to {b"huggingface": ...} but keeps unknown keys
    # inside that JSON: the report rides there too
    packed = packed.replace_schema_metadata({b"huggingface": json.dumps({"packlib": report}).encode()})
    feats = carried_features(ds_mod, dataset.features, packed.schema, table.schema, report["carried_columns"])
    info = None if feats is None else ds_mod.DatasetInfo(features=feats)
    out = ds_mod.Dataset(packed, info=info, split=dataset.split, fingerprint=_fingerprint(dataset, report))
    fmt = dataset.format
    if fmt.get("type") is not None or fmt.get("columns") is not None:
        cols = fmt.get("columns")
        if cols is not None:
            added = [SEQ_LENGTHS] + ([POSITION_IDS] if position_ids else [])
            added += [LABELS] if report["folded_masks"] and LABELS not in report["columns"] else []
            cols = [c for c in cols if c in report["columns"] or c in report["carried_columns"]] + added
        out = out.with_format(type=fmt.get("type"), columns=cols,
                              output_all_columns=fmt.get("output_all_columns", False),
                              **(fmt.get("format_kwargs") or {}))
    return out


def _fingerprint(dataset, report) -> str:
    import hashlib

    h = hashlib.sha256(str(getattr(dataset, "_fingerprint", "")).encode())
    h.update(json.dumps({k: report[k] for k in ("max_sequence_length", "max_sequences_per_pack", "method",
                                                  "overflow", "seed", "columns", "position_ids",
                                                  "folded_masks", "carried_columns")}).encode())
    return h.hexdigest()[:16]
