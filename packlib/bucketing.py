"""Readahead bucketing and streaming packing.

- :class:`BucketedReadaheadBatchIterator`: a drop-in for infinibatch's class of the same name
  (same batches in the same order for the same source, arguments and seed; compatible
  ``getstate()`` / ``setstate()``), with a compiled path for integer keys and optional
  data-parallel sharding (``rank`` / ``world_size``).
- :func:`bucket`: the same grouping over a numpy array of lengths, in one compiled call,
  returning :class:`Batches` (CSR over batches).
- :func:`pack_stream`: read a window, pack it with :func:`packlib.bfd_pack` /
  :func:`packlib.ffd_pack`, yield packs of items; checkpointable the same way.

Semantics (infinibatch 0.1.1): read ``read_ahead`` items (fewer at the end of a finite
source), sort them by ``key`` longest first with a *stable* sort, cut batches front to back
(the size of a batch is fixed by its first, longest item; ``boundary_key`` starts a new
batch whenever its value changes), then shuffle the window's batches with one
``random.Random(seed)`` that lives across windows.
"""
from __future__ import annotations

import numbers
import operator
import random
import sys
from dataclasses import dataclass
from itertools import islice
from typing import Any, Callable, Iterable

import numpy as np

from ._validate import (
    deprecated_positional,
    as_bool,
    as_choice,
    as_depth,
    as_int,
    as_int_array,
    as_lengths,
    as_nonnegative_int,
    as_positive_int,
    as_seed,
    check_lengths_positive,
    exact_sum,
    readonly,
    seed_to_int64,
)
from .packing import _GroupedIds

__all__ = ["BucketedReadaheadBatchIterator", "bucket", "pack_stream", "Batches", "PackStream"]

_REMAINDERS = ("repeat", "drop")
_GOLDEN = 0x9E3779B97F4A7C15
# Below this many batches per window, Python's own Random.shuffle (~0.1-0.2 us per batch) is
# cheaper than moving the Mersenne Twister state into the kernel and back (~60 us measured).
_KERNEL_SHUFFLE_MIN = 768


# --------------------------------------------------------------------------------------
# Result type of bucket()
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------


def _check_sharding(rank, world_size, remainder):
    world_size = as_positive_int(world_size, "world_size")
    rank = as_int(rank, "rank", minimum=0)
    if rank >= world_size:
        raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
    remainder = as_choice(remainder, "remainder", _REMAINDERS)
    return rank, world_size, remainder


