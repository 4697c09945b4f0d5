"""MLPerf BERT packing on the out-of-core pipeline: unpacked TFRecords in, packed TFRecords
(``run_pretraining.py --enable_packed_data_mode``) out, what ``python -m packlib
mlperf-bert`` runs. Needs numpy only (no pyarrow).

Pass 1 decodes each input file once (its lengths go to the driver; its sequences are cached
uncompressed beside the output), the driver plans with a histogram method exactly as the
in-memory tool did (``plan.assign(lengths, seed).shuffled(seed)``, so the output is the
same, byte for byte), pass 2 spills each file's sequences to the buckets of their output
files, and each output file is assembled from its buckets. Workers hold one input file or
one output file at a time; the driver holds about 40 bytes per sequence (about 650 MB for
the 16.3 M sequences of MLPerf's Wikipedia, instead of the ~21 GB of tokens).

>>> import os, tempfile
>>> from packlib.formats import mlperf_bert as mb
>>> d = tempfile.mkdtemp()
>>> mb.write_unpacked(os.path.join(d, "part-00000"), mb.synthetic_sequences(100, seed=0))
100
>>> meta = pack_mlperf_bert([os.path.join(d, "part-00000")], os.path.join(d, "packed"), 3, records_per_file=20)
>>> meta["original_number_of_samples"], meta["new_number_of_samples"], meta["output_files"][0]
(100, 57, 'packed-00000-of-00003.tfrecord')
"""
from __future__ import annotations

import io
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass

import numpy as np

from ._errors import PipelineError, VerifyError

__all__ = ["pack_mlperf_bert"]

_ARRAYS = ("seq_offsets", "tokens", "segments", "mlm_offsets", "mlm_positions", "mlm_ids", "next_sentence_labels")


@dataclass(frozen=True)
class BertJob:
    paths: tuple
    workdir: str
    num_files: int = 0
    names: tuple = ()
    max_sequences_per_pack: int = 3
    compression: str | None = None
    widths: tuple = (512, 76)

    def cache_path(self, i: int) -> str:
        return os.path.join(self.workdir, "_spill", f"input-{i:05d}.npz")

    def spill_path(self, i: int) -> str:
        return os.path.join(self.workdir, "_spill", f"shard-{i:05d}.bin")

    def part_path(self, f: int) -> str:
        return os.path.join(self.workdir, self.names[f])


def _block(seqs, **extra) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **{k: getattr(seqs, k) for k in _ARRAYS}, widths=np.array([seqs.max_sequence_length,
                                                                          seqs.max_predictions]), **extra)
    return buf.getvalue()


def _unblock(data):
    from ..formats.mlperf_bert import BertSequences

    z = np.load(io.BytesIO(data) if isinstance(data, bytes) else data)  # bytes, or a path
    L, P = (int(x) for x in z["widths"])
    return BertSequences(*(z[k] for k in _ARRAYS), L, P), z


# --------------------------------------------------------------------------------------
# tasks
# --------------------------------------------------------------------------------------
def bert_lengths_task(job: BertJob, i: int):
    """Pass 1: decode input file ``i``; its lengths (int32) and list widths ``(L, P)``."""
    from ..formats.mlperf_bert._io import _read_file
    from ._tasks import _peak

    seqs = _read_file(job.paths[i], compression="auto")
    if seqs is None:
        return np.zeros(0, dtype=np.int32), None, _peak()
    path = job.cache_path(i)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as fh:  # straight to the file: no second copy in memory
        np.savez(fh, **{k: getattr(seqs, k) for k in _ARRAYS},
                 widths=np.array([seqs.max_sequence_length, seqs.max_predictions]))
    os.replace(tmp, path)
    return seqs.lengths.astype(np.int32), (seqs.max_sequence_length, seqs.max_predictions), _peak()


