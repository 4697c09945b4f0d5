"""Input shards of the pipeline: Parquet files, ``datasets`` ``save_to_disk`` directories
(Arrow IPC files), and unpacked MLPerf BERT TFRecords.

An input is a file, a directory or a glob. Each input file is one shard; a shard is read
in record batches, so a worker holds one batch of it at a time, never a whole file
(TFRecord files excepted: they are decoded whole).

Unpacked MLPerf BERT records become the list columns ``input_ids`` (int32),
``segment_ids`` (int8) and ``labels`` (int32: the masked-LM target at each masked
position, ``-100`` elsewhere, the Hugging Face convention), plus the scalar
``next_sentence_label``, which is not a list column and so is left out of packed Parquet
(the ``mlperf-bert`` command keeps it).

>>> import os, tempfile
>>> import pyarrow as pa, pyarrow.parquet as pq
>>> d = tempfile.mkdtemp()
>>> for name in ("b.parquet", "a.parquet"):
...     pq.write_table(pa.table({"input_ids": [[1, 2], [3]]}), os.path.join(d, name))
>>> [(os.path.basename(s.path), s.kind) for s in expand_inputs(d)]
[('a.parquet', 'parquet'), ('b.parquet', 'parquet')]
>>> [b.num_rows for b in iter_batches(expand_inputs(d)[0], ["input_ids"])]
[2]
"""
from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass

import numpy as np

from ._errors import InputError

__all__ = ["Shard", "expand_inputs", "read_schema", "iter_batches"]

_PARQUET_EXT = (".parquet", ".pq")
_TFRECORD_HINT = (".tfrecord", ".tfrecords", ".tfrecord.gz", ".tfrecords.gz")


@dataclass(frozen=True)
class Shard:
    """One input file and how to read it (``kind``: parquet, arrow-stream, arrow-file, tfrecord)."""

    path: str
    kind: str


def _sniff(path: str) -> str:
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as exc:
        raise InputError(f"{path}: cannot open ({exc.strerror or exc}); check the path and permissions") from None
    if head[:4] == b"PAR1":
        return "parquet"
    if head[:6] == b"ARROW1":
        return "arrow-file"
    if head[:4] == b"\xff\xff\xff\xff":
        return "arrow-stream"
    if path.endswith(_TFRECORD_HINT) or head[:2] == b"\x1f\x8b" or len(head) >= 8 or not head:
        if path.endswith(_PARQUET_EXT):
            raise InputError(f"{path}: not a Parquet file (no PAR1 magic); check that the file is complete")
        if path.endswith(".arrow"):
            raise InputError(f"{path}: not an Arrow IPC file; check that the file is complete")
        return "tfrecord"
    raise InputError(f"{path}: unrecognised file format; give Parquet, Arrow or TFRecord files")


def _dir_files(d: str) -> list[str]:
    state = os.path.join(d, "state.json")
    if os.path.isfile(state):  # datasets.Dataset.save_to_disk
        try:
            with open(state, encoding="utf-8") as f:
                files = [x["filename"] for x in json.load(f)["_data_files"]]
            return [os.path.join(d, x) for x in files]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{state}: not a datasets state.json ({exc}); give the Arrow files instead") from None
    if os.path.isfile(os.path.join(d, "dataset_dict.json")):
        raise InputError(f"{d}: a DatasetDict; give one split's directory (e.g. {os.path.join(d, 'train')})")
    found = []
    for root, dirs, files in os.walk(d):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(_PARQUET_EXT + (".arrow",) + _TFRECORD_HINT) or name.startswith("part-"):
                found.append(os.path.join(root, name))
    return found


