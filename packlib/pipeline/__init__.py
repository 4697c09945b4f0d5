"""Pack datasets larger than memory, on one machine or a Ray cluster.

:func:`pack_files` reads Parquet files, ``datasets`` ``save_to_disk`` directories or
unpacked MLPerf BERT TFRecords and writes packed Parquet files with the columns
:func:`packlib.formats.arrow.pack_table` gives (the selected list columns, packed, plus
``seq_lengths``), in two passes over the input:

1. **lengths**: each shard's row lengths (4 bytes a row) go to the driver, which cuts
   rows into segments (``overflow``), packs all of them with the registry's packer (the
   packs :func:`packlib.methods.pack` gives on the same lengths and seed), shuffles the
   packs from the seed and gives every segment its output file and position;
2. **exchange**: each worker reads its shard again and spills every segment into the
   bucket of its output file; then each output file is assembled from its buckets and
   written as ``part-NNNNN-of-NNNNN.parquet``.

Workers hold one record batch of input, or one output file, at a time, so memory grows
with the batch and output-file size and the worker count, not with the dataset; the driver
holds about 40 bytes per sequence. The output is the same, byte for byte, whatever the
engine and the number of workers; it appears atomically (a failed run leaves nothing in
``output``). A verify pass re-reads the output and checks, by content hash, that every
input sequence appears exactly once.

>>> import os, tempfile
>>> import pyarrow as pa, pyarrow.parquet as pq
>>> from packlib.pipeline import pack_files
>>> d = tempfile.mkdtemp()
>>> pq.write_table(pa.table({"input_ids": [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10]], "text": ["a", "b", "c", "d"]}),
...                os.path.join(d, "a.parquet"))
>>> result = pack_files(os.path.join(d, "*.parquet"), os.path.join(d, "packed"), 5, workers=1)
>>> result.num_packs, result.num_sequences, result.left_out_columns
(2, 4, ('text',))
>>> pq.read_table(result.files[0]).to_pydict()
{'input_ids': [[1, 2, 3, 4, 5], [7, 8, 9, 10, 6]], 'seq_lengths': [[3, 2], [4, 1]]}
>>> sorted(os.listdir(os.path.join(d, "packed")))
['packing_metadata.json', 'part-00000-of-00001.parquet']
"""
from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, field, replace

import numpy as np

from ._errors import InputError, PipelineError, VerifyError, WorkerDied

__all__ = ["pack_files", "PackResult", "PipelineError", "InputError", "WorkerDied", "VerifyError"]

ENGINES = ("local", "ray")
OVERFLOWS = ("truncate", "split", "error")
_FILE_TARGET_BYTES = 32 << 20  # default output file: about 32 MiB of tokens
_CACHE_INPUTS = True  # pass 1 copies Parquet shards into Arrow IPC files for pass 2


