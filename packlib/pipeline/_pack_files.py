""":func:`pack_files`: its passes, one method each, read top to bottom in :meth:`_FilesRun.run`."""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import replace

import numpy as np

from .._deprecation import deprecated_call
from ._errors import InputError, VerifyError
from ._result import METADATA_NAME, PackResult, _metadata
from ._signals import stop_point
from ._staging import StagedRun, check_output, staging_dir

__all__ = ["pack_files"]

ENGINES = ("local", "ray")
OVERFLOWS = ("error", "truncate", "split")
_FILE_TARGET_BYTES = 32 << 20  # default output file: about 32 MiB of tokens
_CACHE_INPUTS = True  # pass 1 copies Parquet shards into Arrow IPC files for pass 2


def _output_second(args, kwargs):
    """``pack_files(inputs, output, max_sequence_length)``, the 0.2 spelling."""
    if "output" in kwargs or len(args) < 2 or not isinstance(args[1], (str, os.PathLike)):
        return None
    if len(args) > 3:
        raise TypeError(f"pack_files() takes at most 3 positional arguments in the 0.2 spelling, got {len(args)}")
    kwargs = {**kwargs, "output": args[1]}
    if len(args) == 2 and "max_sequences_per_pack" in kwargs:  # the capacity in the depth's place
        kwargs["max_sequence_length"] = kwargs.pop("max_sequences_per_pack")
    return ((args[0], *args[2:]), kwargs, "pack_files(inputs, output, max_sequence_length), the 0.2 spelling,",
            "write pack_files(inputs, max_sequence_length, output=...)")


@deprecated_call(_output_second)
def pack_files(inputs, max_sequence_length=None, max_sequences_per_pack=None, *, output, seq_length=None,
               columns=None, carry=None, method: str = "bfd", overflow: str = "error", position_ids: bool = True,
               fold_masks: bool = True, engine: str = "local",
               workers: int | None = None, ray_address: str | None = None, rows_per_file: int | None = None,
               seed: int = 0, progress: bool | None = None, verify: bool = True) -> PackResult:
    """Pack Parquet / Arrow / MLPerf TFRecord files into packed Parquet files, out of core.

    Parameters
    ----------
    inputs : str, os.PathLike or list of them
        Files, directories (Parquet files inside, or a ``save_to_disk`` directory) and globs.
    max_sequence_length : int
        Pack capacity in tokens.
    max_sequences_per_pack : int or None, default None
        Depth limit; ``None`` for unlimited.
    output : str or os.PathLike
        Output directory (keyword-only: the data comes first, then the capacity; see
        ``docs/design.md``); must not exist or be empty. Gets ``part-NNNNN-of-NNNNN.parquet``
        and ``_packing_metadata.json``, all at once when the run succeeds.
    seq_length : int, optional
        TRL's name for the capacity, accepted as a keyword alias of ``max_sequence_length``.
    columns : list of str, optional
        The list columns to pack together (default: every list column; the other columns
        are left out and listed in ``left_out_columns``).
    carry : list of str, optional
        Columns carried whole with their rows, not packed token by token (``pixel_values``
        and ``image_grid_thw`` of processed vision-language data, encoded images): each
        packed row holds its rows' values end to end, in its rows' order, as
        :func:`packlib.formats.arrow.pack_table` carries them; read and written a part at a
        time like the tokens, and checked pack by pack by ``verify``. Output files are
        sized on tokens and carried bytes together. Needs ``overflow="error"``.
    method : str, default "bfd"
        A name from :func:`packlib.methods.names`.
    overflow : {"error", "truncate", "split"}, default "error"
        What to do with a row longer than the capacity: stop with an error naming the file
        and row, keep its first tokens, or cut it into pieces of the capacity (no token lost).
    position_ids : bool, default True
        Add ``position_ids``: 0, 1, ... restarting at every packed sequence. On by default
        (as in :func:`packlib.formats.arrow.pack_dataset`) because the output is read by
        ``transformers.Trainer``, whose default ``remove_unused_columns=True`` drops
        ``seq_lengths``: ``position_ids`` are then what tell
        :class:`packlib.torch.PackedCollator` where a row's sequences start. A packed column
        named ``position_ids`` is refused unless this is False.
    fold_masks : bool, default True
        Where ``completion_mask`` or ``assistant_masks`` is packed, also write ``labels``:
        -100 wherever one of them is 0, else the given ``labels`` (``input_ids`` when there
        are none). On by default because the Trainer drops the masks themselves.
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
        Bad input: a missing column, an unreadable file, a null token, an over-long row with
        ``overflow="error"``.
    WorkerDied, VerifyError (PipelineError)
        A worker died; the output failed the exactly-once check. Nothing is written either way.
    Interrupted (a KeyboardInterrupt)
        SIGINT, SIGTERM or SIGHUP stopped the run; nothing is written, no worker is left
        running, and the caller's signal handlers are as they were.
    """
    return _FilesRun(inputs, output, max_sequence_length, max_sequences_per_pack, seq_length=seq_length,
                     columns=columns, carry=carry, method=method, overflow=overflow, position_ids=position_ids,
                     fold_masks=fold_masks, engine=engine, workers=workers,
                     ray_address=ray_address, rows_per_file=rows_per_file, seed=seed, progress=progress,
                     verify=verify).run()


