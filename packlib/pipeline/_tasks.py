"""The work the engines run: plain module-level functions of picklable arguments, so the
local process pool and Ray run exactly the same code.

Pass 1 (:func:`lengths_task`): one shard -> its row lengths. Pass 2a (:func:`spill_task`):
one shard -> its segments, each written to the bucket of the output file its pack lands
in (one Arrow IPC spill file per shard, batches tagged with their output file). Pass 2b
(:func:`assemble_task`): one output file <- its batches of every spill file, sorted by
output position and gathered into packs (``position_ids`` and folded ``labels`` added
when asked). Verify (:func:`verify_task`): one output file ->
content hashes of its segments. Every file is written under a temporary name and renamed
when complete, so a retried task never leaves half a file behind.
"""
from __future__ import annotations

import os
import resource
import select
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

from ._errors import InputError, PipelineError
from ._signals import check as stop_check  # a safe point when a task runs in the driver (one worker)
from ..formats.arrow._gather import _gather
from ..formats.arrow._labels import LABELS, fold_masks
from ..formats.arrow._numpy import as_arrow, as_numpy
from .readers import Shard, iter_batches, read_schema

POS = "__packlib_position"
PARQUET_OPTIONS = dict(compression="snappy", use_dictionary=False, write_statistics=False)


@dataclass(frozen=True)
class Job:
    """Everything a task needs to know, small and picklable."""

    shards: tuple
    columns: tuple
    column_types: tuple  # str(pyarrow type) per column
    max_sequence_length: int
    overflow: str  # "truncate", "split" or "error"
    workdir: str  # the temporary output directory
    num_files: int
    row_group_rows: int = 1024  # packs per Parquet row group of the output
    cache_inputs: bool = True  # pass 1 copies Parquet / TFRecord shards to Arrow IPC for pass 2
    position_ids: bool = False  # the output gets position_ids (0, 1, ... restarting at every sequence)
    folded_masks: tuple = ()  # the masks folded into the output's labels (-100 where one is 0)
    carry: tuple = ()  # columns carried whole with their rows (overflow "error": a segment is a row)
    carry_types: tuple = ()  # str(pyarrow type) per carried column

    @property
    def read_columns(self) -> list:
        """The columns every pass reads from an input: the packed ones, then the carried ones."""
        return list(self.columns) + list(self.carry)

    @property
    def hashed_columns(self) -> tuple:
        """The columns the exactly-once check hashes: the packed ones, and ``labels`` when
        folding adds it (``labels`` hashed as folded, on the input side as on the output side)."""
        if self.folded_masks and LABELS not in self.columns:
            return self.columns + (LABELS,)
        return self.columns

    def folded(self, table):
        """``table`` with the masks folded into ``labels``, as the output holds them."""
        return fold_masks(table, self.columns)[0] if self.folded_masks else table

    def cached(self, shard: Shard) -> bool:
        return self.cache_inputs and shard.kind in ("parquet", "tfrecord") or shard.kind == "tfrecord"

    def spill_path(self, shard: int) -> str:
        return os.path.join(self.workdir, "_spill", f"shard-{shard:05d}.arrow")

    def cache_path(self, shard: int) -> str:
        return os.path.join(self.workdir, "_spill", f"input-{shard:05d}.arrow")

    def part_name(self, f: int) -> str:
        return f"part-{f:05d}-of-{self.num_files:05d}.parquet"

    def part_path(self, f: int) -> str:
        return os.path.join(self.workdir, self.part_name(f))