@dataclass(frozen=True, eq=False, repr=False)
class PackResult:
    """What :func:`pack_files` wrote, and how the run went.

    Attributes
    ----------
    output : str
        The output directory.
    files : tuple of str
        The part files, in order.
    num_rows, num_sequences, num_packs, num_tokens : int
        Input rows, packed sequences (segments: non-empty rows, or their pieces with
        ``overflow="split"``), packs (output rows) and tokens.
    max_sequence_length : int
    dropped_rows, truncated_tokens : int
        Empty rows left out; tokens cut off by ``overflow="truncate"``.
    columns, left_out_columns : tuple of str
        The packed list columns; the input columns not in the output.
    seconds : dict
        Wall time of each pass (``lengths``, ``plan``, ``spill``, ``assemble``, ``verify``) and ``total``.
    peak_memory : int
        Sum over the driver and every worker process of its peak resident bytes.
    verified : bool
        Whether the exactly-once check ran (it raises when it fails).
    packs : Packs
        The packs over sequence ids (input order), before shuffling into files.
    """

    output: str
    files: tuple
    num_rows: int
    num_sequences: int
    num_packs: int
    num_tokens: int
    max_sequence_length: int
    max_sequences_per_pack: int | None
    method: str
    dropped_rows: int
    truncated_tokens: int
    columns: tuple
    left_out_columns: tuple
    engine: str
    workers: int
    seconds: dict
    peak_memory: int
    peak_memory_by_process: dict = field(default_factory=dict)
    verified: bool = False
    packs: object = None

    @property
    def efficiency(self) -> float:
        """Tokens / (packs x max_sequence_length)."""
        slots = self.num_packs * self.max_sequence_length
        return self.num_tokens / slots if slots else 1.0

    @property
    def lower_bound(self) -> int:
        """``ceil(tokens / max_sequence_length)``: no packing has fewer packs."""
        return -(-self.num_tokens // self.max_sequence_length)

    def summary(self) -> str:
        """A few lines for people: sizes, efficiency, time per pass, peak memory."""
        s = self.seconds
        lines = [
            f"packed {self.num_sequences:,} sequences ({self.num_tokens:,} tokens) from {self.num_rows:,} rows "
            f"into {self.num_packs:,} packs of {self.max_sequence_length:,} ({self.method}"
            f"{'' if self.max_sequences_per_pack is None else f', at most {self.max_sequences_per_pack} per pack'}): "
            f"{100 * self.efficiency:.3f} % efficiency, {self.num_packs - self.lower_bound:,} packs above "
            f"ceil(tokens/L) = {self.lower_bound:,}",
            f"wrote {_count(len(self.files), 'file')} to {self.output} (columns {', '.join(self.columns)} + seq_lengths)",
        ]
        if self.left_out_columns:
            lines.append(f"left out (not list columns, or not selected): {', '.join(self.left_out_columns)}")
        if self.dropped_rows or self.truncated_tokens:
            lines.append(f"dropped {self.dropped_rows:,} empty rows; truncated {self.truncated_tokens:,} tokens")
        if self.verified:
            lines.append("verified: every input sequence appears exactly once in the output")
        lines.append("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in s.items()))
        lines.append(f"peak memory: {self.peak_memory / 2**20:,.0f} MiB (sum of the peak resident memory of "
                     f"{_count(len(self.peak_memory_by_process), 'process').replace('processs', 'processes')}; "
                     f"{self.engine} engine, {_count(self.workers, 'worker')})")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("packs", "peak_memory_by_process")}
        d.update(files=list(self.files), columns=list(self.columns), left_out_columns=list(self.left_out_columns),
                 efficiency=self.efficiency)
        return d

    def __repr__(self) -> str:
        return (f"PackResult({self.num_sequences:,} sequences -> {self.num_packs:,} packs in {_count(len(self.files), 'file')}, "
                f"efficiency={100 * self.efficiency:.3f}%, output={self.output!r})")


def _count(n: int, unit: str) -> str:
    return f"{n:,} {unit}{'' if n == 1 else 's'}"


def _check_output(output) -> str:
    if not isinstance(output, (str, os.PathLike)):
        raise TypeError(f"output must be a directory path (str or os.PathLike), got {type(output).__name__}")
    out = os.path.abspath(os.fspath(output))
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise InputError(f"{out}: already exists{' and is not empty' if os.path.isdir(out) else ''}; "
                         "remove it or choose another output directory")
    parent = os.path.dirname(out)
    if not os.path.isdir(parent):
        raise InputError(f"{parent}: the output's parent directory does not exist; create it first")
    return out


def _token_bytes(schema, columns) -> int:
    total = 0
    for c in columns:
        t = schema.field(c).type.value_type
        try:
            total += max(1, t.bit_width // 8)
        except ValueError:
            total += 8
    return total


def _make_engine(engine, workers, ray_address):
    if engine == "ray":
        from ._ray import RayEngine

        return RayEngine(workers, ray_address)
    from ._local import LocalEngine

    return LocalEngine(workers if workers is not None else (os.cpu_count() or 1))


class _StagedRun:
    """A run's engine and its work directory beside the output: on any failure the engine
    stops first (no worker writes after that), then the work directory goes, so a failed
    run leaves nothing; the engine is closed however the run ends."""

    def __init__(self, work: str, engine, workers, ray_address):
        self.work, self._args, self.engine = work, (engine, workers, ray_address), None

    def __enter__(self):
        os.makedirs(os.path.join(self.work, "_spill"))
        try:
            self.engine = _make_engine(*self._args)
        except BaseException:
            shutil.rmtree(self.work, ignore_errors=True)
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.engine is not None:
            self.engine.close()
            self.engine = None
        if exc_type is not None:
            shutil.rmtree(self.work, ignore_errors=True)
        return False


def pack_files(inputs, output, max_sequence_length=None, max_sequences_per_pack=None, *, seq_length=None,
               columns=None, method: str = "bfd", overflow: str = "truncate", engine: str = "local",
               workers: int | None = None, ray_address: str | None = None, rows_per_file: int | None = None,
               seed: int = 0, progress: bool | None = None, verify: bool = True) -> PackResult:
    """Pack Parquet / Arrow / MLPerf TFRecord files into packed Parquet files, out of core.

    Parameters
    ----------
    inputs : str, os.PathLike or list of them
        Files, directories (Parquet files inside, or a ``save_to_disk`` directory) and globs.
    output : str or os.PathLike
        Output directory; must not exist or be empty. Gets ``part-NNNNN-of-NNNNN.parquet``
        and ``packing_metadata.json``, all at once when the run succeeds.
    max_sequence_length : int
        Pack capacity in tokens.
    max_sequences_per_pack : int or None, default None
        Depth limit; ``None`` for unlimited.
    seq_length : int, optional
        TRL's name for the capacity, accepted as a keyword alias of ``max_sequence_length``.
    columns : list of str, optional
        The list columns to pack together (default: every list column).
    method : str, default "bfd"
        A name from :func:`packlib.methods.names`.
    overflow : {"truncate", "split", "error"}, default "truncate"
        What to do with a row longer than the capacity: keep its first tokens, cut it into
        pieces of the capacity (no token lost), or stop with an error naming the file and row.
    engine : {"local", "ray"}, default "local"
        A process pool on this machine, or Ray tasks (a local Ray, or ``ray_address``'s cluster).
    workers : int, optional
        Worker processes (default: the CPU count, or the Ray cluster's CPUs).
    ray_address : str, optional
        The Ray cluster to join (``ray.init(address=...)``).
    rows_per_file : int, optional
        Packs per output file (default: about 32 MiB of tokens per file).
    seed : int, default 0
        Packs' order across files (and equal-length assignment for histogram methods).
    progress : bool or None
        Progress bars per pass (default: when stderr is a terminal).
    verify : bool, default True
        Re-read the output and check every input sequence appears exactly once.

    Returns
    -------
    PackResult

    Raises
    ------
    InputError (a ValueError)
        Bad input: a missing column, an unreadable file, an over-long row with ``overflow="error"``.
    WorkerDied, VerifyError (PipelineError)
        A worker died; the output failed the exactly-once check. Nothing is written either way.
    """
    from .. import methods
    from .._validate import as_bool, as_capacity, as_choice, as_depth, as_positive_int, as_seed
    from ..formats import arrow as A
    from ._tasks import Job, assemble_task, lengths_task, spill_task, type_key, verify_task
    from .readers import expand_inputs, read_schema

    t_start = time.perf_counter()
    L = as_capacity(max_sequence_length, seq_length)
    depth = as_depth(max_sequences_per_pack)
    m = methods.get(method)
    overflow = as_choice(overflow, "overflow", OVERFLOWS)
    engine = as_choice(engine, "engine", ENGINES)
    if workers is not None:
        workers = as_positive_int(workers, "workers")
    if rows_per_file is not None:
        rows_per_file = as_positive_int(rows_per_file, "rows_per_file")
    seed = as_seed(seed)
    verify = as_bool(verify, "verify")
    progress = None if progress is None else as_bool(progress, "progress")
    if ray_address is not None and not isinstance(ray_address, str):
        raise TypeError(f"ray_address must be a str such as 'auto', got {type(ray_address).__name__}")
    if columns is not None:
        if isinstance(columns, str):
            columns = [columns]
        columns = list(columns)
        if not columns or not all(isinstance(c, str) for c in columns):
            raise TypeError("columns must be a non-empty list of column names (str)")
    out = _check_output(output)
    shards = expand_inputs(inputs)
    schema0 = read_schema(shards[0])
    if columns is None:  # every list column; the others are left out (and the summary says so)
        import pyarrow as pa

        columns = [f.name for f in schema0 if pa.types.is_list(f.type) or pa.types.is_large_list(f.type)] or None
    try:
        cols = list(A.select_list_columns(schema0, columns))
    except (ValueError, TypeError) as exc:
        raise InputError(f"{shards[0].path}: {exc}") from None
    left_out = tuple(n for n in schema0.names if n not in cols)
    types = tuple(type_key(schema0.field(c).type) for c in cols)

    work = os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.tmp-{uuid.uuid4().hex[:12]}")
    seconds, peaks = {}, {}

    def note(results, k=-1):
        for r in results:
            pid, rss = r[k]
            peaks[pid] = max(peaks.get(pid, 0), rss)

    with _StagedRun(work, engine, workers, ray_address) as run:
        eng = run.engine
        n_workers = eng.workers
        # load the packer's compiled kernels while the workers read lengths
        warm = threading.Thread(target=_warm_packer, args=(m.name,), daemon=True)
        warm.start()
        job = Job(tuple(shards), tuple(cols), types, L, overflow, work, 0, cache_inputs=_CACHE_INPUTS)
        S = len(shards)

        # ---- pass 1: lengths -------------------------------------------------------
        t0 = time.perf_counter()
        res = eng.map(lengths_task, [(job, i) for i in range(S)], "pass 1: lengths", progress, unit="file")
        note(res)
        row_counts = np.array([r[0].size for r in res], dtype=np.int64)
        lengths = np.concatenate([r[0] for r in res]).astype(np.int64)
        del res
        seconds["lengths"] = time.perf_counter() - t0

        # ---- plan --------------------------------------------------------------------
        t0 = time.perf_counter()
        warm.join()
        segs = A.make_segments(lengths, L, overflow="truncate" if overflow == "error" else overflow)
        seg_row = np.asarray(segs.row, dtype=np.int64)
        seg_start = np.asarray(segs.start, dtype=np.int64)
        seg_len = np.asarray(segs.length, dtype=np.int64)
        N = seg_len.size
        if N == 0:
            raise InputError(f"the {S} input files hold no non-empty rows in column {cols[0]!r}; nothing to pack")
        packs = methods.pack(seg_len, L, depth, method=m.name, seed=seed)
        shuffled = packs.shuffled(seed)
        P = shuffled.num_packs
        R = rows_per_file or max(1, _FILE_TARGET_BYTES // (L * _token_bytes(schema0, cols)))
        F = -(-P // R)
        job = replace(job, num_files=F, row_group_rows=max(1, min(R, (16 << 20) // (L * _token_bytes(schema0, cols)))))
        pos_of_seg = np.empty(N, dtype=np.int64)
        pos_of_seg[shuffled.indices] = np.arange(N, dtype=np.int64)
        file_of_pos = (np.repeat(np.arange(P, dtype=np.int64), shuffled.pack_sizes) // R).astype(np.int32)
        file_of_seg = file_of_pos[pos_of_seg]
        del file_of_pos
        row_start = np.concatenate(([0], np.cumsum(row_counts)))
        seg_bounds = np.searchsorted(seg_row, row_start, side="left")
        seconds["plan"] = time.perf_counter() - t0

        # ---- pass 2a: spill ----------------------------------------------------------
        t0 = time.perf_counter()
        tasks = []
        for s in range(S):
            a, b = int(seg_bounds[s]), int(seg_bounds[s + 1])
            tasks.append((job, s, int(row_counts[s]), seg_row[a:b] - row_start[s], seg_start[a:b], seg_len[a:b],
                          pos_of_seg[a:b], file_of_seg[a:b]))
        res = eng.map(spill_task, tasks, "pass 2: exchange", progress, unit="file")
        del tasks, pos_of_seg, file_of_seg
        note(res)
        in_hashes = np.concatenate([r[1] for r in res])
        sources = [[] for _ in range(F)]
        for s, (fob, _, _) in enumerate(res):
            if fob.size:
                order = np.argsort(fob, kind="stable")
                fs = fob[order]
                cuts = np.concatenate(([0], np.flatnonzero(np.diff(fs)) + 1, [fs.size]))
                for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
                    sources[int(fs[a])].append((s, order[a:b]))
        del res
        for s in range(S):
            if os.path.exists(job.cache_path(s)):
                os.remove(job.cache_path(s))
        seconds["spill"] = time.perf_counter() - t0

        # ---- pass 2b: assemble -------------------------------------------------------
        t0 = time.perf_counter()
        offs = shuffled.offsets
        tasks = []
        for f in range(F):
            a, b = f * R, min(P, (f + 1) * R)
            tasks.append((job, f, sources[f], offs[a:b + 1] - offs[a], int(offs[a])))
        res = eng.map(assemble_task, tasks, "pass 2: writing", progress, unit="file")
        note(res)
        file_stats = [r[0] for r in res]
        del tasks, res
        seconds["assemble"] = time.perf_counter() - t0

        # ---- verify ------------------------------------------------------------------
        if verify:
            t0 = time.perf_counter()
            res = eng.map(verify_task, [(job, f, depth) for f in range(F)], "verify", progress, unit="file")
            note(res)
            got = np.concatenate([r[0] for r in res])
            in_hashes.sort()
            got.sort()
            if got.size != in_hashes.size or not np.array_equal(got, in_hashes):
                raise VerifyError(f"the packed output does not hold every input sequence exactly once "
                                  f"({got.size:,} sequences written, {in_hashes.size:,} read); nothing was written")
            del res, got
            seconds["verify"] = time.perf_counter() - t0
        del in_hashes

        shutil.rmtree(os.path.join(work, "_spill"))
        names = [job.part_name(f) for f in range(F)]
        meta = _metadata(shards, row_counts, cols, left_out, L, depth, m.name, overflow, seed, R, packs, segs,
                         names, file_stats)
        with open(os.path.join(work, "packing_metadata.json"), "w", encoding="utf-8") as fh:
            json.dump(meta, fh, indent=1)
            fh.write("\n")
        if os.path.isdir(out):
            os.rmdir(out)  # empty (checked above)
        os.replace(work, out)
    pid, rss = _self_peak()
    peaks[pid] = max(peaks.get(pid, 0), rss)
    seconds["total"] = time.perf_counter() - t_start
    return PackResult(
        output=out, files=tuple(os.path.join(out, n) for n in names), num_rows=int(lengths.size),
        num_sequences=N, num_packs=P, num_tokens=int(seg_len.sum()), max_sequence_length=L,
        max_sequences_per_pack=depth, method=m.name, dropped_rows=int(segs.dropped_rows),
        truncated_tokens=int(segs.truncated_tokens), columns=tuple(cols), left_out_columns=left_out,
        engine=engine, workers=n_workers, seconds=seconds, peak_memory=int(sum(peaks.values())),
        peak_memory_by_process=peaks, verified=bool(verify), packs=packs)


def _warm_packer(method: str) -> None:
    from .. import methods

    try:
        methods.pack(np.array([1, 1]), 2, method=method)
    except Exception:  # noqa: BLE001 - only a warm-up; the real call reports errors
        pass


def _self_peak():
    from ._tasks import _peak

    return _peak()


def _metadata(shards, row_counts, cols, left_out, L, depth, method, overflow, seed, R, packs, segs, names, stats):
    tokens = int(packs.num_tokens)
    P = packs.num_packs
    return {
        "format": "packlib packed parquet",
        "columns": list(cols) + ["seq_lengths"],
        "left_out_columns": list(left_out),
        "inputs": [{"path": s.path, "rows": int(n)} for s, n in zip(shards, row_counts)],
        "options": {"max_sequence_length": L, "max_sequences_per_pack": depth, "method": method,
                    "overflow": overflow, "seed": seed, "rows_per_file": R},
        "plan": {
            "rows": int(row_counts.sum()), "sequences": int(packs.num_sequences), "packs": P, "tokens": tokens,
            "efficiency": tokens / (P * L) if P else 1.0, "padding_tokens": P * L - tokens,
            "lower_bound_packs": -(-tokens // L), "dropped_empty_rows": int(segs.dropped_rows),
            "truncated_tokens": int(segs.truncated_tokens),
        },
        "files": [{"name": n, "packs": int(s[0]), "sequences": int(s[1]), "tokens": int(s[2])}
                  for n, s in zip(names, stats)],
    }
