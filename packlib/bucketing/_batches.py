"""The array path: :func:`bucket` over a numpy array of lengths, returning :class:`Batches`."""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from .._deprecation import deprecate_positional_args
from .._packs import _GroupedIds
from .._validate import (
    as_bool,
    as_int_array,
    as_lengths,
    as_positive_int,
    as_seed,
    check_lengths_positive,
    exact_sum,
    readonly,
)
from ._shared import _check_sharding, _mt_arrays, _shard_positions


@dataclass(frozen=True, eq=False, repr=False)
class Batches(_GroupedIds):
    """Sample ids grouped into batches, in CSR form (as :class:`packlib.Packs`).

    Batch ``b`` holds the samples ``indices[offsets[b]:offsets[b + 1]]`` (longest first),
    whose lengths are ``lengths[offsets[b]:offsets[b + 1]]``.

    Attributes
    ----------
    offsets : int64 array, shape ``(B + 1,)``
    indices : int64 array, shape ``(N,)``
        Sample ids (positions in the lengths the batches were built from). Without sharding
        every id appears exactly once.
    lengths : int64 array, shape ``(N,)``
        Length of each entry of ``indices``.
    window_batches : int64 array, shape ``(W,)``
        How many batches (of this rank) each readahead window produced.
    """

    offsets: np.ndarray
    indices: np.ndarray
    lengths: np.ndarray
    window_batches: np.ndarray
    _unit, _units = "batch", "batches"

    def __post_init__(self):
        for name in ("offsets", "indices", "lengths", "window_batches"):
            object.__setattr__(self, name, readonly(as_int_array(getattr(self, name), name)))
        o = self.offsets
        if o.size < 1 or o[0] != 0 or o[-1] != self.indices.size or (o.size > 1 and (np.diff(o) < 0).any()):
            raise ValueError(
                "offsets must start at 0, be non-decreasing and end at the number of indices "
                f"({self.indices.size}), got {o[:8].tolist()}{' ...' if o.size > 8 else ''}"
            )
        if self.indices.shape != self.lengths.shape:
            raise ValueError(
                f"indices and lengths must have the same shape, got {self.indices.shape} and {self.lengths.shape}"
            )
        if self.indices.size and self.indices.min() < 0:
            raise ValueError(f"indices must be sample ids >= 0, got {int(self.indices.min())}")
        check_lengths_positive(self.lengths)
        wb = self.window_batches
        if (wb.size and wb.min() < 0) or exact_sum(wb) != o.size - 1:
            raise ValueError(
                f"window_batches must be counts >= 0 summing to the number of batches ({o.size - 1}), "
                f"got sum {exact_sum(wb)}"
            )

    @property
    def num_batches(self) -> int:
        return self.offsets.size - 1

    @property
    def batch_sizes(self) -> np.ndarray:
        """Number of samples in each batch, int64 ``(B,)``."""
        return np.diff(self.offsets)

    @property
    def batch_max_lengths(self) -> np.ndarray:
        """Longest sample of each batch, int64 ``(B,)``."""
        if self.num_batches == 0:
            return np.zeros(0, dtype=np.int64)
        return np.maximum.reduceat(self.lengths, self.offsets[:-1])

    @property
    def padded_tokens(self) -> int:
        """Σ over batches of (batch size × longest in batch): the tensor cells computed."""
        return exact_sum(self.batch_sizes, self.batch_max_lengths)

    @property
    def padding(self) -> float:
        """Share of padded tensor cells: ``1 - num_tokens / padded_tokens`` (0 when empty)."""
        cells = self.padded_tokens
        return 1.0 - self.num_tokens / cells if cells else 0.0

    def to_dict(self) -> dict:
        return {
            "offsets": self.offsets.tolist(),
            "indices": self.indices.tolist(),
            "lengths": self.lengths.tolist(),
            "window_batches": self.window_batches.tolist(),
        }

    def __repr__(self) -> str:
        return (
            f"Batches({self.num_batches:,} batches of {self.num_sequences:,} sequences in "
            f"{self.window_batches.size:,} windows, padding={100 * self.padding:.3f}%)"
        )


