"""MLPerf BERT pre-training data: read unpacked TFRecords, pack them, write packed TFRecords
for ``run_pretraining.py --enable_packed_data_mode`` (no TensorFlow needed).

Unpacked records hold one sequence pair each: ``input_ids``, ``input_mask``,
``segment_ids`` (``L`` = 512 values), ``masked_lm_positions``, ``masked_lm_ids``,
``masked_lm_weights`` (76 values, weights float), ``next_sentence_labels`` (1 value).

A packed record holds up to ``k`` (default 3) sequences:

========================  ======  =====================================================
feature                   length  content
========================  ======  =====================================================
input_ids                 L       the sequences' tokens concatenated, then 0
input_mask                L       sequence index ``1..k`` over each sequence, 0 = pad
segment_ids               L       concatenated
positions                 L       ``0..L1-1, 0..L2-1, ...``, then 0
masked_lm_positions       P + k   each prediction's position plus its sequence's offset
masked_lm_ids             P + k   concatenated
masked_lm_weights         P + k   (float) the prediction's sequence index, 0.0 = pad
next_sentence_positions   k       offset of each sequence ([CLS]), 0 = unused
next_sentence_labels      k       NSP label per sequence
next_sentence_weights     k       (float) 1.0 per present sequence
========================  ======  =====================================================

In memory, sequences are kept ragged (:class:`BertSequences`): only the real tokens and
real predictions, so a dataset takes about 5 bytes per token (int32 ids, int8 segments) instead of
24 bytes per padded slot: about 21 GB for the 4.16 G tokens of MLPerf's Wikipedia.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

__all__ = [
    "BertSequences",
    "read_unpacked",
    "write_unpacked",
    "packed_schema",
    "unpacked_schema",
    "build_packed_features",
    "encode_packed",
    "unpack_packed",
    "write_packed",
    "read_packed",
    "synthetic_sequences",
    "configure_parser",
    "run",
]

_INT_NAMES = ("input_ids", "input_mask", "masked_lm_ids", "masked_lm_positions",
              "next_sentence_labels", "next_sentence_positions", "positions", "segment_ids")
_FLOAT_NAMES = ("masked_lm_weights", "next_sentence_weights")


def unpacked_schema(max_sequence_length: int = 512, max_predictions: int = 76):
    """The :class:`~packlib.formats.example.Schema` of unpacked MLPerf BERT records."""
    from .example import Schema

    L, P = int(max_sequence_length), int(max_predictions)
    return Schema.of({
        "input_ids": ("int64", L), "input_mask": ("int64", L), "segment_ids": ("int64", L),
        "masked_lm_positions": ("int64", P), "masked_lm_ids": ("int64", P),
        "masked_lm_weights": ("float", P), "next_sentence_labels": ("int64", 1),
    })


def packed_schema(max_sequence_length: int = 512, max_predictions: int = 76, max_sequences_per_pack: int = 3):
    """The schema of packed records: ``L`` tokens, ``max_predictions + k`` prediction
    slots (79 for MLPerf), ``k`` NSP slots."""
    from .example import Schema

    L, k = int(max_sequence_length), int(max_sequences_per_pack)
    M = int(max_predictions) + k
    return Schema.of({
        "input_ids": ("int64", L), "input_mask": ("int64", L), "segment_ids": ("int64", L),
        "positions": ("int64", L), "masked_lm_positions": ("int64", M), "masked_lm_ids": ("int64", M),
        "masked_lm_weights": ("float", M), "next_sentence_positions": ("int64", k),
        "next_sentence_labels": ("int64", k), "next_sentence_weights": ("float", k),
    })


def _cols(schema):
    icol = np.array([schema.columns(n).start for n in _INT_NAMES], dtype=np.int64)
    fcol = np.array([schema.columns(n).start for n in _FLOAT_NAMES], dtype=np.int64)
    return icol, fcol


def _ro(a):
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False, repr=False)
class BertSequences:
    """Unpacked BERT sequences, ragged (CSR).

    Sequence ``i`` has ``tokens[seq_offsets[i]:seq_offsets[i+1]]`` (its real tokens, so its
    length is the difference), ``segments`` alike, predictions
    ``mlm_positions/mlm_ids[mlm_offsets[i]:mlm_offsets[i+1]]`` (positions within the
    sequence) and ``next_sentence_labels[i]``.
    """

    seq_offsets: np.ndarray
    tokens: np.ndarray
    segments: np.ndarray
    mlm_offsets: np.ndarray
    mlm_positions: np.ndarray
    mlm_ids: np.ndarray
    next_sentence_labels: np.ndarray
    max_sequence_length: int = 512
    max_predictions: int = 76

    def __post_init__(self):
        # compact dtypes: about 5 bytes per token and 8 per prediction
        conv = dict(seq_offsets=np.int64, tokens=np.int32, segments=np.int8, mlm_offsets=np.int64,
                    mlm_positions=np.int32, mlm_ids=np.int32, next_sentence_labels=np.int64)
        for name, dt in conv.items():
            value = np.asarray(getattr(self, name))
            if value.dtype != dt:
                if value.size and value.dtype.kind in "iu":
                    info = np.iinfo(dt)
                    if value.min() < info.min or value.max() > info.max:
                        raise ValueError(f"{name} holds values outside {dt.__name__} ({info.min}..{info.max})")
                elif value.size and value.dtype.kind not in "iub":
                    raise ValueError(f"{name} must hold integers, got dtype {value.dtype}")
                value = value.astype(dt)
            object.__setattr__(self, name, _ro(value))
        n = self.next_sentence_labels.size
        if self.seq_offsets.shape != (n + 1,) or self.mlm_offsets.shape != (n + 1,):
            raise ValueError("seq_offsets and mlm_offsets need one entry per sequence plus one")
        if self.tokens.size != self.seq_offsets[-1] or self.segments.size != self.tokens.size:
            raise ValueError("tokens and segments must hold seq_offsets[-1] values each")
        if self.mlm_ids.size != self.mlm_offsets[-1] or self.mlm_positions.size != self.mlm_ids.size:
            raise ValueError("mlm_positions and mlm_ids must hold mlm_offsets[-1] values each")
        lens = self.lengths
        if n and (lens.min() < 1 or lens.max() > self.max_sequence_length):
            raise ValueError(f"sequence lengths must be in [1, {self.max_sequence_length}]")
        if n and np.diff(self.mlm_offsets).max(initial=0) > self.max_predictions:
            raise ValueError(f"a sequence has more than max_predictions = {self.max_predictions} predictions")

    @property
    def num_sequences(self) -> int:
        """Number of sequences."""
        return self.next_sentence_labels.size

    def __len__(self) -> int:
        return self.num_sequences

    @property
    def lengths(self) -> np.ndarray:
        """Tokens in each sequence, int64 ``(N,)``."""
        return np.diff(self.seq_offsets)

    def sequence(self, i: int) -> dict:
        """Sequence ``i`` as a dict of arrays (for inspection and tests)."""
        a, b = self.seq_offsets[i], self.seq_offsets[i + 1]
        c, d = self.mlm_offsets[i], self.mlm_offsets[i + 1]
        return {"input_ids": self.tokens[a:b], "segment_ids": self.segments[a:b],
                "masked_lm_positions": self.mlm_positions[c:d], "masked_lm_ids": self.mlm_ids[c:d],
                "next_sentence_labels": int(self.next_sentence_labels[i])}

    def fingerprints(self) -> np.ndarray:
        """A 64-bit content hash per sequence."""
        from .._kernels.formats_bert import fingerprints

        return fingerprints(self.seq_offsets, self.tokens, self.segments, self.mlm_offsets,
                            self.mlm_positions, self.mlm_ids, self.next_sentence_labels)

    @classmethod
    def concatenate(cls, parts) -> "BertSequences":
        """Join several :class:`BertSequences` (same ``max_sequence_length`` and ``max_predictions``) in order."""
        parts = list(parts)
        if not parts:
            raise ValueError("nothing to concatenate")
        L, P = parts[0].max_sequence_length, parts[0].max_predictions
        if any((p.max_sequence_length, p.max_predictions) != (L, P) for p in parts):
            raise ValueError("all parts need the same max_sequence_length and max_predictions")

        def offs(name):
            out, base = [np.zeros(1, dtype=np.int64)], 0
            for p in parts:
                o = getattr(p, name)
                out.append(o[1:] + base)
                base += int(o[-1])
            return np.concatenate(out)

        cat = lambda name: np.concatenate([getattr(p, name) for p in parts])  # noqa: E731
        return cls(offs("seq_offsets"), cat("tokens"), cat("segments"), offs("mlm_offsets"),
                   cat("mlm_positions"), cat("mlm_ids"), cat("next_sentence_labels"), L, P)

    @classmethod
    def from_padded(cls, ints: np.ndarray, floats: np.ndarray, schema, *, where: str = "") -> "BertSequences":
        """From decoded unpacked records (``unpacked_schema`` matrices), checking them."""
        col = lambda n: (floats if n == "masked_lm_weights" else ints)[:, schema.columns(n)]  # noqa: E731
        ids, mask, seg = col("input_ids"), col("input_mask"), col("segment_ids")
        L = ids.shape[1]
        P = schema.widths[schema.names.index("masked_lm_ids")]
        lens = mask.sum(axis=1)
        prefix = np.arange(L)[None, :] < lens[:, None]
        bad = (mask != prefix).any(axis=1) | (lens == 0)
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{where}record {r}: input_mask must be 1s then 0s with at least one 1")
        w = col("masked_lm_weights")
        nm = (w != 0).sum(axis=1)
        wprefix = np.arange(P)[None, :] < nm[:, None]
        bad = ((w != 0) != wprefix).any(axis=1) | ((w != 0) & (w != 1)).any(axis=1)
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{where}record {r}: masked_lm_weights must be 1.0s then 0.0s "
                             "(packed records replace weights by sequence indices)")
        mpos = col("masked_lm_positions")
        if (wprefix & ((mpos < 0) | (mpos >= lens[:, None]))).any():
            r = int(np.flatnonzero((wprefix & ((mpos < 0) | (mpos >= lens[:, None]))).any(axis=1))[0])
            raise ValueError(f"{where}record {r}: a masked_lm_position lies outside the sequence")
        seq_offsets = np.concatenate(([0], np.cumsum(lens)))
        mlm_offsets = np.concatenate(([0], np.cumsum(nm)))
        return cls(seq_offsets, ids[prefix], seg[prefix], mlm_offsets, mpos[wprefix], col("masked_lm_ids")[wprefix],
                   col("next_sentence_labels")[:, 0], L, P)

    def to_padded(self, schema=None):
        """Padded ``(ints, floats)`` matrices of the unpacked schema."""
        schema = schema or unpacked_schema(self.max_sequence_length, self.max_predictions)
        n, L, P = self.num_sequences, self.max_sequence_length, self.max_predictions
        ints = np.zeros((n, schema.int_width), dtype=np.int64)
        floats = np.zeros((n, schema.float_width), dtype=np.float32)
        view = lambda m, name: m[:, schema.columns(name)]  # noqa: E731
        prefix = np.arange(L)[None, :] < self.lengths[:, None]
        mp = np.arange(P)[None, :] < np.diff(self.mlm_offsets)[:, None]
        for name, src, msk in (("input_ids", self.tokens, prefix), ("segment_ids", self.segments, prefix),
                               ("masked_lm_positions", self.mlm_positions, mp), ("masked_lm_ids", self.mlm_ids, mp)):
            v = view(ints, name)
            v[msk] = src
        view(ints, "input_mask")[prefix] = 1
        view(floats, "masked_lm_weights")[mp] = 1.0
        view(ints, "next_sentence_labels")[:, 0] = self.next_sentence_labels
        return ints, floats

    def __repr__(self) -> str:
        return (f"BertSequences({self.num_sequences:,} sequences, {self.tokens.size:,} tokens, "
                f"{self.mlm_ids.size:,} predictions, max_sequence_length={self.max_sequence_length}, "
                f"max_predictions={self.max_predictions})")


def synthetic_sequences(num_sequences: int, seed: int = 0, *, max_sequence_length: int = 512,
                        max_predictions: int = 76) -> BertSequences:
    """Random BERT sequences for tests and benchmarks.

    Lengths follow the bundled Wikipedia histogram (rescaled to ``max_sequence_length``);
    each sequence is ``[CLS] A [SEP] B [SEP]`` with random token ids, segment 0 for A and 1
    for B, and ``round(0.15 * length)`` (at most ``max_predictions``, at least 1) masked
    positions drawn without replacement, sorted.
    """
    from ..datasets import wikipedia_512

    n, L, P = int(num_sequences), int(max_sequence_length), int(max_predictions)
    rng = np.random.default_rng(seed)
    h = wikipedia_512().astype(np.float64)
    src = np.arange(1, h.size + 1)
    lens = np.clip(np.rint(rng.choice(src, size=n, p=h / h.sum()) * L / h.size), 5, L).astype(np.int64)
    seq_offsets = np.concatenate(([0], np.cumsum(lens)))
    tokens = rng.integers(1000, 30522, size=int(seq_offsets[-1]), dtype=np.int64)
    segments = np.zeros_like(tokens)
    split = 1 + (rng.random(n) * (lens - 3)).astype(np.int64) + 1  # index of the first [SEP]
    tokens[seq_offsets[:-1]] = 101
    tokens[seq_offsets[:-1] + split] = 102
    tokens[seq_offsets[1:] - 1] = 102
    rows = np.repeat(np.arange(n), lens)
    within = np.arange(tokens.size) - seq_offsets[:-1][rows]
    segments[within > split[rows]] = 1
    nm = np.clip(np.rint(0.15 * lens), 1, min(P, L)).astype(np.int64)
    nm = np.minimum(nm, lens - 2).clip(0)
    mlm_offsets = np.concatenate(([0], np.cumsum(nm)))
    mpos = np.empty(int(mlm_offsets[-1]), dtype=np.int64)
    for i in range(n):  # positions 1 .. len-2, never [CLS] or the last [SEP]
        mpos[mlm_offsets[i]:mlm_offsets[i + 1]] = np.sort(rng.choice(np.arange(1, lens[i] - 1), size=nm[i], replace=False))
    mids = tokens[seq_offsets[:-1][np.repeat(np.arange(n), nm)] + mpos]
    tokens[seq_offsets[:-1][np.repeat(np.arange(n), nm)] + mpos] = 103
    nsp = rng.integers(0, 2, size=n)
    return BertSequences(seq_offsets, tokens, segments, mlm_offsets, mpos, mids, nsp, L, P)


# --------------------------------------------------------------------------------------
# reading and writing
# --------------------------------------------------------------------------------------
def _infer_widths(first_record: bytes, path: str) -> tuple[int, int]:
    from .example import decode_example

    d = decode_example(first_record)
    missing = {"input_ids", "masked_lm_ids"} - set(d)
    if missing:
        raise ValueError(f"{path}: record 0 is not an MLPerf BERT record (no {sorted(missing)}; it has {sorted(d)})")
    return int(np.asarray(d["input_ids"]).size), int(np.asarray(d["masked_lm_ids"]).size)


def _decode_chunks(recs, schema, convert, chunk: int = 2048):
    """Decode records ``chunk`` at a time (the padded matrices stay small and cached)."""
    from .tfrecord import Records

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
    from .tfrecord import read_tfrecord

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

    from .._progress import progress_bar

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
    from .tfrecord import write_tfrecord

    schema = unpacked_schema(seqs.max_sequence_length, seqs.max_predictions)
    return write_tfrecord(path, schema.encode(*seqs.to_padded(schema)), compression=compression)


def build_packed_features(seqs: BertSequences, packs, start: int = 0, stop: int | None = None,
                          max_sequences_per_pack: int = 3):
    """Packed feature matrices ``(ints, floats)`` (``packed_schema`` layout) for packs
    ``start .. stop-1`` of ``packs`` (a :class:`packlib.Packs` over ``seqs``)."""
    from .._kernels.formats_bert import build_packed

    k = int(max_sequences_per_pack)
    schema = packed_schema(seqs.max_sequence_length, seqs.max_predictions, k)
    stop = packs.num_packs if stop is None else int(stop)
    icol, fcol = _cols(schema)
    ints = np.zeros((stop - start, schema.int_width), dtype=np.int64)
    floats = np.zeros((stop - start, schema.float_width), dtype=np.float32)
    mlm_slots = seqs.max_predictions + k
    # the reference packer asserts mlm_offset + mlm_len < slots: at most slots - 1 are used
    err, p = build_packed(packs.offsets, packs.indices, start, stop, seqs.seq_offsets, seqs.tokens, seqs.segments,
                          seqs.mlm_offsets, seqs.mlm_positions, seqs.mlm_ids, seqs.next_sentence_labels,
                          seqs.max_sequence_length, mlm_slots - 1, k, icol, fcol, ints, floats)
    if err:
        ids = packs[int(p)].tolist()
        what = {1: f"more than {seqs.max_sequence_length} tokens",
                2: f"more than {mlm_slots - 1} masked-LM predictions (the reference packer's limit for {mlm_slots} slots)",
                3: f"more than {k} sequences"}[int(err)]
        raise ValueError(f"pack {int(p)} (sequences {ids}) holds {what}; pack with a matching max_sequences_per_pack")
    return ints, floats


def _encoded_chunks(seqs, packs, start, stop, max_sequences_per_pack, chunk):
    schema = packed_schema(seqs.max_sequence_length, seqs.max_predictions, max_sequences_per_pack)
    for a in range(start, stop, chunk):
        b = min(stop, a + chunk)
        yield schema.encode(*build_packed_features(seqs, packs, a, b, max_sequences_per_pack))


def encode_packed(seqs: BertSequences, packs, start: int = 0, stop: int | None = None,
                  max_sequences_per_pack: int = 3, chunk: int = 512):
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
    from .tfrecord import TFRecordWriter

    stop = packs.num_packs if stop is None else int(stop)
    with TFRecordWriter(path, compression=compression) as w:
        for data, offsets in _encoded_chunks(seqs, packs, start, stop, max_sequences_per_pack, chunk):
            w.write_many(data, offsets)
    return stop - start


def unpack_packed(ints: np.ndarray, floats: np.ndarray, schema, *, where: str = "") -> BertSequences:
    """Split decoded packed records back into sequences, checking the packed layout
    (raises ``ValueError`` naming the first malformed record)."""
    from .._kernels.formats_bert import unpack_packed as _unpack

    icol, fcol = _cols(schema)
    L = schema.widths[schema.names.index("input_ids")]
    k = schema.widths[schema.names.index("next_sentence_labels")]
    M = schema.widths[schema.names.index("masked_lm_ids")]
    so, tok, seg, mo, mp, mi, nsp, bad = _unpack(np.ascontiguousarray(ints), np.ascontiguousarray(floats), L, M, k, icol, fcol)
    if bad >= 0:
        raise ValueError(f"{where}record {int(bad)} is not a well-formed packed MLPerf BERT record")
    return BertSequences(so, tok, seg, mo, mp, mi, nsp, L, M - k)


def read_packed(paths, *, max_sequences_per_pack: int | None = None, compression=None, verify: bool = True) -> BertSequences:
    """Read packed MLPerf BERT files back into the sequences they hold, in order."""
    from .example import decode_example
    from .tfrecord import read_tfrecord

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


# --------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------
def _depth(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return v


def _positive(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return v


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the ``mlperf-bert`` options to ``parser``."""
    parser.add_argument("--input-glob", required=True, action="append",
                        help="unpacked TFRecord files (glob; repeatable); files are read in sorted order")
    parser.add_argument("--output-dir", required=True, help="directory for the packed files and packing_metadata.json")
    parser.add_argument("--method", default="nnls", choices=["nnls", "lpfhp", "spfhp", "optimal"])
    parser.add_argument("--max-sequences-per-pack", type=_depth, default=3)
    parser.add_argument("--seed", type=int, default=12345, help="seed for assigning and shuffling packs")
    parser.add_argument("--records-per-file", type=_positive, default=50_000)
    parser.add_argument("--workers", type=_positive, default=1, help="processes for reading, writing and verifying files (the output is the same for any value)")
    parser.add_argument("--prefix", default="packed", help="output file names: <prefix>-<i>-of-<n>.tfrecord")
    parser.add_argument("--compression", choices=["none", "gzip"], default="none",
                        help="gzip the output (and expect gzip input when the input name ends in .gz)")
    parser.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                        help="re-read the output and check that it holds every input sequence exactly once (default on)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bars (default: when stderr is a terminal)")


