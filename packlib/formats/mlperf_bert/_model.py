"""The MLPerf BERT data model: record schemas, :class:`BertSequences` (ragged, in memory),
packed-feature building and unpacking (no file I/O here)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..._deprecation import deprecate_positional_args

_INT_NAMES = ("input_ids", "input_mask", "masked_lm_ids", "masked_lm_positions",
              "next_sentence_labels", "next_sentence_positions", "positions", "segment_ids")
_FLOAT_NAMES = ("masked_lm_weights", "next_sentence_weights")


def unpacked_schema(max_sequence_length: int = 512, max_predictions: int = 76):
    """The :class:`~packlib.formats.example.Schema` of unpacked MLPerf BERT records."""
    from .._example import Schema

    L, P = int(max_sequence_length), int(max_predictions)
    return Schema.of({
        "input_ids": ("int64", L), "input_mask": ("int64", L), "segment_ids": ("int64", L),
        "masked_lm_positions": ("int64", P), "masked_lm_ids": ("int64", P),
        "masked_lm_weights": ("float", P), "next_sentence_labels": ("int64", 1),
    })


def packed_schema(max_sequence_length: int = 512, max_predictions: int = 76, max_sequences_per_pack: int = 3):
    """The schema of packed records: ``L`` tokens, ``max_predictions + k`` prediction
    slots (79 for MLPerf), ``k`` NSP slots."""
    from .._example import Schema

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
        if n and (np.diff(self.seq_offsets) < 0).any() or n and (np.diff(self.mlm_offsets) < 0).any():
            raise ValueError("seq_offsets and mlm_offsets must be non-decreasing")
        if n and np.diff(self.mlm_offsets).max(initial=0) > self.max_predictions:
            raise ValueError(f"a sequence has more than max_predictions = {self.max_predictions} predictions")
        if self.mlm_positions.size:
            # every prediction must point inside its own sequence (the writer trusts it)
            owner = np.repeat(np.arange(n), np.diff(self.mlm_offsets))
            bad = (self.mlm_positions < 0) | (self.mlm_positions >= lens[owner])
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                raise ValueError(
                    f"mlm_positions[{k}] = {self.mlm_positions[k]} is outside sequence {owner[k]}, which has "
                    f"{lens[owner[k]]} tokens; positions count from 0 within their own sequence"
                )

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
        from ..._kernels.formats_bert import fingerprints

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

    def take(self, order) -> "BertSequences":
        """The sequences ``order`` (an array of sequence numbers), in that order."""
        order = np.asarray(order, dtype=np.int64)

        def gather(offsets, *values):
            lens = np.diff(offsets)[order]
            new = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
            idx = np.repeat(offsets[:-1][order] - new[:-1], lens) + np.arange(int(new[-1]), dtype=np.int64)
            return (new,) + tuple(v[idx] for v in values)

        so, tok, seg = gather(self.seq_offsets, self.tokens, self.segments)
        mo, mp, mi = gather(self.mlm_offsets, self.mlm_positions, self.mlm_ids)
        return BertSequences(so, tok, seg, mo, mp, mi, self.next_sentence_labels[order],
                             self.max_sequence_length, self.max_predictions)

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


@deprecate_positional_args(names=("seed",))
def synthetic_sequences(num_sequences: int, *, seed: int = 0, max_sequence_length: int = 512,
                        max_predictions: int = 76) -> BertSequences:
    """Random BERT sequences for tests and benchmarks.

    Lengths follow the bundled Wikipedia histogram (rescaled to ``max_sequence_length``);
    each sequence is ``[CLS] A [SEP] B [SEP]`` with random token ids, segment 0 for A and 1
    for B, and ``round(0.15 * length)`` (at most ``max_predictions``, at least 1) masked
    positions drawn without replacement, sorted. The options are keyword-only (``seed`` by
    position, the 0.2 spelling, still works until packlib 0.4, with a ``DeprecationWarning``).
    """
    from ...datasets import wikipedia_512

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



def build_packed_features(seqs: BertSequences, packs, start: int = 0, stop: int | None = None,
                          max_sequences_per_pack: int = 3):
    """Packed feature matrices ``(ints, floats)`` (``packed_schema`` layout) for packs
    ``start .. stop-1`` of ``packs`` (a :class:`packlib.Packs` over ``seqs``)."""
    from ..._kernels.formats_bert import TOO_MANY_PREDICTIONS, TOO_MANY_SEQUENCES, TOO_MANY_TOKENS, build_packed

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
        what = {TOO_MANY_TOKENS: f"more than {seqs.max_sequence_length} tokens",
                TOO_MANY_PREDICTIONS: f"more than {mlm_slots - 1} masked-LM predictions (the reference packer's "
                                      f"limit for {mlm_slots} slots)",
                TOO_MANY_SEQUENCES: f"more than {k} sequences"}[int(err)]
        raise ValueError(f"pack {int(p)} (sequences {ids}) holds {what}; pack with a matching max_sequences_per_pack")
    return ints, floats


def unpack_packed(ints: np.ndarray, floats: np.ndarray, schema, *, where: str = "") -> BertSequences:
    """Split decoded packed records back into sequences, checking the packed layout
    (raises ``ValueError`` naming the first malformed record)."""
    from ..._kernels.formats_bert import unpack_packed as _unpack

    icol, fcol = _cols(schema)
    L = schema.widths[schema.names.index("input_ids")]
    k = schema.widths[schema.names.index("next_sentence_labels")]
    M = schema.widths[schema.names.index("masked_lm_ids")]
    so, tok, seg, mo, mp, mi, nsp, bad = _unpack(np.ascontiguousarray(ints), np.ascontiguousarray(floats), L, M, k, icol, fcol)
    if bad >= 0:
        raise ValueError(f"{where}record {int(bad)} is not a well-formed packed MLPerf BERT record")
    return BertSequences(so, tok, seg, mo, mp, mi, nsp, L, M - k)


BertSequences.__module__ = "packlib.formats.mlperf_bert"  # pickles and reprs name the public path