class _FilesRun:
    """One run of :func:`pack_files`: options checked once in ``__init__``, then the passes."""

    def __init__(self, inputs, output, max_sequence_length, max_sequences_per_pack, *, seq_length, columns, carry, method,
                 overflow, position_ids, fold_masks, engine, workers, ray_address, rows_per_file, seed, progress,
                 verify):
        from .. import methods
        from ..formats.arrow._carry import carry_names, refuse_cut
        from .._validate import as_bool, as_capacity, as_choice, as_depth, as_positive_int, as_seed

        self.t_start = time.perf_counter()
        self.L = as_capacity(max_sequence_length, seq_length)
        self.depth = as_depth(max_sequences_per_pack)
        self.method = methods.get(method)
        self.overflow = as_choice(overflow, "overflow", OVERFLOWS)
        self.position_ids = as_bool(position_ids, "position_ids")
        self.fold_masks = as_bool(fold_masks, "fold_masks")
        self.engine_name = as_choice(engine, "engine", ENGINES)
        self.workers = None if workers is None else as_positive_int(workers, "workers")
        self.rows_per_file = None if rows_per_file is None else as_positive_int(rows_per_file, "rows_per_file")
        self.seed = as_seed(seed)
        self.verify_output = as_bool(verify, "verify")
        self.progress = None if progress is None else as_bool(progress, "progress")
        if ray_address is not None and not isinstance(ray_address, str):
            raise TypeError(f"ray_address must be a str such as 'auto', got {type(ray_address).__name__}")
        self.ray_address = ray_address
        self.columns = _as_columns(columns)
        self.carry = tuple(carry_names(carry))
        refuse_cut(self.carry, self.overflow)
        self.out = check_output(output)
        self.inputs = inputs
        self.seconds, self.peaks = {}, {}

    # -- the run, top to bottom -----------------------------------------------------------
    def run(self) -> PackResult:
        self.read_schema()
        with StagedRun(staging_dir(self.out), self.engine_name, self.workers, self.ray_address) as staged:
            self.eng, self.work = staged.engine, staged.work
            warm = threading.Thread(target=_warm_packer, args=(self.method.name,), daemon=True)
            warm.start()  # load the packer's compiled kernels while the workers read lengths
            try:
                self.timed("lengths", self.read_lengths)
            finally:
                warm.join()  # never leave a thread inside the compiler behind (an interrupted run exits next)
            self.timed("plan", self.plan)
            self.timed("spill", self.spill)
            self.timed("assemble", self.assemble)
            if self.verify_output:
                self.timed("verify", self.verify)
            self.write_metadata()
            staged.publish(self.out)
        return self.result()

    def timed(self, name: str, step) -> None:
        """Run a step between two safe points (a stop signal that came is acted on there)."""
        stop_point(f"{name}:start")
        t0 = time.perf_counter()
        step()
        self.seconds[name] = time.perf_counter() - t0
        stop_point(f"{name}:end")

    def note(self, results, k=-1) -> None:
        """Keep each worker's peak memory (the last field of every task's result)."""
        for r in results:
            pid, rss = r[k]
            self.peaks[pid] = max(self.peaks.get(pid, 0), rss)

    # -- inputs and schema ------------------------------------------------------------------
    def read_schema(self) -> None:
        from ..formats import arrow as A
        from ..formats.arrow._carry import carried_columns
        from ..formats.arrow._columns import refuse_packed_position_ids
        from ..formats.arrow._labels import folded_masks
        from ._tasks import type_key
        from .readers import expand_inputs, read_schema

        self.shards = expand_inputs(self.inputs)
        schema = read_schema(self.shards[0])
        columns = self.columns
        if columns is None:  # every list column; the others are left out (and the summary says so)
            columns = [f.name for f in schema if _is_list_type(f.type) and f.name not in self.carry] or None
        try:
            self.cols = list(A.select_list_columns(schema, columns))
            carried_columns(schema, self.carry, self.cols)
            refuse_packed_position_ids(self.cols, self.position_ids)
        except (ValueError, TypeError) as exc:
            raise InputError(f"{self.shards[0].path}: {exc}") from None
        self.folded = tuple(folded_masks(self.cols)) if self.fold_masks else ()
        self.left_out = tuple(n for n in schema.names if n not in self.cols and n not in self.carry)
        self.types = tuple(type_key(schema.field(c).type) for c in self.cols)
        self.carry_types = tuple(type_key(schema.field(c).type) for c in self.carry)
        self.token_bytes = _token_bytes(schema, self.cols)

    # -- pass 1: lengths --------------------------------------------------------------------
    def read_lengths(self) -> None:
        from ._tasks import Job, lengths_task

        self.job = Job(tuple(self.shards), tuple(self.cols), self.types, self.L, self.overflow, self.work, 0,
                       cache_inputs=_CACHE_INPUTS, position_ids=self.position_ids, folded_masks=self.folded,
                       carry=self.carry, carry_types=self.carry_types)
        res = self.eng.map(lengths_task, [(self.job, i) for i in range(len(self.shards))], "pass 1: lengths",
                           self.progress, unit="file")
        self.note(res)
        self.row_counts = np.array([r[0].size for r in res], dtype=np.int64)
        self.null_rows = int(sum(r[1] for r in res))
        self.carried_bytes = int(sum(r[2] for r in res))
        self.lengths = np.concatenate([r[0] for r in res]).astype(np.int64)

    # -- plan -------------------------------------------------------------------------------
    def plan(self) -> None:
        from .. import methods
        from ..formats import arrow as A

        L = self.L
        segs = A.make_segments(self.lengths, L, overflow="truncate" if self.overflow == "error" else self.overflow)
        self.segs = segs
        self.seg_row, self.seg_start, self.seg_len = segs.row, segs.start, segs.length
        if self.seg_len.size == 0:
            raise InputError(f"the {len(self.shards)} input files hold no non-empty rows in column "
                             f"{self.cols[0]!r}; nothing to pack")
        # the segments are int64 in [1, L] by construction: packed without a second check
        self.packs = methods._pack(self.seg_len, L, self.depth, self.method, self.seed)
        self.shuffled = self.packs.shuffled(self.seed)
        P = self.shuffled.num_packs
        # a pack's bytes: its tokens, and the carried bytes of as many tokens on average (the
        # same figure however the rows are split into files, so the output is too)
        pack_bytes = L * self.token_bytes + -(-self.carried_bytes * L // max(1, int(self.seg_len.sum())))
        R = self.rows_per_file or max(1, _FILE_TARGET_BYTES // pack_bytes)
        self.R, self.F = R, -(-P // R)
        self.job = replace(self.job, num_files=self.F, row_group_rows=max(1, min(R, (16 << 20) // pack_bytes)))

    # -- pass 2a: spill ---------------------------------------------------------------------
    def spill(self) -> None:
        from ._tasks import spill_task

        N, P, S = self.seg_len.size, self.shuffled.num_packs, len(self.shards)
        pos_of_seg = np.empty(N, dtype=np.int64)
        pos_of_seg[self.shuffled.indices] = np.arange(N, dtype=np.int64)
        file_of_seg = (np.repeat(np.arange(P, dtype=np.int64), self.shuffled.pack_sizes) // self.R).astype(np.int32)
        file_of_seg = file_of_seg[pos_of_seg]
        row_start = np.concatenate(([0], np.cumsum(self.row_counts)))
        bounds = np.searchsorted(self.seg_row, row_start, side="left")
        tasks = []
        for s in range(S):
            a, b = int(bounds[s]), int(bounds[s + 1])
            tasks.append((self.job, s, int(self.row_counts[s]), self.seg_row[a:b] - row_start[s], self.seg_start[a:b],
                          self.seg_len[a:b], pos_of_seg[a:b], file_of_seg[a:b]))
        res = self.eng.map(spill_task, tasks, "pass 2: exchange", self.progress, unit="file")
        del tasks, pos_of_seg, file_of_seg
        self.note(res)
        self.in_hashes = np.concatenate([r[1] for r in res])
        self.in_carried = tuple(np.concatenate([r[2][k] for r in res]) for k in (0, 1))
        self.sources = _sources_by_file([r[0] for r in res], self.F)
        for s in range(S):
            if os.path.exists(self.job.cache_path(s)):
                os.remove(self.job.cache_path(s))

    # -- pass 2b: assemble ------------------------------------------------------------------
    def assemble(self) -> None:
        from ._tasks import assemble_task

        offs, P, R = self.shuffled.offsets, self.shuffled.num_packs, self.R
        tasks = [(self.job, f, self.sources[f], offs[f * R:min(P, (f + 1) * R) + 1] - offs[f * R], int(offs[f * R]))
                 for f in range(self.F)]
        res = self.eng.map(assemble_task, tasks, "pass 2: writing", self.progress, unit="file")
        self.note(res)
        self.file_stats = [r[0] for r in res]

    # -- verify -----------------------------------------------------------------------------
    def verify(self) -> None:
        from ._tasks import verify_task

        res = self.eng.map(verify_task, [(self.job, f, self.depth) for f in range(self.F)], "verify", self.progress,
                           unit="file")
        self.note(res)
        got = np.sort(np.concatenate([r[0] for r in res]))
        self.in_hashes.sort()
        if got.size != self.in_hashes.size or not np.array_equal(got, self.in_hashes):
            raise VerifyError(f"the packed output does not hold every input sequence exactly once "
                              f"({got.size:,} sequences written, {self.in_hashes.size:,} read); nothing was written")
        if self.carry:
            self.verify_carried([np.concatenate([r[1][k] for r in res]) for k in (0, 1)])

    def verify_carried(self, got) -> None:
        """Every pack holds its sequences' carried values, in their order (hashes and counts
        predicted from the input side against those read back, pack by pack)."""
        from ._carried import pack_hashes

        order, offs = self.shuffled.indices, self.shuffled.offsets
        for j, c in enumerate(self.carry):
            want = pack_hashes(self.in_carried[0][:, j], self.in_carried[1][:, j], order, offs)
            bad = np.flatnonzero((want[0] != got[0][:, j]) | (want[1] != got[1][:, j]))
            if bad.size:
                p = int(bad[0])
                raise VerifyError(f"{self.job.part_name(p // self.R)}: packed row {p % self.R}: its {c!r} does not hold "
                                  f"its sequences' {c!r} in their order ({bad.size:,} packed rows differ); nothing "
                                  "was written")

    # -- commit -----------------------------------------------------------------------------
    def write_metadata(self) -> None:
        import shutil

        shutil.rmtree(os.path.join(self.work, "_spill"))
        self.names = [self.job.part_name(f) for f in range(self.F)]
        meta = _metadata(self.shards, self.row_counts, self.cols, self.left_out, self.L, self.depth, self.method.name,
                         self.overflow, self.seed, self.R, self.packs, self.segs, self.names, self.file_stats,
                         self.null_rows, self.position_ids, self.folded, self.carry)
        with open(os.path.join(self.work, METADATA_NAME), "w", encoding="utf-8") as fh:
            json.dump(meta, fh, indent=1)
            fh.write("\n")

    def result(self) -> PackResult:
        from ._tasks import _peak

        pid, rss = _peak()
        self.peaks[pid] = max(self.peaks.get(pid, 0), rss)
        self.seconds["total"] = time.perf_counter() - self.t_start
        segs = self.segs
        return PackResult(
            output=self.out, files=tuple(os.path.join(self.out, n) for n in self.names),
            num_rows=int(self.lengths.size), num_sequences=int(self.seg_len.size), num_packs=self.shuffled.num_packs,
            num_tokens=int(self.seg_len.sum()), max_sequence_length=self.L, max_sequences_per_pack=self.depth,
            method=self.method.name, dropped_rows=int(segs.dropped_rows), truncated_tokens=int(segs.truncated_tokens),
            columns=tuple(self.cols), left_out_columns=self.left_out, engine=self.engine_name,
            workers=self.eng.workers, seconds=self.seconds,
            peak_memory=int(sum(self.peaks.values())), peak_memory_by_process=self.peaks,
            verified=self.verify_output, packs=self.packs, null_rows=self.null_rows, position_ids=self.position_ids,
            folded_masks=self.folded, carried_columns=self.carry)


def _as_columns(columns):
    if columns is None:
        return None
    if isinstance(columns, str):
        columns = [columns]
    columns = list(columns)
    if not columns or not all(isinstance(c, str) for c in columns):
        raise TypeError("columns must be a non-empty list of column names (str)")
    return columns


def _is_list_type(t) -> bool:
    import pyarrow as pa

    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _token_bytes(schema, columns) -> int:
    total = 0
    for c in columns:
        t = schema.field(c).type.value_type
        try:
            total += max(1, t.bit_width // 8)
        except ValueError:
            total += 8
    return total


def _sources_by_file(files_of_batches, F: int) -> list:
    """For each output file, the ``(shard, batch indices)`` of the spilled batches bound for it."""
    sources = [[] for _ in range(F)]
    for s, fob in enumerate(files_of_batches):
        if fob.size:
            order = np.argsort(fob, kind="stable")
            fs = fob[order]
            cuts = np.concatenate(([0], np.flatnonzero(np.diff(fs)) + 1, [fs.size]))
            for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
                sources[int(fs[a])].append((s, order[a:b]))
    return sources


def _warm_packer(method: str) -> None:
    from .. import methods

    try:
        methods.pack(np.array([1, 1]), 2, method=method)
    except Exception:  # noqa: BLE001 - only a warm-up; the real call reports errors
        pass
