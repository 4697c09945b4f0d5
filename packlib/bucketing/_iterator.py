"""infinibatch's ``BucketedReadaheadBatchIterator``, exactly, with a compiled path."""
from __future__ import annotations

import operator
import random
import sys
from itertools import islice
from typing import Any, Callable

import numpy as np

from .._validate import (
    as_bool,
    as_nonnegative_int,
    as_positive_int,
    as_seed,
)
from ._shared import (
    _check_batch_size,
    _check_sharding,
    _shard_positions,
    _shuffle_list,
    _window_order,
)


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

    See Also
    --------
    bucket : the same batches of an array of lengths, in one compiled pass.
    pack_stream : packs to a capacity instead of batches.

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