def bert_spill_task(job: BertJob, i: int, pos, file_of):
    """Pass 2a: spill input file ``i``'s sequences to the buckets of their output files.
    Returns ``(index, fingerprints, peak)``; ``index`` lists ``(file, offset, size)`` blocks."""
    from ._tasks import _peak

    if pos.size == 0:
        return [], np.zeros(0, dtype=np.uint64), _peak()
    seqs, _ = _unblock(job.cache_path(i))
    if seqs.num_sequences != pos.size:
        raise PipelineError(f"{job.paths[i]}: changed while it was being packed; run again")
    fp = seqs.fingerprints()
    order = np.argsort(file_of, kind="stable")
    fs = file_of[order]
    cuts = np.concatenate(([0], np.flatnonzero(np.diff(fs)) + 1, [fs.size]))
    index, offset = [], 0
    path = job.spill_path(i)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as out:
            for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
                rows = order[a:b]
                data = _block(seqs.take(rows), pos=pos[rows])
                out.write(data)
                index.append((int(fs[a]), offset, len(data)))
                offset += len(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return index, fp, _peak()


def bert_assemble_task(job: BertJob, f: int, sources, pack_offsets, first_pos: int):
    """Pass 2b: write output file ``f`` from its blocks (``sources``: ``(shard, offset, size)``)."""
    from ..formats.mlperf_bert import BertSequences, write_packed
    from ..packing import Packs
    from ._tasks import _peak

    parts, pos = [], []
    for s, offset, size in sources:
        with open(job.spill_path(s), "rb") as fh:
            fh.seek(offset)
            seqs, z = _unblock(fh.read(size))
        parts.append(seqs)
        pos.append(z["pos"])
        del seqs, z
    pos = np.concatenate(pos)
    n = int(pack_offsets[-1])
    order = np.argsort(pos, kind="stable")
    if pos.size != n or not np.array_equal(pos[order], np.arange(first_pos, first_pos + n)):
        raise PipelineError(f"internal error: output file {f} received {pos.size} sequences, expected {n}")
    seqs = BertSequences.concatenate(parts)
    del parts  # at most two copies of the file's sequences at a time
    seqs = seqs.take(order)
    packs = Packs(pack_offsets, np.arange(n), seqs.lengths, seqs.max_sequence_length, job.max_sequences_per_pack)
    return write_packed(job.part_path(f), seqs, packs, 0, packs.num_packs, job.max_sequences_per_pack,
                        compression=job.compression), _peak()


def bert_verify_task(job: BertJob, f: int):
    """Re-read output file ``f``: ``(sequences, sorted fingerprints, peak)``."""
    from ..formats.mlperf_bert import read_packed
    from ._tasks import _peak

    got = read_packed([job.part_path(f)], max_sequences_per_pack=job.max_sequences_per_pack,
                      compression=job.compression)
    return got.num_sequences, np.sort(got.fingerprints()), _peak()


# --------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------
def pack_mlperf_bert(inputs, output_dir, max_sequences_per_pack: int = 3, *, method: str = "nnls",
                     seed: int = 12345, records_per_file: int = 50_000, prefix: str = "packed",
                     compression: str | None = None, engine: str = "local", workers: int | None = 1,
                     ray_address: str | None = None, progress: bool | None = None, verify: bool = True,
                     log=None) -> dict:
    """Pack unpacked MLPerf BERT TFRecord files into packed ones, in bounded memory.

    Parameters
    ----------
    inputs : list of paths
        Unpacked TFRecord files, in the order their sequences are numbered (empty files are skipped).
    output_dir : path
        Gets ``<prefix>-NNNNN-of-NNNNN.tfrecord[.gz]`` and ``packing_metadata.json`` (the
        MLPerf keys); created if missing. Files appear only when the whole run succeeded.
    max_sequences_per_pack : int, default 3
    method : str, default "nnls"
        A histogram method of :mod:`packlib.methods`.
    seed : int, default 12345
        Assigns sequences to the plan's packs and shuffles the packs.
    records_per_file : int, default 50,000
    prefix, compression : output file names; ``"gzip"`` or None.
    engine, workers, ray_address : see :func:`packlib.pipeline.pack_files`.
    progress : bool or None
    verify : bool, default True
        Re-read the output and check every input sequence appears exactly once.
    log : callable, optional
        Called with each progress line (default: silent).

    Returns
    -------
    dict
        The metadata written to ``packing_metadata.json``.
    """
    from .. import methods, packing
    from .._validate import as_bool, as_choice, as_positive_int, as_seed
    from . import _StagedRun

    log = log or (lambda msg: None)
    t_start = time.perf_counter()
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    paths = tuple(os.fspath(p) for p in inputs)
    if not paths:
        raise ValueError("no input files given")
    m = methods.get(method, kind="histogram")
    depth = as_positive_int(max_sequences_per_pack, "max_sequences_per_pack")
    R = as_positive_int(records_per_file, "records_per_file")
    seed = as_seed(seed)
    if compression is not None:
        compression = as_choice(compression, "compression", ("gzip",))
    engine = as_choice(engine, "engine", ("local", "ray"))
    verify = as_bool(verify, "verify")
    out_dir = os.path.abspath(os.fspath(output_dir))
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    work = os.path.join(parent, f".{os.path.basename(out_dir)}.tmp-{uuid.uuid4().hex[:12]}")
    with _StagedRun(work, engine, workers, ray_address) as run:
        eng = run.engine
        job = BertJob(paths, work, max_sequences_per_pack=depth, compression=compression)
        res = eng.map(bert_lengths_task, [(job, i) for i in range(len(paths))], "reading", progress, unit="file")
        counts = np.array([r[0].size for r in res], dtype=np.int64)
        widths = {r[1] for r in res if r[1] is not None}
        if not widths:
            raise ValueError(f"the {len(paths)} input files hold no records: {list(paths[:3])}"
                             f"{' ...' if len(paths) > 3 else ''}")
        if len(widths) > 1:
            first = next(p for p, r in zip(paths, res) if r[1] is not None)
            other = next(p for p, r in zip(paths, res) if r[1] is not None and r[1] != res[paths.index(first)][1])
            raise ValueError(f"{other}: records have (max_sequence_length, max_predictions) = "
                             f"{res[paths.index(other)][1]}, but {res[paths.index(first)][1]} in {first}; "
                             "give files of one layout")
        L, P_pred = widths.pop()
        lengths = np.concatenate([r[0] for r in res]).astype(np.int64)
        del res
        n = lengths.size
        log(f"read {n:,} sequences ({int(lengths.sum()):,} tokens) from {len(paths)} files in "
            f"{time.perf_counter() - t_start:.1f} s")

        plan = m.function(packing.histogram(lengths, L), max_sequences_per_pack=depth)
        log(plan.report())
        packs = plan.assign(lengths, seed=seed).shuffled(seed)
        packs.validate(n)
        P = packs.num_packs
        F = max(1, -(-P // R))
        ext = ".tfrecord.gz" if compression else ".tfrecord"
        names = tuple(f"{prefix}-{i:05d}-of-{F:05d}{ext}" for i in range(F))
        job = BertJob(paths, work, F, names, depth, compression, (L, P_pred))
        pos = np.empty(n, dtype=np.int64)
        pos[packs.indices] = np.arange(n, dtype=np.int64)
        file_of = (np.repeat(np.arange(P, dtype=np.int64), packs.pack_sizes) // R).astype(np.int32)[pos]
        starts = np.concatenate(([0], np.cumsum(counts)))

        t0 = time.perf_counter()
        tasks = [(job, i, pos[starts[i]:starts[i + 1]], file_of[starts[i]:starts[i + 1]]) for i in range(len(paths))]
        res = eng.map(bert_spill_task, tasks, "exchanging", progress, unit="file")
        del tasks, pos, file_of
        fingerprints = np.concatenate([r[1] for r in res])
        sources = [[] for _ in range(F)]
        for i, (index, _, _) in enumerate(res):
            for f, offset, size in index:
                sources[f].append((i, offset, size))
        del res
        for i in range(len(paths)):
            if os.path.exists(job.cache_path(i)):
                os.remove(job.cache_path(i))
        offs = packs.offsets
        tasks = [(job, f, sources[f], offs[f * R:min(P, (f + 1) * R) + 1] - offs[f * R], int(offs[f * R]))
                 for f in range(F)]
        eng.map(bert_assemble_task, tasks, "writing", progress, unit="file")
        del tasks
        dt = time.perf_counter() - t0
        log(f"wrote {P:,} packs to {F} files in {out_dir} in {dt:.1f} s ({P / max(dt, 1e-9):,.0f} packs/s)")
        shutil.rmtree(os.path.join(work, "_spill"))

        meta = plan.to_dict()
        meta.update(seed=seed, records_per_file=R, output_files=list(names),
                    input_files=[os.path.basename(p) for p in paths], packed_format="mlperf-bert-tfrecord",
                    max_predictions_per_pack=P_pred + depth)
        with open(os.path.join(work, "packing_metadata.json"), "w", encoding="utf-8") as fh:
            json.dump(meta, fh, indent=1, sort_keys=False)
            fh.write("\n")

        if verify:
            t0 = time.perf_counter()
            res = eng.map(bert_verify_task, [(job, f) for f in range(F)], "verifying", progress, unit="file")
            written = sum(r[0] for r in res)
            got = np.sort(np.concatenate([r[1] for r in res]))
            fingerprints.sort()
            if written != n or not np.array_equal(got, fingerprints):
                raise VerifyError(f"the packed output does not hold every input sequence exactly once "
                                  f"({written:,} sequences written, {n:,} read); nothing was written")
            log(f"verified: the {F} packed files hold each of the {n:,} input sequences exactly once "
                f"({time.perf_counter() - t0:.1f} s)")
        _publish(work, out_dir)
    log(f"done in {time.perf_counter() - t_start:.1f} s")
    return meta


def _publish(work: str, out_dir: str) -> None:
    """Move the finished files into ``out_dir`` (all at once when it does not exist yet)."""
    if not os.path.exists(out_dir):
        os.replace(work, out_dir)
        return
    for name in sorted(os.listdir(work)):
        os.replace(os.path.join(work, name), os.path.join(out_dir, name))
    os.rmdir(work)