def expand_inputs(inputs) -> list[Shard]:
    """The shards of the given files, directories and globs, in order (a directory's and a
    glob's files sorted by name; each file once).

    Parameters
    ----------
    inputs : str, os.PathLike, or a sequence of them
        Parquet files, ``save_to_disk`` directories, Arrow IPC files, TFRecord files,
        directories holding them, or globs.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    paths: list[str] = []
    for item in inputs:
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(f"inputs must be paths (str or os.PathLike), got {type(item).__name__} {item!r}")
        s = os.fspath(item)
        if os.path.isdir(s):
            files = _dir_files(s)
            if not files:
                raise InputError(f"{s}: the directory holds no Parquet, Arrow or TFRecord files")
        elif os.path.exists(s):
            files = [s]
        else:
            files = sorted(glob.glob(s, recursive=True))
            files = [f for f in files if os.path.isfile(f)]
            if not files:
                raise InputError(f"{s}: no such file, directory or matching glob; check the path")
        paths.extend(files)
    seen, shards = set(), []
    for p in paths:
        key = os.path.realpath(p)
        if key in seen:
            continue
        seen.add(key)
        shards.append(Shard(p, _sniff(p)))
    if not shards:
        raise InputError("no input files given")
    return shards


# --------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------
def _wrap(shard: Shard, exc: BaseException) -> InputError:
    what = {"parquet": "Parquet", "arrow-stream": "Arrow IPC stream", "arrow-file": "Arrow IPC",
            "tfrecord": "TFRecord"}[shard.kind]
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, InputError):
        return exc
    if isinstance(exc, ValueError) and msg.startswith(shard.path):
        return InputError(f"{msg}; check that the file is complete, or leave it out")
    return InputError(f"{shard.path}: cannot read as {what} ({msg}); check that the file is complete, or leave it out")


def _bert_table(shard: Shard):
    import pyarrow as pa

    from ..formats.arrow._numpy import as_arrow
    from ..formats.mlperf_bert import read_unpacked

    seqs = read_unpacked([shard.path], compression="auto", progress=False)
    n = seqs.num_sequences
    offs = as_arrow(seqs.seq_offsets.astype(np.int32) if seqs.tokens.size < 2**31 else seqs.seq_offsets)
    labels = np.full(seqs.tokens.size, -100, dtype=np.int32)
    row = np.repeat(np.arange(n), np.diff(seqs.mlm_offsets))
    labels[seqs.seq_offsets[:-1][row] + seqs.mlm_positions] = seqs.mlm_ids
    cls = pa.ListArray if offs.type == pa.int32() else pa.LargeListArray
    return pa.table({
        "input_ids": cls.from_arrays(offs, as_arrow(seqs.tokens)),
        "segment_ids": cls.from_arrays(offs, as_arrow(seqs.segments)),
        "labels": cls.from_arrays(offs, as_arrow(labels)),
        "next_sentence_label": as_arrow(seqs.next_sentence_labels.astype(np.int8)),
    })


def _open_ipc(shard: Shard):
    # read into heap buffers batch by batch (not memory-mapped: mapped pages would stay
    # resident in the worker until the whole file is done)
    import pyarrow as pa

    source = pa.OSFile(shard.path, "r")
    if shard.kind == "arrow-file":
        return pa.ipc.open_file(source)
    return pa.ipc.open_stream(source)


_BATCH_BYTES = 8 << 20  # about this many bytes of a shard in memory at a time


def _parquet_batch_rows(f, batch_rows, columns=None):
    """Rows per batch so that a batch of ``columns`` (all: None) holds about ``_BATCH_BYTES``
    (one row at least: a row of images can be larger than that alone)."""
    md = f.metadata
    rows = sum(md.row_group(i).num_rows for i in range(md.num_row_groups))
    wanted = None if columns is None else set(columns)
    size = 0
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        if wanted is None:
            size += rg.total_byte_size
        else:
            size += sum(rg.column(j).total_uncompressed_size for j in range(rg.num_columns)
                        if rg.column(j).path_in_schema.split(".")[0] in wanted)
    if rows and size:
        return max(1, min(batch_rows, int(_BATCH_BYTES * rows / size)))
    return batch_rows


def read_schema(shard: Shard):
    """The Arrow schema of a shard.

    Parameters
    ----------
    shard : Shard
        From :func:`expand_inputs`.
    """
    try:
        if shard.kind == "parquet":
            import pyarrow.parquet as pq

            return pq.read_schema(shard.path)
        if shard.kind in ("arrow-stream", "arrow-file"):
            return _open_ipc(shard).schema
        return _bert_table(shard).schema
    except Exception as exc:  # noqa: BLE001 - every read failure becomes one clear line
        raise _wrap(shard, exc) from None


def iter_batches(shard: Shard, columns, batch_rows: int = 65536):
    """Record batches (pyarrow) of the given columns of a shard, in row order.

    Parameters
    ----------
    shard : Shard
        From :func:`expand_inputs`.
    columns : sequence of str
    batch_rows : int, default 65536
        Rows per batch (at most; Parquet batches also stay within a byte budget).
    """
    try:
        if shard.kind == "parquet":
            import pyarrow.parquet as pq

            with pq.ParquetFile(shard.path, pre_buffer=False) as f:
                rows = _parquet_batch_rows(f, batch_rows, columns)
                yield from f.iter_batches(batch_size=rows, columns=list(columns), use_threads=False)
        elif shard.kind in ("arrow-stream", "arrow-file"):
            reader = _open_ipc(shard)
            if shard.kind == "arrow-file":
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
            else:
                batches = iter(reader)
            for b in batches:
                b = b.select(list(columns))
                yield b
        else:
            t = _bert_table(shard).select(list(columns))
            for b in t.to_batches(max_chunksize=batch_rows):
                yield b
    except InputError:
        raise
    except GeneratorExit:
        raise
    except Exception as exc:  # noqa: BLE001
        raise _wrap(shard, exc) from None