def _peak() -> tuple[int, int]:
    """``(pid, peak resident bytes)`` of this process."""
    return os.getpid(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


_IN_WORKER = {"on": False}


def worker_init(driver_pid: int | None = None) -> None:
    """Set up a worker process (once): with ``driver_pid``, a watchdog that ends the worker
    within a second of the driver's death, however it died (SIGKILL, the OOM killer), so no
    worker outlives its run. (pyarrow's default allocator stays: the system allocator with
    memory returned at once cost 1.4-1.8x the CPU time for the same peak memory.)"""
    _IN_WORKER["on"] = True
    if driver_pid is not None:
        threading.Thread(target=_exit_with, args=(driver_pid,), name="packlib-watchdog", daemon=True).start()


def _exit_with(pid: int) -> None:
    """Wait for process ``pid`` to end, then end this process (no cleanup: the driver's
    staging, which this worker wrote into, is removed by the next run)."""
    try:
        fd = os.pidfd_open(pid)  # Linux: readable when the process ends, no polling
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        select.select([fd], [], [])
    else:
        while True:
            time.sleep(0.5)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            except PermissionError:
                continue
    os._exit(70)


def pause_point(step: str) -> None:
    """Test hook: with ``PACKLIB_TEST_PAUSE=<step>`` in the environment, a task of that step
    says so (on stderr, and by creating the file ``PACKLIB_TEST_PAUSE_FILE`` if set: Ray
    workers' stderr does not reach the driver) and sleeps, so a test can stop the run there."""
    if os.environ.get("PACKLIB_TEST_PAUSE") == step:
        sys.stderr.write(f"packlib-test: paused in {step}\n")
        sys.stderr.flush()
        marker = os.environ.get("PACKLIB_TEST_PAUSE_FILE")
        if marker:
            with open(marker, "a") as fh:
                fh.write(f"{os.getpid()}\n")
        deadline = time.monotonic() + float(os.environ.get("PACKLIB_TEST_PAUSE_SECONDS", "60"))
        while time.monotonic() < deadline:
            stop_check()  # in the driver (one worker) a stop ends the pause; in a worker the driver kills it
            time.sleep(0.01)


def run_in_worker(fn, *args):
    """Run a task in a dedicated worker process (Ray), setting the process up once."""
    if not _IN_WORKER["on"]:
        worker_init()
    return fn(*args)


# --------------------------------------------------------------------------------------
# pass 1
# --------------------------------------------------------------------------------------
def type_key(t) -> str:
    """A list column's type, ignoring the name of its item field (Parquet says ``element``)."""
    import pyarrow as pa

    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"{'large_list' if pa.types.is_large_list(t) else 'list'}<{t.value_type}>"
    return str(t)


def check_schema(job: Job, shard: Shard, schema) -> None:
    for c, t in zip(job.columns + job.carry, job.column_types + job.carry_types):
        if c not in schema.names:
            raise InputError(f"{shard.path}: no column {c!r} (it has {', '.join(schema.names)}); "
                             f"pass {'--carry' if c in job.carry else '--columns'} naming columns every input has")
        if type_key(schema.field(c).type) != t:
            raise InputError(f"{shard.path}: column {c!r} is {type_key(schema.field(c).type)}, but {t} in the first input; "
                             "give inputs with one schema")


class _StagedIpcFile:
    """An Arrow IPC file written under a temporary name and moved to ``path`` by
    :meth:`commit`; if the block fails first, the temporary file is removed and ``path``
    is never touched (so a retried or failed task leaves no half-written file)."""

    def __init__(self, path: str):
        self.path, self.tmp, self.writer = path, f"{path}.tmp{os.getpid()}", None

    def write(self, batch) -> None:
        if self.writer is None:
            import pyarrow as pa

            self.writer = pa.ipc.new_file(self.tmp, batch.schema)
        self.writer.write_batch(batch)

    def commit(self, schema=None) -> None:
        """Publish what was written; with nothing written, an empty file of ``schema``
        (or no file at all when ``schema`` is None)."""
        if self.writer is None:
            if schema is None:
                return
            import pyarrow as pa

            self.writer = pa.ipc.new_file(self.tmp, schema)
        self.writer.close()
        self.writer = None
        os.replace(self.tmp, self.path)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        if self.writer is not None:
            self.writer.close()
        if os.path.exists(self.tmp):
            os.remove(self.tmp)
        return False


def lengths_task(job: Job, i: int):
    """Pass 1: the row lengths of shard ``i`` (int32), checked against the capacity.

    Parquet and TFRecord shards are also copied (selected columns only) into an
    uncompressed Arrow IPC file, which pass 2 reads far faster than decoding them again."""
    pause_point("lengths")
    import pyarrow as pa

    from ..formats import arrow as A

    from ._carried import carried_bytes

    shard = job.shards[i]
    check_schema(job, shard, read_schema(shard))
    cols = list(job.columns)
    cache = job.cached(shard)
    parts, r0, nulls, carried = [np.zeros(0, dtype=np.int64)], 0, 0, 0
    with _StagedIpcFile(job.cache_path(i)) as copy:
        for batch in iter_batches(shard, job.read_columns):
            stop_check()
            try:
                parts.append(np.asarray(A.row_lengths(batch, cols, first_row=r0), dtype=np.int64))
            except (ValueError, TypeError) as exc:
                raise InputError(f"{shard.path}: {exc}") from None
            nulls += A.null_rows(batch, cols[0])
            carried += sum(carried_bytes(batch.column(c)) for c in job.carry)
            r0 += batch.num_rows
            if cache:
                copy.write(batch)
        if cache:
            copy.commit(pa.schema([read_schema(shard).field(c) for c in job.read_columns]))
    lengths = np.concatenate(parts)
    L = job.max_sequence_length
    if job.overflow == "error" and lengths.size and lengths.max() > L:
        r = int(np.flatnonzero(lengths > L)[0])
        raise InputError(f"{shard.path}: row {r} has {int(lengths[r])} tokens, more than the capacity {L}; "
                         "pass --overflow truncate (keep the first tokens) or --overflow split "
                         "(cut it into pieces), or raise --max-sequence-length")
    if lengths.size and lengths.max() >= 2**31:
        raise InputError(f"{shard.path}: a row has 2**31 tokens or more")
    return lengths.astype(np.int32), nulls, carried, _peak()


# --------------------------------------------------------------------------------------
# pass 2a: spill
# --------------------------------------------------------------------------------------
def spill_task(job: Job, i: int, num_rows: int, seg_row, seg_start, seg_len, seg_pos, seg_file):
    """Pass 2a: write shard ``i``'s segments to its spill file, grouped by output file.

    Returns ``(file_of_batch, hashes, carried, peak)``: the output file of each spilled
    batch, the content hash of each of the shard's segments (input side of the exactly-once
    check), and ``(hashes, counts)`` of each segment's carried values (one column per
    carried column; see :mod:`packlib.pipeline._carried`).
    """
    pause_point("spill")
    import pyarrow as pa

    from ._carried import run_hashes
    from ._hash import hash_into, list_values, single_chunk

    shard = job.shards[i]
    cols = list(job.columns)
    nseg = seg_row.size
    hashes = np.zeros(nseg, dtype=np.uint64)
    carried = (np.zeros((nseg, len(job.carry)), np.uint64), np.zeros((nseg, len(job.carry)), np.int64))
    file_of_batch = []

    r0 = k = 0
    with _StagedIpcFile(job.spill_path(i)) as spill:
        source = Shard(job.cache_path(i), "arrow-file") if job.cached(shard) else shard
        for batch in iter_batches(source, job.read_columns):
            stop_check()
            r1 = r0 + batch.num_rows
            k2 = int(np.searchsorted(seg_row, r1, side="left"))
            table = pa.Table.from_batches([batch])
            rows = seg_row[k:k2] - r0
            st, ln = seg_start[k:k2], seg_len[k:k2]
            h = hashes[k:k2]
            hashed = job.folded(table)
            for c in job.hashed_columns:
                offs, values = list_values(single_chunk(hashed.column(c)))
                a = offs[rows].astype(np.int64) + st
                if rows.size and (a + ln > offs[rows + 1]).any():
                    raise InputError(f"{shard.path}: the file changed while it was being packed; run again")
                hash_into(h, a, a + ln, values)
            for j, c in enumerate(job.carry):  # overflow "error": each segment is its row, whole
                ch, cn = run_hashes(table.column(c))
                carried[0][k:k2, j], carried[1][k:k2, j] = ch[rows], cn[rows]
            if rows.size:
                f = seg_file[k:k2]
                order = np.argsort(f, kind="stable")
                fs = f[order]
                # the segments were checked above against this batch: gathered without a second check
                g = _gather(table, cols, np.ascontiguousarray(rows[order], dtype=np.int64),
                            np.ascontiguousarray(st[order], dtype=np.int64), np.ascontiguousarray(ln[order], dtype=np.int64),
                            np.arange(rows.size + 1, dtype=np.int64), False)
                g = g.select(cols)
                for c in job.carry:
                    g = g.append_column(c, table.column(c).take(as_arrow(rows[order].astype(np.int64))))
                g = g.append_column(POS, as_arrow(seg_pos[k:k2][order]))
                cuts = np.flatnonzero(np.diff(fs)) + 1
                bounds = np.concatenate(([0], cuts, [fs.size]))
                batches = g.to_batches()
                (b,) = batches if len(batches) == 1 else g.combine_chunks().to_batches()
                for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
                    spill.write(b.slice(lo, hi - lo))  # one batch per output file
                    file_of_batch.append(int(fs[lo]))
                del g
            k, r0 = k2, r1
        if r0 != num_rows or k != nseg:
            raise InputError(f"{shard.path}: has {r0} rows now but {num_rows} in pass 1; "
                             "the file changed while it was being packed; run again")
        spill.commit()
    return np.asarray(file_of_batch, dtype=np.int32), hashes, carried, _peak()


# --------------------------------------------------------------------------------------
# pass 2b: assemble
# --------------------------------------------------------------------------------------
def assemble_task(job: Job, f: int, sources, pack_offsets, first_pos: int):
    """Pass 2b: build output file ``f`` from its spilled batches (``sources``: pairs
    ``(shard, batch numbers)``); ``pack_offsets`` are its packs' segment offsets and
    ``first_pos`` the output position of its first segment."""
    pause_point("assemble")
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = list(job.columns)
    batches, schema = [], None
    for s, ids in sources:
        stop_check()
        reader = pa.ipc.open_file(pa.OSFile(job.spill_path(s), "r"))
        schema = reader.schema
        batches.extend(reader.get_batch(int(b)) for b in ids)
    n = int(pack_offsets[-1])
    if schema is None:
        raise PipelineError(f"internal error: no spilled data for output file {f}")
    table = pa.Table.from_batches(batches, schema)
    del batches  # the table holds the spilled buffers
    pos = as_numpy(table.column(POS))
    order = np.argsort(pos, kind="stable")
    if pos.size != n or not np.array_equal(pos[order], np.arange(first_pos, first_pos + n)):
        raise PipelineError(f"internal error: output file {f} received {pos.size} segments, expected {n}; nothing was written")
    table = table.drop_columns([POS])
    import pyarrow.compute as pc

    ln = as_numpy(pc.list_value_length(table.column(cols[0])))[order].astype(np.int64)
    # whole spilled segments, in the order the plan checked: gathered without a second check
    out = _gather(table, cols, order.astype(np.int64), np.zeros(n, dtype=np.int64), ln,
                  np.ascontiguousarray(pack_offsets, dtype=np.int64), job.position_ids)
    carried = {}
    for c in job.carry:  # one chunk each (a take from a chunked column would join its chunks every time);
        carried[c] = table.column(c).combine_chunks()  # the spilled chunks are freed as each is dropped
        table = table.drop_columns([c])
    del table
    if not job.carry:
        out = job.folded(out)
        if any(col.num_chunks > 1 for col in out.columns):
            out = out.combine_chunks()
    path = job.part_path(f)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        if job.carry:  # a row group at a time: the carried values are copied into packs one group at a time
            from ._carried import write_with_carried

            write_with_carried(tmp, out, carried, order.astype(np.int64), np.asarray(pack_offsets, dtype=np.int64),
                               job.row_group_rows, job.folded, PARQUET_OPTIONS)
        else:
            pq.write_table(out, tmp, row_group_size=job.row_group_rows, **PARQUET_OPTIONS)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return (out.num_rows, n, int(ln.sum()), os.path.getsize(path)), _peak()


# --------------------------------------------------------------------------------------
# verify
# --------------------------------------------------------------------------------------
def segment_hashes(table, columns, max_sequence_length=None, max_sequences_per_pack=None, where=""):
    """Content hashes of the segments of a packed table (``seq_lengths`` splits each row),
    checking that ``seq_lengths`` add up to every column's row length and that no row holds
    more than ``max_sequence_length`` tokens or ``max_sequences_per_pack`` segments."""
    from ._hash import hash_packed_into, list_values, single_chunk

    sl_offs, seglen = list_values(single_chunk(table.column("seq_lengths")))
    per_row = np.diff(sl_offs)
    hashes = np.zeros(seglen.size, dtype=np.uint64)
    if max_sequences_per_pack is not None and per_row.size and per_row.max() > max_sequences_per_pack:
        raise ValueError(f"{where}a packed row holds {per_row.max()} sequences > {max_sequences_per_pack}")
    for c in columns:
        offs, values = list_values(single_chunk(table.column(c)))
        if max_sequence_length is not None and offs.size > 1 and np.diff(offs).max() > max_sequence_length:
            raise ValueError(f"{where}a packed row holds {np.diff(offs).max()} tokens > {max_sequence_length}")
        bad = hash_packed_into(hashes, offs, sl_offs, seglen, values)
        if bad >= 0:
            raise ValueError(f"{where}row {bad}: column {c!r} does not split into its seq_lengths")
    return hashes


def verify_task(job: Job, f: int, max_sequences_per_pack):
    """Re-read output file ``f``; returns ``(sorted segment hashes, carried, peak)``, where
    ``carried`` is ``(hashes, counts)`` of each packed row's carried values, in row order."""
    pause_point("verify")
    import pyarrow.parquet as pq

    import pyarrow as pa

    from ._carried import run_hashes

    path = job.part_path(f)
    hashes = [np.zeros(0, dtype=np.uint64)]
    carried = ([np.zeros((0, len(job.carry)), np.uint64)], [np.zeros((0, len(job.carry)), np.int64)])
    with pq.ParquetFile(path, pre_buffer=False) as pf:
        for b in pf.iter_batches(batch_size=job.row_group_rows, use_threads=False,
                                 columns=list(job.hashed_columns) + ["seq_lengths"] + list(job.carry)):
            stop_check()
            hashes.append(segment_hashes(pa.Table.from_batches([b]), job.hashed_columns, job.max_sequence_length,
                                         max_sequences_per_pack, where=f"{path}: "))
            runs = [run_hashes(b.column(c)) for c in job.carry]
            carried[0].append(np.stack([r[0] for r in runs], axis=1) if runs else carried[0][0])
            carried[1].append(np.stack([r[1] for r in runs], axis=1) if runs else carried[1][0])
    h = np.concatenate(hashes)
    h.sort()
    return h, (np.concatenate(carried[0]), np.concatenate(carried[1])), _peak()