_JOB = {}


def _write_file(i: int) -> int:
    j = _JOB
    a, b = i * j["per_file"], min(j["packs"].num_packs, (i + 1) * j["per_file"])
    return write_packed(j["paths"][i], j["seqs"], j["packs"], a, b, j["depth"], compression=j["compression"])


def _fingerprints_sorted(seqs: BertSequences) -> np.ndarray:
    return np.sort(seqs.fingerprints())


def _verify_one(i: int):
    j = _JOB
    got = read_packed([j["paths"][i]], max_sequences_per_pack=j["depth"], compression=j["compression"])
    return got.num_sequences, got.fingerprints()


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


def run(args: argparse.Namespace) -> int:
    """Run the ``mlperf-bert`` command; returns the exit code (0 on success)."""
    from .. import packing

    t_start = time.perf_counter()
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    inputs = sorted({p for g in args.input_glob for p in glob.glob(g)})
    if not inputs:
        raise ValueError(f"--input-glob {args.input_glob} matches no files")
    out_dir = args.output_dir
    os.makedirs(out_dir, exist_ok=True)
    compression = None if args.compression == "none" else "gzip"
    depth = int(args.max_sequences_per_pack)

    seqs = read_unpacked(inputs, compression="auto", progress=args.progress, workers=args.workers)
    L, n = seqs.max_sequence_length, seqs.num_sequences
    log(f"read {n:,} sequences ({seqs.tokens.size:,} tokens) from {len(inputs)} files in {time.perf_counter() - t_start:.1f} s")

    lengths = seqs.lengths
    hist = packing.histogram(lengths, L)
    if args.method == "optimal":
        from ..optimal import optimal_pack as packer
    else:
        packer = {"nnls": packing.nnls_pack, "lpfhp": packing.lpfhp_pack, "spfhp": packing.spfhp_pack}[args.method]
    plan = packer(hist, depth)
    log(plan.report())
    packs = plan.assign(lengths, seed=args.seed).shuffled(args.seed)
    packs.validate(n)

    per_file = int(args.records_per_file)
    nfiles = max(1, -(-packs.num_packs // per_file))
    ext = ".tfrecord.gz" if compression else ".tfrecord"
    paths = [os.path.join(out_dir, f"{args.prefix}-{i:05d}-of-{nfiles:05d}{ext}") for i in range(nfiles)]
    _JOB.update(paths=paths, seqs=seqs, packs=packs, per_file=per_file, depth=depth, compression=compression)
    try:
        return _write_and_verify(args, plan, seqs, packs, inputs, paths, out_dir, compression, depth, per_file, log, t_start)
    finally:
        _JOB.clear()


def _write_and_verify(args, plan, seqs, packs, inputs, paths, out_dir, compression, depth, per_file, log, t_start):
    from .._progress import progress_bar

    n, nfiles = seqs.num_sequences, len(paths)
    t0 = time.perf_counter()
    with progress_bar(nfiles, "writing", args.progress, unit="file") as bar:
        _map(_write_file, range(nfiles), args.workers, bar)
    dt = time.perf_counter() - t0
    log(f"wrote {packs.num_packs:,} packs to {nfiles} files in {out_dir} in {dt:.1f} s "
        f"({packs.num_packs / max(dt, 1e-9):,.0f} packs/s)")

    meta = plan.to_dict()
    meta.update(seed=int(args.seed), records_per_file=per_file, output_files=[os.path.basename(p) for p in paths],
                input_files=[os.path.basename(p) for p in inputs], packed_format="mlperf-bert-tfrecord",
                max_predictions_per_pack=seqs.max_predictions + depth)
    with open(os.path.join(out_dir, "packing_metadata.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, sort_keys=False)
        f.write("\n")

    if args.verify:
        t0 = time.perf_counter()
        with progress_bar(nfiles, "verifying", args.progress, unit="file") as bar:
            results = _map(_verify_one, range(nfiles), args.workers, bar)
        written = sum(r[0] for r in results)
        got = np.sort(np.concatenate([r[1] for r in results]))
        if written != n or not np.array_equal(got, _fingerprints_sorted(seqs)):
            print(f"error: the packed output does not hold every input sequence exactly once "
                  f"({written:,} sequences written, {n:,} read)", file=sys.stderr)
            return 1
        log(f"verified: the {nfiles} packed files hold each of the {n:,} input sequences exactly once "
            f"({time.perf_counter() - t0:.1f} s)")
    log(f"done in {time.perf_counter() - t_start:.1f} s")
    return 0
