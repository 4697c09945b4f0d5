"""``pack-dataset --format megatron-sft``: Parquet / ``save_to_disk`` files in, Megatron-Bridge's
packed ``.npy`` (and its metadata list) out, through :func:`packlib.formats.megatron_sft.write_packed`.

The format is one pickled array that Megatron-Bridge loads whole, so the packing itself is
in memory: the inputs are read batch by batch, only the columns the file needs
(``input_ids`` and ``loss_mask`` or ``answer_start_idx``), into one Arrow table (about the
tokens' own bytes), and the file is written a batch of packs at a time.

The file is written in a staging directory beside the output and moved there at the end,
the metadata list appended only then: SIGINT, SIGTERM and SIGHUP stop the run at the next
safe point (between read batches, before and after the packing and writing), leaving
nothing (see ``_signals`` and ``_staging``).
"""
from __future__ import annotations

import json
import os
import re

from ._errors import InputError
from ._signals import check, stop_point
from ._staging import StagedRun, staging_dir
from .readers import expand_inputs, iter_batches, read_schema

__all__ = ["pack_files_megatron_sft"]

_MASKS = ("loss_mask", "answer_start_idx")


def _read(shards):
    """One table of the needed columns of every shard, and (first row, path) per shard."""
    import pyarrow as pa

    first = read_schema(shards[0])
    cols = ["input_ids"] + [c for c in _MASKS if c in first.names][:1]
    tables, starts, n = [], [], 0
    for shard in shards:
        names = read_schema(shard).names
        missing = [c for c in cols if c not in names]
        if missing:
            raise InputError(f"{shard.path}: no column {missing[0]!r}, which {shards[0].path} has; every file "
                             "needs the same columns")
        batches = []
        for batch in iter_batches(shard, cols):
            check()
            batches.append(batch)
        starts.append((n, shard.path))
        if batches:
            tables.append(pa.Table.from_batches(batches))
            n += tables[-1].num_rows
    if not tables:
        raise InputError("the input files hold no rows")
    try:
        return pa.concat_tables(tables, promote_options="permissive"), starts
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise InputError(f"the input files' columns have types that do not combine ({exc}); cast them alike") from None


def _locate(message: str, starts) -> str:
    """``row N`` of the combined table as ``<file> row M``."""
    def where(m):
        row = int(m.group(1))
        first, path = max((s for s in starts if s[0] <= row), key=lambda s: s[0])
        return f"{path} row {row - first}"
    return re.sub(r"\brow (\d+)", where, message, count=1)


def pack_files_megatron_sft(inputs, max_sequence_length, max_sequences_per_pack=None, *, output,
                            metadata_output=None, method: str = "optimal", overflow: str = "error",
                            seed: int = 0) -> dict:
    """Pack files of tokenised SFT rows into Megatron-Bridge's packed ``.npy`` file.

    Parameters
    ----------
    inputs : str, os.PathLike or list of them
        Parquet files, ``save_to_disk`` directories, Arrow IPC files, or globs, with the
        columns :func:`packlib.formats.megatron_sft.write_packed` reads.
    max_sequence_length : int
        Megatron-Bridge's ``packed_sequence_size``.
    max_sequences_per_pack : int or None, default None
        Depth limit; ``None`` for unlimited.
    output : str or os.PathLike
        The ``.npy`` file.
    metadata_output : str or os.PathLike, optional
        The JSON metadata list to append to.
    method, overflow, seed
        As for :func:`~packlib.formats.megatron_sft.write_packed`.

    Returns
    -------
    dict
        :func:`~packlib.formats.megatron_sft.write_packed`'s report, with ``files``.
    """
    from ..formats.megatron_sft import _check_paths, _save_atomic, write_packed

    shards = expand_inputs(inputs)
    if any(s.kind == "tfrecord" for s in shards):
        raise InputError("--format megatron-sft reads Parquet or Arrow files of tokenised SFT rows, not TFRecords")
    output, metadata_output, existing = _check_paths(output, metadata_output)
    output = os.path.abspath(output)
    with StagedRun(staging_dir(output)) as staged:
        stop_point("read:start")
        table, starts = _read(shards)
        stop_point("read:end")
        staged_npy = os.path.join(staged.work, os.path.basename(output))
        stop_point("write:start")
        try:
            report = write_packed(table, max_sequence_length, max_sequences_per_pack, output=staged_npy,
                                  method=method, seed=seed, overflow=overflow)
        except ValueError as exc:
            raise InputError(_locate(str(exc), starts)) from None
        del table
        stop_point("write:end")
        with staged.publishing():
            os.replace(staged_npy, output)
            if metadata_output is not None:
                text = json.dumps(existing + [report["metadata"]]).encode()
                _save_atomic(metadata_output, lambda f: f.write(text))
    report.update(output=output, metadata_output=metadata_output, files=len(shards))
    return report
