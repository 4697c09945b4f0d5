"""Reading and writing MLPerf BERT TFRecord files (unpacked and packed)."""
from __future__ import annotations

import os

import numpy as np

from ._model import BertSequences, build_packed_features, packed_schema, unpack_packed, unpacked_schema


def _infer_widths(first_record: bytes, path: str) -> tuple[int, int]:
    from .._example import decode_example

    d = decode_example(first_record, path=path, record=0)
    missing = {"input_ids", "masked_lm_ids"} - set(d)
    if missing:
        raise ValueError(f"{path}: record 0 is not an MLPerf BERT record (no {sorted(missing)}; it has {sorted(d)})")
    return int(np.asarray(d["input_ids"]).size), int(np.asarray(d["masked_lm_ids"]).size)


def _decode_chunks(recs, schema, convert, chunk: int = 2048):
    """Decode records ``chunk`` at a time (the padded matrices stay small and cached)."""
    from ..tfrecord import Records

    for a in range(0, len(recs), chunk):
        part = Records(recs.data, recs.starts[a:a + chunk], recs.stops[a:a + chunk], recs.path)
        try:
            out = convert(*schema.decode(part), a)
        except ValueError as exc:  # renumber "record i" of the chunk as the file's record
            import re

            msg = re.sub(r"record (\d+)", lambda m: f"record {int(m.group(1)) + a}", str(exc), count=1)
            raise ValueError(msg) from None
        yield out


def _read_file(path, compression=None, verify: bool = True, widths=None):
    """One unpacked file as BertSequences, or None when it holds no records."""
    from ..tfrecord import read_tfrecord

    recs = read_tfrecord(path, compression=compression, verify=verify)
    if not len(recs):
        return None
    schema = unpacked_schema(*(widths or _infer_widths(recs[0], path)))
    return BertSequences.concatenate(_decode_chunks(recs, schema, lambda i, f, a: BertSequences.from_padded(
        i, f, schema, where=f"{path}: ")))


def read_unpacked(paths, *, compression=None, verify: bool = True, progress: bool | None = None,
                  max_sequence_length: int | None = None, max_predictions: int | None = None,
                  workers: int = 1) -> BertSequences:
    """Read unpacked MLPerf BERT TFRecord files into :class:`BertSequences`.

    Every record's CRCs and every field's type and length are checked; records are kept in
    file order (files in the order given; empty files are skipped).
    ``max_sequence_length`` / ``max_predictions`` default to the list lengths of each
    file's first record (512 / 76 for MLPerf); all files must agree. ``workers > 1`` reads
    files in that many forked processes (same result).
    """
    import functools

    from ..._progress import progress_bar

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise ValueError("no input files given")
    widths = None
    if max_sequence_length is not None or max_predictions is not None:
        widths = (max_sequence_length or 512, max_predictions or 76)
    fn = functools.partial(_read_file, compression=compression, verify=verify, widths=widths)
    with progress_bar(len(paths), "reading", progress, unit="file") as bar:
        parts = [p for p in _map(fn, paths, int(workers), bar) if p is not None]
    if not parts:
        raise ValueError(f"the {len(paths)} input files hold no records: {paths[:3]}{' ...' if len(paths) > 3 else ''}")
    return BertSequences.concatenate(parts)


def write_unpacked(path, seqs: BertSequences, *, compression=None) -> int:
    """Write sequences as unpacked MLPerf BERT records (e.g. to make test data)."""
    from ..tfrecord import write_tfrecord

    schema = unpacked_schema(seqs.max_sequence_length, seqs.max_predictions)
    return write_tfrecord(path, schema.encode(*seqs.to_padded(schema)), compression=compression)


def _encoded_chunks(seqs, packs, start, stop, max_sequences_per_pack, chunk):
    schema = packed_schema(seqs.max_sequence_length, seqs.max_predictions, max_sequences_per_pack)
    for a in range(start, stop, chunk):
        b = min(stop, a + chunk)
        yield schema.encode(*build_packed_features(seqs, packs, a, b, max_sequences_per_pack))


def encode_packed(seqs: BertSequences, packs, start: int = 0, stop: int | None = None,
                  max_sequences_per_pack: int = 3, *, chunk: int = 512):
    """Serialised packed Examples for packs ``start .. stop-1``: ``(data, offsets)``."""
    stop = packs.num_packs if stop is None else int(stop)
    datas, offs, base = [], [np.zeros(1, dtype=np.int64)], 0
    for data, o in _encoded_chunks(seqs, packs, start, stop, max_sequences_per_pack, chunk):
        datas.append(data)
        offs.append(o[1:] + base)
        base += int(o[-1])
    data = np.concatenate(datas) if datas else np.zeros(0, dtype=np.uint8)
    return data, np.concatenate(offs)


def write_packed(path, seqs: BertSequences, packs, start: int = 0, stop: int | None = None,
                 max_sequences_per_pack: int = 3, *, compression=None, chunk: int = 512) -> int:
    """Write packs ``start .. stop-1`` as packed MLPerf BERT records; returns the count.

    Packs are built, encoded, framed and written ``chunk`` at a time, so memory stays
    small whatever the file size. The file appears complete or not at all.
    """
    from ..tfrecord import TFRecordWriter

    stop = packs.num_packs if stop is None else int(stop)
    with TFRecordWriter(path, compression=compression) as w:
        for data, offsets in _encoded_chunks(seqs, packs, start, stop, max_sequences_per_pack, chunk):
            w.write_many(data, offsets)
    return stop - start


def read_packed(paths, *, max_sequences_per_pack: int | None = None, compression=None, verify: bool = True) -> BertSequences:
    """Read packed MLPerf BERT files back into the sequences they hold, in order."""
    from .._example import decode_example
    from ..tfrecord import read_tfrecord

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    parts, schema = [], None
    for path in paths:
        recs = read_tfrecord(path, compression=compression, verify=verify)
        if not len(recs):
            continue
        if schema is None:
            d = decode_example(recs[0])
            k = max_sequences_per_pack or int(d["next_sentence_labels"].size)
            schema = packed_schema(d["input_ids"].size, d["masked_lm_ids"].size - k, k)
        parts.extend(_decode_chunks(recs, schema, lambda i, f, a: unpack_packed(
            i, f, schema, where=f"{os.fspath(path)}: ")))
    if not parts:
        raise ValueError("the packed files hold no records")
    return BertSequences.concatenate(parts)


def _map(fn, items, workers: int, bar):
    """``[fn(x) for x in items]`` in order, in ``workers`` forked processes when > 1."""
    items = list(items)
    if workers > 1 and len(items) > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(min(workers, len(items))) as pool:
            out = []
            for r in pool.imap(fn, items):
                out.append(r)
                bar.update(1)
            return out
    out = []
    for x in items:
        out.append(fn(x))
        bar.update(1)
    return out

