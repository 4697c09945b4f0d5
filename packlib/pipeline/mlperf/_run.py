""":func:`pack_mlperf_bert`: its passes, one method each, read top to bottom in :meth:`_BertRun.run`."""
from __future__ import annotations

import json
import os
import shutil
import time

import numpy as np

from ..._deprecation import deprecated_call
from .._errors import VerifyError
from .._staging import StagedRun, staging_dir
from ._tasks import BertJob, bert_assemble_task, bert_lengths_task, bert_spill_task, bert_verify_task

__all__ = ["pack_mlperf_bert"]


def _output_dir_second(args, kwargs):
    """``pack_mlperf_bert(inputs, output_dir, ...)``, the 0.2 spelling."""
    if "output_dir" in kwargs or len(args) < 2 or not isinstance(args[1], (str, os.PathLike)):
        return None
    return ((args[0], *args[2:]), {**kwargs, "output_dir": args[1]},
            "pack_mlperf_bert(inputs, output_dir, ...), the 0.2 spelling,",
            "write pack_mlperf_bert(inputs, max_sequences_per_pack, output_dir=...)")


@deprecated_call(_output_dir_second)
def pack_mlperf_bert(inputs, max_sequences_per_pack: int = 3, *, output_dir, method: str = "nnls",
                     seed: int = 12345, records_per_file: int = 50_000, prefix: str = "packed",
                     compression: str | None = None, engine: str = "local", workers: int | None = 1,
                     ray_address: str | None = None, progress: bool | None = None, verify: bool = True,
                     log=None) -> dict:
    """Pack unpacked MLPerf BERT TFRecord files into packed ones, in bounded memory.

    Parameters
    ----------
    inputs : list of paths
        Unpacked TFRecord files, in the order their sequences are numbered (empty files are skipped).
    max_sequences_per_pack : int, default 3
        The capacity is the records' own ``max_sequence_length``, so the depth comes second.
        3 is MLPerf's depth (its reference packer's, and the paper's; docs/design.md, "Defaults").
    output_dir : path
        Keyword-only. Gets ``<prefix>-NNNNN-of-NNNNN.tfrecord[.gz]`` and
        ``packing_metadata.json`` (the MLPerf keys); created if missing. Files appear only
        when the whole run succeeded.
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
    return _BertRun(inputs, output_dir, max_sequences_per_pack, method=method, seed=seed,
                    records_per_file=records_per_file, prefix=prefix, compression=compression, engine=engine,
                    workers=workers, ray_address=ray_address, progress=progress, verify=verify, log=log).run()


class _BertRun:
    """One run of :func:`pack_mlperf_bert`: options checked once, then the passes."""

    def __init__(self, inputs, output_dir, max_sequences_per_pack, *, method, seed, records_per_file, prefix,
                 compression, engine, workers, ray_address, progress, verify, log):
        from ... import methods
        from ..._validate import as_bool, as_choice, as_positive_int, as_seed

        self.log = log or (lambda msg: None)
        self.t_start = time.perf_counter()
        if isinstance(inputs, (str, os.PathLike)):
            inputs = [inputs]
        self.paths = tuple(os.fspath(p) for p in inputs)
        if not self.paths:
            raise ValueError("no input files given")
        self.method = methods.get(method, kind="histogram")
        self.depth = as_positive_int(max_sequences_per_pack, "max_sequences_per_pack")
        self.R = as_positive_int(records_per_file, "records_per_file")
        self.seed = as_seed(seed)
        self.compression = None if compression is None else as_choice(compression, "compression", ("gzip",))
        self.engine_name = as_choice(engine, "engine", ("local", "ray"))
        self.verify_output = as_bool(verify, "verify")
        self.workers, self.ray_address, self.progress, self.prefix = workers, ray_address, progress, prefix
        self.out_dir = os.path.abspath(os.fspath(output_dir))

    def run(self) -> dict:
        os.makedirs(os.path.dirname(self.out_dir), exist_ok=True)
        with StagedRun(staging_dir(self.out_dir), self.engine_name, self.workers, self.ray_address) as staged:
            self.eng, self.work = staged.engine, staged.work
            self.read()
            self.plan()
            self.exchange()
            self.write_metadata()
            if self.verify_output:
                self.verify()
            staged.publish(self.out_dir, merge=True)
        self.log(f"done in {time.perf_counter() - self.t_start:.1f} s")
        return self.meta

    def map(self, fn, tasks, desc):
        return self.eng.map(fn, tasks, desc, self.progress, unit="file")

    # -- pass 1: decode every input once; lengths to the driver ------------------------------
    def read(self) -> None:
        paths = self.paths
        job = BertJob(paths, self.work, max_sequences_per_pack=self.depth, compression=self.compression)
        res = self.map(bert_lengths_task, [(job, i) for i in range(len(paths))], "reading")
        self.counts = np.array([r[0].size for r in res], dtype=np.int64)
        self.L, self.P_pred = _one_layout(paths, [r[1] for r in res])
        self.lengths = np.concatenate([r[0] for r in res]).astype(np.int64)
        self.log(f"read {self.lengths.size:,} sequences ({int(self.lengths.sum()):,} tokens) from {len(paths)} files "
                 f"in {time.perf_counter() - self.t_start:.1f} s")

    # -- plan: exactly the in-memory tool's (plan.assign(lengths, seed).shuffled(seed)) ----------
    def plan(self) -> None:
        from ..._histogram import _histogram

        n, L = self.lengths.size, self.L
        if self.lengths.size and (self.lengths.min() < 1 or self.lengths.max() > L):
            raise ValueError(f"a record's length is outside [1, {L}]: the input is not MLPerf BERT data")
        self.plan_ = self.method._run(_histogram(self.lengths, L), L, self.depth)
        self.log(self.plan_.report())
        self.packs = self.plan_._assign(self.lengths, self.seed).shuffled(self.seed)
        self.packs.validate(n)
        self.F = max(1, -(-self.packs.num_packs // self.R))
        ext = ".tfrecord.gz" if self.compression else ".tfrecord"
        self.names = tuple(f"{self.prefix}-{i:05d}-of-{self.F:05d}{ext}" for i in range(self.F))
        self.job = BertJob(self.paths, self.work, self.F, self.names, self.depth, self.compression, (L, self.P_pred))

    # -- pass 2: spill to the output files' buckets, then assemble each file ---------------------
    def exchange(self) -> None:
        t0, n, P, R, job = time.perf_counter(), self.lengths.size, self.packs.num_packs, self.R, self.job
        pos = np.empty(n, dtype=np.int64)
        pos[self.packs.indices] = np.arange(n, dtype=np.int64)
        file_of = (np.repeat(np.arange(P, dtype=np.int64), self.packs.pack_sizes) // R).astype(np.int32)[pos]
        starts = np.concatenate(([0], np.cumsum(self.counts)))
        tasks = [(job, i, pos[starts[i]:starts[i + 1]], file_of[starts[i]:starts[i + 1]]) for i in range(len(self.paths))]
        res = self.map(bert_spill_task, tasks, "exchanging")
        del tasks, pos, file_of
        self.fingerprints = np.concatenate([r[1] for r in res])
        sources = [[] for _ in range(self.F)]
        for i, (index, _, _) in enumerate(res):
            for f, offset, size in index:
                sources[f].append((i, offset, size))
        del res
        for i in range(len(self.paths)):
            if os.path.exists(job.cache_path(i)):
                os.remove(job.cache_path(i))
        offs = self.packs.offsets
        self.map(bert_assemble_task, [(job, f, sources[f], offs[f * R:min(P, (f + 1) * R) + 1] - offs[f * R],
                                       int(offs[f * R])) for f in range(self.F)], "writing")
        dt = time.perf_counter() - t0
        self.log(f"wrote {P:,} packs to {self.F} files in {self.out_dir} in {dt:.1f} s ({P / max(dt, 1e-9):,.0f} packs/s)")
        shutil.rmtree(os.path.join(self.work, "_spill"))

    def write_metadata(self) -> None:
        meta = self.plan_.to_dict()
        meta.update(seed=self.seed, records_per_file=self.R, output_files=list(self.names),
                    input_files=[os.path.basename(p) for p in self.paths], packed_format="mlperf-bert-tfrecord",
                    max_predictions_per_pack=self.P_pred + self.depth)
        with open(os.path.join(self.work, "packing_metadata.json"), "w", encoding="utf-8") as fh:
            json.dump(meta, fh, indent=1, sort_keys=False)
            fh.write("\n")
        self.meta = meta

    def verify(self) -> None:
        t0, n = time.perf_counter(), self.lengths.size
        res = self.map(bert_verify_task, [(self.job, f) for f in range(self.F)], "verifying")
        written = sum(r[0] for r in res)
        got = np.sort(np.concatenate([r[1] for r in res]))
        self.fingerprints.sort()
        if written != n or not np.array_equal(got, self.fingerprints):
            raise VerifyError(f"the packed output does not hold every input sequence exactly once "
                              f"({written:,} sequences written, {n:,} read); nothing was written")
        self.log(f"verified: the {self.F} packed files hold each of the {n:,} input sequences exactly once "
                 f"({time.perf_counter() - t0:.1f} s)")


def _one_layout(paths, widths) -> tuple[int, int]:
    """The one ``(max_sequence_length, max_predictions)`` of every non-empty input file."""
    present = [(p, w) for p, w in zip(paths, widths) if w is not None]
    if not present:
        raise ValueError(f"the {len(paths)} input files hold no records: {list(paths[:3])}"
                         f"{' ...' if len(paths) > 3 else ''}")
    first_path, first = present[0]
    for path, w in present[1:]:
        if w != first:
            raise ValueError(f"{path}: records have (max_sequence_length, max_predictions) = {w}, but {first} in "
                             f"{first_path}; give files of one layout")
    return first