def _shard_positions(nb: int, rank: int, world_size: int, remainder: str) -> range | list:
    """Positions (within one window's shuffled batch list) that ``rank`` serves.

    Rank ``r`` takes batches ``r, r + W, r + 2W, ...``. ``"drop"``: every rank takes
    ``nb // W`` batches and the last ``nb % W`` batches of the window are skipped.
    ``"repeat"``: every rank takes ``ceil(nb / W)`` batches; the positions past the end wrap
    to the window's first batches, which are then served twice.
    """
    if world_size == 1:
        return range(nb)
    if remainder == "drop":
        return range(rank, (nb // world_size) * world_size, world_size)
    k = -(-nb // world_size)
    return [(rank + world_size * j) % nb for j in range(k)]


def _mt_arrays(rnd: random.Random):
    st = rnd.getstate()
    words = st[1]
    return st, np.array(words[:624], dtype=np.uint64), np.array([words[624]], dtype=np.int64)


def _mt_restore(rnd: random.Random, st, mt: np.ndarray, pos: np.ndarray) -> None:
    rnd.setstate((st[0], tuple(mt.tolist()) + (int(pos[0]),), st[2]))


def _shuffle_list(rnd: random.Random, x: list) -> list:
    """``rnd.shuffle(x)`` (same result and generator state), compiled for long lists."""
    if len(x) < _KERNEL_SHUFFLE_MIN:
        rnd.shuffle(x)
        return x
    from ._kernels.bucket import mt_shuffle

    st, mt, pos = _mt_arrays(rnd)
    perm = np.arange(len(x))
    mt_shuffle(perm, mt, pos)
    _mt_restore(rnd, st, mt, pos)
    return [x[i] for i in perm.tolist()]


class _Source:
    """A source with ``getstate``/``setstate``: the source's own, or an item count.

    Checkpointable sources (anything with ``getstate``, ``setstate`` and ``__next__``, e.g.
    infinibatch's iterators) are used as they are. For a plain iterable the state is
    ``{'num_items_yielded': n}`` (the format of infinibatch's ``NativeCheckpointableIterator``)
    and resuming re-iterates it from the start, skipping ``n`` items. A one-shot iterator
    (``iter(x) is x``) can be read but not rewound.
    """

    def __init__(self, source):
        if source is None:
            raise TypeError("source must be an iterable or a checkpointable iterator, got None")
        self._own = all(hasattr(source, a) for a in ("getstate", "setstate", "__next__"))
        if self._own:
            self._it = iter(source)
            self._iterable = None
            return
        try:
            it = iter(source)
        except TypeError:
            raise TypeError(f"source must be iterable, got {type(source).__name__}") from None
        self._iterable = source
        self._rewindable = it is not source
        self._it = it
        self._count = 0
        self._fresh = True

    @property
    def checkpointable(self) -> bool:
        return self._own or self._rewindable

    def getstate(self):
        return self._it.getstate() if self._own else {"num_items_yielded": self._count}

    def setstate(self, state) -> None:
        if self._own:
            self._it.setstate(state)
            return
        n = 0
        if state is not None:
            if not isinstance(state, dict) or "num_items_yielded" not in state:
                raise (ValueError if isinstance(state, dict) else TypeError)(
                    f"source_state {state!r} does not come from a plain-iterable source "
                    "(expected {'num_items_yielded': n})"
                )
            n = as_nonnegative_int(state["num_items_yielded"], "state['source_state']['num_items_yielded']")
        if n == self._count and (self._fresh or not self._rewindable):
            return  # already there
        if not self._rewindable:
            raise ValueError(
                "cannot rewind a one-shot iterator source: pass a re-iterable (list, array, "
                "dataset object) or a checkpointable iterator (with getstate/setstate)"
            )
        self._it = iter(self._iterable)
        self._count = 0
        self._fresh = True
        if n:
            got = sum(1 for _ in islice(self._it, n))
            if got < n:
                raise ValueError(f"the state says {n} items were consumed, but the source has only {got}")
            self._count = n
            self._fresh = False

    def read(self, n: int) -> list:
        items = list(islice(self._it, n))
        if not self._own:
            self._count += len(items)
            if items:
                self._fresh = False
        return items

    def close(self):
        if self._own and hasattr(self._it, "close"):
            self._it.close()


def _check_state(state, fingerprint: dict, what: str, required=("source_state", "num_served")):
    """Validate a state dict: its type, its keys, its config and its counters (a copy with
    the counters as ints is returned; ``None`` passes through)."""
    if state is None:
        return None
    shown = repr(state) if len(repr(state)) <= 120 else repr(state)[:117] + "..."
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict from {what}.getstate() (or None), got {type(state).__name__} {shown}")
    missing = [k for k in required if k not in state]
    if missing:
        raise ValueError(
            f"state lacks {', '.join(map(repr, missing))}: it does not come from {what}.getstate(); "
            f"got keys {sorted(map(str, state))}"
        )
    saved = state.get("packlib_config")
    if saved is not None:
        if not isinstance(saved, dict):
            raise TypeError(f"state['packlib_config'] must be a dict, got {type(saved).__name__} {saved!r}")
        if saved != fingerprint:
            diff = {k: (saved.get(k), v) for k, v in fingerprint.items() if saved.get(k) != v}
            raise ValueError(f"state comes from a different configuration: (saved, current) = {diff}")
    state = dict(state)
    state["num_served"] = as_nonnegative_int(state["num_served"], "state['num_served']")
    if "window" in required:
        state["window"] = as_nonnegative_int(state["window"], "state['window']")
    return state


# --------------------------------------------------------------------------------------
# BucketedReadaheadBatchIterator
# --------------------------------------------------------------------------------------


class BucketedReadaheadBatchIterator:
    """Group items of similar length into batches, window by window (infinibatch drop-in).

    Reads ``read_ahead`` items, sorts them by ``key`` longest first (stable: equal keys keep
    their order, so upstream shuffling survives), cuts batches front to back, shuffles the
    window's batches and serves them; then reads the next window. For the same source,
    arguments and seed the batches and their order equal infinibatch 0.1.1's.

    Parameters
    ----------
    source : iterable or checkpointable iterator
        An infinibatch ``CheckpointableIterator`` (or any object with ``getstate``,
        ``setstate`` and ``__next__``), or a plain iterable. For a plain iterable the state
        counts items consumed and resuming re-iterates it from its start; a one-shot
        iterator (a generator) can be batched but not resumed.
    read_ahead : int
        Items per window (>= 1). Larger windows give less padding and cost memory.
    key : callable or None
        Sort key of an item (e.g. ``len``); ``None`` keeps the window's order. Integer keys
        take the compiled path; other comparable keys (floats, tuples) are sorted in Python.
    batch_size : int or callable
        Items per batch, or a function of the batch's first (longest) item returning it,
        e.g. ``lambda longest: 16384 // len(longest)`` for a token budget. Must be >= 1.
    boundary_key : callable, optional
        Start a new batch whenever this value changes between consecutive sorted items (it
        must never be ``None``).
    shuffle : bool, default True
        Shuffle each window's batches with ``random.Random(seed)``.
    seed : int, default 0
    rank, world_size : int, default 0, 1
        Data-parallel sharding: every rank reads the same stream and serves batches
        ``rank, rank + world_size, ...`` of each window, so all ranks get the same number of
        batches from every window.
    remainder : {"repeat", "drop"}, default "repeat"
        What happens to a window's ``nb % world_size`` leftover batches: ``"repeat"`` wraps
        around and serves some of the window's first batches on a second rank (nothing is
        lost, a few batches are seen twice); ``"drop"`` skips them (the last ones after the
        shuffle). Irrelevant when ``world_size == 1``.

    Notes
    -----
    ``getstate()`` returns ``{'source_state', 'random_state', 'num_served', 'packlib_config'}``;
    the first three have infinibatch's meaning and format, so states move between the two
    implementations. ``setstate`` rewinds the source to the start of the window, restores the
    generator, re-reads and re-sorts the window and skips ``num_served`` batches. It refuses
    a state whose ``packlib_config`` differs from this iterator's.

    Examples
    --------
    >>> it = BucketedReadaheadBatchIterator(["aaa", "b", "cc", "dddd"], read_ahead=4, key=len, batch_size=2, shuffle=False)
    >>> list(it)
    [['dddd', 'aaa'], ['cc', 'b']]
    """

    def __init__(
        self,
        source,
        read_ahead: int,
        key: Callable[[Any], Any] | None,
        batch_size: int | Callable[[Any], int],
        boundary_key: Callable[[Any], Any] | None = None,
        shuffle: bool = True,
        seed: int = 0,
        *,
        rank: int = 0,
        world_size: int = 1,
        remainder: str = "repeat",
    ):
        self._read_ahead = as_positive_int(read_ahead, "read_ahead")
        if key is not None and not callable(key):
            raise TypeError(f"key must be a callable (e.g. len) or None, got {type(key).__name__} {key!r}")
        if not callable(batch_size):
            try:
                batch_size = as_positive_int(batch_size, "batch_size")
            except TypeError:
                raise TypeError(
                    f"batch_size must be a whole number >= 1 or a callable, got {type(batch_size).__name__} {batch_size!r}"
                ) from None
        if boundary_key is not None and not callable(boundary_key):
            raise TypeError(f"boundary_key must be a callable or None, got {type(boundary_key).__name__} {boundary_key!r}")
        shuffle = as_bool(shuffle, "shuffle")
        self._key = key
        self._batch_size = batch_size
        self._boundary_key = boundary_key
        self._seed = as_seed(seed)
        self._rank, self._world_size, self._remainder = _check_sharding(rank, world_size, remainder)
        self._random = random.Random(self._seed) if shuffle else None
        self._fingerprint = {
            "kind": "BucketedReadaheadBatchIterator",
            "read_ahead": self._read_ahead,
            "batch_size": batch_size if isinstance(batch_size, int) else "callable",
            "boundary_key": boundary_key is not None,
            "shuffle": shuffle,
            "seed": self._seed,
            "rank": self._rank,
            "world_size": self._world_size,
            "remainder": self._remainder,
        }
        self._source = _Source(source)
        _register_with_infinibatch(type(self))
        self.setstate(None)

    # -- checkpointing -----------------------------------------------------------------
    def getstate(self) -> dict:
        """The state to resume from: see the class notes. Cheap (no copying of items)."""
        return {
            "source_state": self._source_state,
            "random_state": self._random_state,
            "num_served": self._num_served,
            "packlib_config": dict(self._fingerprint),
        }

    def setstate(self, state: dict | None) -> None:
        """Resume from a state, or restart.

        Parameters
        ----------
        state : dict or None
            From :meth:`getstate` (or infinibatch's); ``None`` restarts. A state of the
            wrong type is a ``TypeError``; one with missing keys, bad counters or another
            configuration a ``ValueError``.
        """
        state = _check_state(state, self._fingerprint, "BucketedReadaheadBatchIterator")
        self._source_state = state["source_state"] if state else None
        self._random_state = state.get("random_state") if state else None
        self._num_served = int(state["num_served"]) if state else 0
        self._source.setstate(self._source_state)
        if self._random is not None:
            if self._random_state:
                try:
                    self._random.setstate(self._random_state)
                except (TypeError, ValueError, IndexError, KeyError, OverflowError) as e:
                    raise ValueError(
                        f"state['random_state'] is not a random.Random state ({type(e).__name__}: {e}); "
                        "pass a state from getstate()"
                    ) from None
            else:
                self._random.seed(self._seed)
        self._iterator = self._generate()

    # -- iteration ---------------------------------------------------------------------
    def __iter__(self):
        return self

    def __next__(self):
        return next(self._iterator)

    def close(self) -> None:
        """Close the source (infinibatch's interface)."""
        self._source.close()

    def _generate(self):
        skip = self._num_served
        exhausted = False
        while not exhausted:
            self._source_state = self._source.getstate()
            self._random_state = self._random.getstate() if self._random is not None else None
            items = self._source.read(self._read_ahead)
            exhausted = len(items) < self._read_ahead
            batches = self._window_batches(items)
            if skip > len(batches):
                raise ValueError(
                    f"the state says {skip} batches of this window were served, but the window "
                    f"has only {len(batches)}: the source or configuration differs from the one "
                    "the state was taken from"
                )
            self._num_served = skip
            for i in range(skip, len(batches)):
                self._num_served += 1
                yield batches[i]
            skip = 0

    def _window_batches(self, items: list) -> list:
        n = len(items)
        if n == 0:
            return []
        order = _window_order(items, self._key)
        if order is None or n == 1:
            srt = items
        elif isinstance(order, np.ndarray):
            srt = np.fromiter(items, dtype=object, count=n)[order].tolist()
        else:
            srt = list(operator.itemgetter(*order)(items))
        bs = self._batch_size
        if self._boundary_key is None and isinstance(bs, int):
            batches = [srt[p : p + bs] for p in range(0, n, bs)]
        else:
            batches = self._cut_python(srt, bs)
        if self._random is not None:
            batches = _shuffle_list(self._random, batches)
        if self._world_size > 1:
            batches = [batches[i] for i in _shard_positions(len(batches), self._rank, self._world_size, self._remainder)]
        return batches

    def _cut_python(self, srt: list, bs) -> list:
        n = len(srt)
        bvals = None
        if self._boundary_key is not None:
            bvals = [self._boundary_key(x) for x in srt]
            for i, v in enumerate(bvals):
                if v is None:
                    raise ValueError(f"boundary_key returned None for item {srt[i]!r}: boundary keys may not be None")
        batches = []
        p = 0
        while p < n:
            size = bs if isinstance(bs, int) else _check_batch_size(bs(srt[p]), srt[p])
            end = min(n, p + size)
            if bvals is not None:
                first = bvals[p]
                prev = first
                for q in range(p + 1, end):
                    v = bvals[q]
                    if v != prev:
                        end = q
                        break
                    prev = v
            batches.append(srt[p:end])
            p = end
        return batches

    def __repr__(self) -> str:
        f = self._fingerprint
        return (
            f"BucketedReadaheadBatchIterator(read_ahead={f['read_ahead']}, batch_size={f['batch_size']}, "
            f"shuffle={f['shuffle']}, seed={f['seed']}, rank={f['rank']}, world_size={f['world_size']})"
        )


def _register_with_infinibatch(cls) -> None:
    """Make ``isinstance(x, infinibatch.iterators.CheckpointableIterator)`` true for our
    iterators when infinibatch is in use (so its iterators accept ours as sources), without
    importing infinibatch ourselves."""
    mod = sys.modules.get("infinibatch.iterators")
    if mod is not None and not getattr(cls, "_registered_infinibatch", False):
        mod.CheckpointableIterator.register(cls)
        cls._registered_infinibatch = True


def _check_batch_size(size, item) -> int:
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, numbers.Integral):
        raise TypeError(f"batch_size({item!r}) returned {type(size).__name__} {size!r}; it must return a whole number >= 1")
    if size < 1:
        raise ValueError(
            f"batch_size({item!r}) returned {size}: this item alone exceeds the batch budget; "
            "raise the budget or split/drop the item"
        )
    return int(size)


def _window_order(items: list, key):
    """Stable descending order of the window by ``key``: positions (an int64 array on the
    compiled path, else a list), or None for no sort."""
    if key is None:
        return None
    keys = list(map(key, items))
    n = len(keys)
    arr = None
    try:
        arr = np.array(keys)
    except (ValueError, TypeError, OverflowError):
        pass
    if arr is not None and arr.ndim == 1 and arr.dtype.kind in "ib" and n > 1:
        from ._kernels.bucket import counting_scratch, sort_desc

        arr = arr.astype(np.int64, copy=False)
        lo, hi = int(arr.min()), int(arr.max())
        # any int64 span is safe: the kernel counting-sorts narrow spans, merge-sorts wide ones
        return sort_desc(arr, lo, hi, counting_scratch(lo, hi, n))
    for i, k in enumerate(keys):
        if k is None:
            raise ValueError(f"key returned None for item {items[i]!r}: sort keys must be comparable values")
    try:
        return sorted(range(n), key=keys.__getitem__, reverse=True)
    except (TypeError, ValueError) as e:
        raise ValueError(f"sort keys are not comparable ({e}); make key return numbers or tuples") from None


# --------------------------------------------------------------------------------------
# bucket(): the array path
# --------------------------------------------------------------------------------------


_BUCKET_POSITIONAL = ("batch_size", "max_tokens", "shuffle", "seed")


class _Unset:
    def __repr__(self):
        return "<unset>"


_UNSET = _Unset()


def bucket(
    lengths,
    read_ahead: int,
    *args,
    batch_size: int | None = _UNSET,
    max_tokens: int | None = _UNSET,
    shuffle: bool = _UNSET,
    seed: int = _UNSET,
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
    read_ahead : int
        Samples per window (>= 1).
    batch_size : int, optional (keyword-only)
        Samples per batch. Give exactly one of ``batch_size`` and ``max_tokens``.
    max_tokens : int, optional
        Token budget: a batch whose longest sample has length ``l`` holds up to
        ``max_tokens // l`` samples, so ``size × longest <= max_tokens``. Must be at least
        the longest sample.
    shuffle : bool, default True
        Shuffle each window's batches (as ``random.Random(seed).shuffle``).
    seed : int, default 0
        ``batch_size``, ``max_tokens``, ``shuffle`` and ``seed`` are keyword-only (by
        position they still work, with a ``DeprecationWarning``, for one release).
    rank, world_size, remainder
        Data-parallel sharding, as for :class:`BucketedReadaheadBatchIterator`.

    Returns
    -------
    Batches
        Batches in serving order (CSR); ``window_batches`` counts them per window.

    Examples
    --------
    >>> bucket([3, 1, 2, 5], read_ahead=4, batch_size=2, shuffle=False).to_list()
    [[3, 0], [2, 1]]
    """
    from ._kernels.bucket import bucket_all, counting_scratch

    given = {"batch_size": batch_size, "max_tokens": max_tokens, "shuffle": shuffle, "seed": seed}
    if args:
        given.update(deprecated_positional("bucket", args, _BUCKET_POSITIONAL, given, _UNSET))
    defaults = {"batch_size": None, "max_tokens": None, "shuffle": True, "seed": 0}
    batch_size, max_tokens, shuffle, seed = (
        defaults[k] if given[k] is _UNSET else given[k] for k in _BUCKET_POSITIONAL
    )
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


# --------------------------------------------------------------------------------------
# pack_stream(): streaming per-sequence packing
# --------------------------------------------------------------------------------------


class PackStream:
    """Iterator returned by :func:`pack_stream`: packs (lists of items), checkpointable.

    ``getstate()`` is ``{'source_state', 'window', 'num_served', 'packlib_config'}`` — the
    source's state at the start of the current window, the window's number, and how many of
    its packs were served; ``setstate`` rewinds the source, re-packs the window and skips.
    """

    def __init__(self, source, max_sequence_length, read_ahead, key, method, max_sequences_per_pack, seed, shuffle):
        from . import methods

        self._L = as_positive_int(max_sequence_length, "max_sequence_length")
        if read_ahead is None:
            raise TypeError("read_ahead (items per window) is required: pack_stream(source, max_sequence_length, read_ahead=...)")
        self._read_ahead = as_positive_int(read_ahead, "read_ahead")
        if not callable(key):
            raise TypeError(f"key must be a callable returning an item's length (e.g. len), got {type(key).__name__} {key!r}")
        method = methods.get(method, kind="sequence").name
        self._key = key
        self._method = method
        self._depth = as_depth(max_sequences_per_pack)
        self._seed = as_seed(seed)
        self._shuffle = as_bool(shuffle, "shuffle")
        self._fingerprint = {
            "kind": "pack_stream",
            "max_sequence_length": self._L,
            "read_ahead": self._read_ahead,
            "method": method,
            "max_sequences_per_pack": self._depth,
            "seed": self._seed,
            "shuffle": self._shuffle,
        }
        self._source = _Source(source)
        self.setstate(None)

    def getstate(self) -> dict:
        return {
            "source_state": self._source_state,
            "window": self._window,
            "num_served": self._num_served,
            "packlib_config": dict(self._fingerprint),
        }

    def setstate(self, state: dict | None) -> None:
        """Resume from a state, or restart.

        Parameters
        ----------
        state : dict or None
            From :meth:`getstate`; ``None`` restarts. Its ``window`` and ``num_served``
            must be whole numbers >= 0 consistent with the source's state.
        """
        state = _check_state(
            state, self._fingerprint, "pack_stream", required=("source_state", "window", "num_served", "packlib_config")
        )
        if state is not None and state.get("packlib_config") is None:
            raise ValueError("state lacks 'packlib_config': it does not come from pack_stream().getstate()")
        if state is not None and not self._source._own:
            # a plain source's state counts items: it must be the start of the stated window
            src = state["source_state"]
            n = None
            if src is None:
                n = 0
            elif isinstance(src, dict) and "num_items_yielded" in src:
                n = as_nonnegative_int(src["num_items_yielded"], "state['source_state']['num_items_yielded']")
            expect = state["window"] * self._read_ahead
            if n is not None and n != expect:
                raise ValueError(
                    f"state is inconsistent: window {state['window']} starts at item {expect:,} "
                    f"(read_ahead={self._read_ahead}), but its source_state says {n:,} items were read"
                )
        self._source_state = state["source_state"] if state else None
        self._window = state["window"] if state else 0
        self._num_served = state["num_served"] if state else 0
        self._source.setstate(self._source_state)
        self._iterator = self._generate()

    def __iter__(self):
        return self

    def __next__(self) -> list:
        return next(self._iterator)

    def close(self) -> None:
        self._source.close()

    def _generate(self):
        from . import methods

        packer = methods.get(self._method, kind="sequence").function
        skip = self._num_served
        window = self._window
        exhausted = False
        while not exhausted:
            self._source_state = self._source.getstate()
            self._window = window
            items = self._source.read(self._read_ahead)
            exhausted = len(items) < self._read_ahead
            packs = self._pack_window(items, window, packer)
            if skip > len(packs):
                raise ValueError(
                    f"the state says {skip} packs of window {window} were served, but it has only "
                    f"{len(packs)}: the source differs from the one the state was taken from"
                )
            self._num_served = skip
            for i in range(skip, len(packs)):
                self._num_served += 1
                yield packs[i]
            skip = 0
            window += 1

    def _pack_window(self, items, window, packer) -> list:
        if not items:
            return []
        keys = list(map(self._key, items))
        try:
            lens = as_lengths(keys, self._L, "lengths")
        except ValueError as e:
            raise ValueError(f"in the window starting at item {window * self._read_ahead} of the stream: {e}") from None
        packs = packer(lens, self._L, self._depth)
        if self._shuffle and packs.num_packs > 1:
            from ._kernels.rng import permutation

            s = (self._seed + (window + 1) * _GOLDEN) % 2**64
            packs = packs.take(permutation(packs.num_packs, seed_to_int64(s)))
        ix, off = packs.indices.tolist(), packs.offsets.tolist()
        return [[items[i] for i in ix[off[p] : off[p + 1]]] for p in range(len(off) - 1)]

    def __repr__(self) -> str:
        f = self._fingerprint
        return f"PackStream(max_sequence_length={f['max_sequence_length']}, read_ahead={f['read_ahead']}, method={f['method']!r})"


_PACK_STREAM_POSITIONAL = ("read_ahead", "key", "method", "max_sequences_per_pack", "seed")


def pack_stream(
    source: Iterable,
    max_sequence_length: int,
    *args,
    read_ahead: int = _UNSET,
    key: Callable[[Any], int] = _UNSET,
    method: str = _UNSET,
    max_sequences_per_pack: int | None = _UNSET,
    seed: int = _UNSET,
    shuffle: bool = True,
) -> PackStream:
    """Pack a stream window by window: read ``read_ahead`` items, bin-pack them by length,
    yield the packs (lists of items).

    Parameters
    ----------
    source : iterable or checkpointable iterator
        As for :class:`BucketedReadaheadBatchIterator`.
    max_sequence_length : int
        Pack capacity in tokens; every item's length must be in ``[1, max_sequence_length]``.
    read_ahead : int (keyword, required)
        Items per window. Larger windows pack tighter (see docs/bucketing.md).
    key : callable, default len
        Length of an item.
    method : {"bfd", "ffd"}, default "bfd"
        A per-sequence method of :mod:`packlib.methods` (:func:`packlib.bfd_pack` or
        :func:`packlib.ffd_pack`).
    max_sequences_per_pack : int or None
        Depth limit.
    seed : int, default 0
        Seed of the per-window shuffle of the packs.
    shuffle : bool, default True
        Shuffle the packs of each window (else the packer's order: longest packs first).

    Returns
    -------
    PackStream
        An iterator of packs with ``getstate()`` / ``setstate()``. Every item of a finite
        source appears in exactly one pack.

    Notes
    -----
    Everything after ``max_sequence_length`` is keyword-only (the house convention). The
    old positional order (``read_ahead, key, method, max_sequences_per_pack, seed``) still
    works for one release, with a ``DeprecationWarning``; in the next one the third
    positional argument becomes ``max_sequences_per_pack``.

    Examples
    --------
    >>> [[len(s) for s in p] for p in pack_stream(["aaa", "bb", "c", "dddd"], 5, read_ahead=4, shuffle=False)]
    [[4, 1], [3, 2]]
    """
    given = {"read_ahead": read_ahead, "key": key, "method": method, "max_sequences_per_pack": max_sequences_per_pack, "seed": seed}
    if args:
        given.update(deprecated_positional("pack_stream", args, _PACK_STREAM_POSITIONAL, given, _UNSET))
    defaults = {"read_ahead": None, "key": len, "method": "bfd", "max_sequences_per_pack": None, "seed": 0}
    v = {k: defaults[k] if given[k] is _UNSET else given[k] for k in _PACK_STREAM_POSITIONAL}
    return PackStream(
        source, max_sequence_length, v["read_ahead"], v["key"], v["method"], v["max_sequences_per_pack"], v["seed"], shuffle
    )
