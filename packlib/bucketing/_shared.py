"""Helpers shared by the iterator, :func:`bucket` and :func:`pack_stream`: sharding, the
Mersenne Twister state, the window order."""
from __future__ import annotations

import numbers
import random

import numpy as np

from .._validate import (
    as_choice,
    as_int,
    as_positive_int,
)

_REMAINDERS = ("repeat", "drop")
# Below this many batches per window, Python's own Random.shuffle is cheaper than moving the
# Mersenne Twister state into the kernel and back.
_KERNEL_SHUFFLE_MIN = 768


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
    from .._kernels.bucket import mt_shuffle

    st, mt, pos = _mt_arrays(rnd)
    perm = np.arange(len(x))
    mt_shuffle(perm, mt, pos)
    _mt_restore(rnd, st, mt, pos)
    return [x[i] for i in perm.tolist()]


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
        from .._kernels.bucket import counting_scratch, sort_desc

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