@deprecate_positional_args(names=("read_ahead", "batch_size", "max_tokens", "shuffle", "seed"))
def bucket(
    lengths,
    *,
    read_ahead: int,
    batch_size: int | None = None,
    max_tokens: int | None = None,
    shuffle: bool = True,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
    remainder: str = "repeat",
) -> Batches:
    """Readahead bucketing of an array of lengths, in one compiled pass.

    Equivalent to :class:`BucketedReadaheadBatchIterator` over items ``0 .. N-1`` with
    ``key = lengths[i]`` and ``batch_size`` (fixed) or ``max_tokens // longest`` (token
    budget): the same batches, in the same order, as infinibatch with the same seed.

    Parameters
    ----------
    lengths : array_like of int
        Length of each sample (>= 1), in stream order (total at most ``2**62`` tokens).
    read_ahead : int (keyword-only, required)
        Samples per window (>= 1).
    batch_size : int, optional
        Samples per batch. Give exactly one of ``batch_size`` and ``max_tokens``.
    max_tokens : int, optional
        Token budget: a batch whose longest sample has length ``l`` holds up to
        ``max_tokens // l`` samples, so ``size × longest <= max_tokens``. Must be at least
        the longest sample.
    shuffle : bool, default True
        Shuffle each window's batches (as ``random.Random(seed).shuffle``).
    seed : int, default 0
        Seed of the shuffle. Every option is keyword-only (the 0.2 positional
        ``read_ahead, batch_size, max_tokens, shuffle, seed`` still work, with a
        ``DeprecationWarning``, until packlib 0.4).
    rank, world_size, remainder
        Data-parallel sharding, as for :class:`BucketedReadaheadBatchIterator`.

    Returns
    -------
    Batches
        Batches in serving order (CSR); ``window_batches`` counts them per window.

    See Also
    --------
    BucketedReadaheadBatchIterator : the same batches from any iterable, lazily.
    pack_stream : packs to a capacity instead of batches of similar length.

    Examples
    --------
    >>> bucket([3, 1, 2, 5], read_ahead=4, batch_size=2, shuffle=False).to_list()
    [[3, 0], [2, 1]]
    """
    from .._kernels.bucket import bucket_all, counting_scratch

    ra = as_positive_int(read_ahead, "read_ahead")
    if (batch_size is None) == (max_tokens is None):
        raise TypeError("give exactly one of batch_size (samples per batch) and max_tokens (token budget)")
    lens = as_lengths(lengths, None)
    shuffle = as_bool(shuffle, "shuffle")
    bs, mt_budget = 0, 0
    if batch_size is not None:
        bs = as_positive_int(batch_size, "batch_size")
    else:
        mt_budget = as_positive_int(max_tokens, "max_tokens")
        if lens.size and lens.max() > mt_budget:
            i = int(np.argmax(lens))
            raise ValueError(
                f"lengths[{i}] = {lens[i]} exceeds max_tokens = {mt_budget}: that sample fits no "
                "batch; raise max_tokens or truncate/split it"
            )
    seed = as_seed(seed)
    rank, world_size, remainder = _check_sharding(rank, world_size, remainder)
    if shuffle and min(lens.size, ra) >= 2**32:
        raise ValueError(
            f"read_ahead = {ra} with {lens.size:,} samples: a window of 2**32 or more batches cannot be "
            "shuffled as random.Random.shuffle does; use a smaller read_ahead"
        )
    rnd = random.Random(seed)
    _, mt, pos = _mt_arrays(rnd)
    lo = int(lens.min()) if lens.size else 1
    hi = int(lens.max()) if lens.size else 1
    counts = counting_scratch(lo, hi, min(lens.size, ra))
    offsets, indices, window_batches = bucket_all(lens, ra, bs, mt_budget, lo, hi, counts, shuffle, mt, pos)
    if world_size > 1:
        offsets, indices, window_batches = _shard_csr(offsets, indices, window_batches, rank, world_size, remainder)
    return Batches(offsets, indices, lens[indices], window_batches)


def _shard_csr(offsets, indices, window_batches, rank, world_size, remainder):
    starts = np.concatenate(([0], np.cumsum(window_batches)))
    chosen = []
    per_window = np.zeros(window_batches.size, dtype=np.int64)
    for w in range(window_batches.size):
        pos = _shard_positions(int(window_batches[w]), rank, world_size, remainder)
        chosen.extend(int(starts[w]) + p for p in pos)
        per_window[w] = len(pos)
    sel = np.array(chosen, dtype=np.int64)
    sizes = offsets[sel + 1] - offsets[sel]
    new_off = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    if sel.size:
        idx = np.concatenate([indices[offsets[b] : offsets[b + 1]] for b in sel.tolist()])
    else:
        idx = np.zeros(0, dtype=np.int64)
    return new_off, idx, per_window
