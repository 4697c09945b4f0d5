"""The MLPerf tool's tasks: plain functions of picklable arguments, as the pipeline's."""
from __future__ import annotations

import io
import os
from dataclasses import dataclass

import numpy as np

from .._errors import PipelineError

__all__ = ["BertJob", "bert_lengths_task", "bert_spill_task", "bert_assemble_task", "bert_verify_task"]

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
    from ...formats.mlperf_bert import BertSequences

    z = np.load(io.BytesIO(data) if isinstance(data, bytes) else data)  # bytes, or a path
    L, P = (int(x) for x in z["widths"])
    return BertSequences(*(z[k] for k in _ARRAYS), L, P), z


# --------------------------------------------------------------------------------------
# tasks
# --------------------------------------------------------------------------------------
def bert_lengths_task(job: BertJob, i: int):
    """Pass 1: decode input file ``i``; its lengths (int32) and list widths ``(L, P)``."""
    from ...formats.mlperf_bert._io import _read_file
    from .._tasks import _peak, pause_point

    pause_point("lengths")

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
    from .._tasks import _peak, pause_point

    pause_point("spill")

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
    from ...formats.mlperf_bert import BertSequences, write_packed
    from ..._packs import Packs
    from .._tasks import _peak, pause_point

    pause_point("assemble")

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
    from ...formats.mlperf_bert import read_packed
    from .._tasks import _peak, pause_point

    pause_point("verify")

    got = read_packed([job.part_path(f)], max_sequences_per_pack=job.max_sequences_per_pack,
                      compression=job.compression)
    return got.num_sequences, np.sort(got.fingerprints()), _peak()
