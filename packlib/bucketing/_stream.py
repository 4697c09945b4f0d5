"""Streaming per-sequence packing: :func:`pack_stream` and :class:`PackStream`."""
from __future__ import annotations

from typing import Any, Callable, Iterable

from .._deprecation import deprecate_positional_args
from .._kernels.splitmix import GAMMA
from .._validate import (
    as_bool,
    as_depth,
    as_lengths,
    as_nonnegative_int,
    as_positive_int,
    as_seed,
    seed_to_int64,
)
from ._iterator import _check_state, _Source


class PackStream:
    """Iterator returned by :func:`pack_stream`: packs (lists of items), checkpointable.

    ``getstate()`` is ``{'source_state', 'window', 'num_served', 'packlib_config'}`` — the
    source's state at the start of the current window, the window's number, and how many of
    its packs were served; ``setstate`` rewinds the source, re-packs the window and skips.
    """

    def __init__(self, source, max_sequence_length, read_ahead, key, method, max_sequences_per_pack, seed, shuffle):
        from .. import methods

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
        from .. import methods

        packer = methods.get(self._method, kind="sequence")._run  # each window's lengths are checked below
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
            from .._kernels.rng import permutation

            s = (self._seed + (window + 1) * GAMMA) % 2**64
            packs = packs.take(permutation(packs.num_packs, seed_to_int64(s)))
        ix, off = packs.indices.tolist(), packs.offsets.tolist()
        return [[items[i] for i in ix[off[p] : off[p + 1]]] for p in range(len(off) - 1)]

    def __repr__(self) -> str:
        f = self._fingerprint
        return f"PackStream(max_sequence_length={f['max_sequence_length']}, read_ahead={f['read_ahead']}, method={f['method']!r})"


@deprecate_positional_args(names=("read_ahead", "key", "method", "max_sequences_per_pack", "seed"))
def pack_stream(
    source: Iterable,
    max_sequence_length: int,
    *,
    read_ahead: int,
    key: Callable[[Any], int] = len,
    method: str = "bfd",
    max_sequences_per_pack: int | None = None,
    seed: int = 0,
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
    max_sequences_per_pack : int or None, default None
        Depth limit (``None``: unlimited).
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
    works until packlib 0.4, with a ``DeprecationWarning``; then the third positional
    argument becomes ``max_sequences_per_pack``.

    See Also
    --------
    bucket : batches of similar length instead of packs.
    packlib.bfd_pack : the same packing of a whole array at once.

    Examples
    --------
    >>> [[len(s) for s in p] for p in pack_stream(["aaa", "bb", "c", "dddd"], 5, read_ahead=4, shuffle=False)]
    [[4, 1], [3, 2]]
    """
    return PackStream(source, max_sequence_length, read_ahead, key, method, max_sequences_per_pack, seed, shuffle)
