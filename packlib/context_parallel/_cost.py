"""The cost of a sequence split over a context-parallel group, the CP sizes Megatron's
groups allow, and the lower bounds of a step's critical path."""
from __future__ import annotations

import numpy as np

from .._validate import as_float_array

#: ``(a, b, e)`` when no cost is given: ``transformer_cost(4096)`` and an exchange term of
#: 0.05 of a token's linear cost per token sent (between NVLink and InfiniBand rates).
DEFAULT_COST = (1.0, 1.0 / (12 * 4096), 0.05)


def as_cp_cost(cost) -> tuple[float, float, float]:
    """``cost`` as ``(a, b, e)``: ``(a, b)`` gets ``e = 0``; ``None`` is :data:`DEFAULT_COST`."""
    if cost is None:
        return DEFAULT_COST
    if isinstance(cost, (str, bytes)) or not hasattr(cost, "__len__"):
        raise TypeError(f"cost must be a tuple (a, b) or (a, b, e) of floats, got {type(cost).__name__} {cost!r}")
    values = as_float_array(list(cost), "cost")
    if values.size not in (2, 3):
        raise ValueError(f"cost must be (a, b) or (a, b, e), got {values.size} values {tuple(values)}")
    if (values < 0).any() or values[:2].sum() <= 0:
        raise ValueError(f"cost = {tuple(float(v) for v in values)} must be >= 0, with a or b > 0")
    a, b = float(values[0]), float(values[1])
    return a, b, (float(values[2]) if values.size == 3 else 0.0)


def allowed_sizes(world_size: int, min_cp_size: int) -> np.ndarray:
    """The CP sizes Megatron-LM builds groups for (``create_dynamic_dp_cp_groups`` in its
    ``parallel_state.py``): the powers of two from ``min_cp_size`` below
    ``2**floor(log2(world_size))``, and ``world_size`` itself (int64, ascending). Where
    ``world_size`` is not a power of two, the largest power of two below it is not one of
    them (``world_size = 12``: 1, 2, 4 and 12, never 8).

    >>> allowed_sizes(12, 1).tolist(), allowed_sizes(16, 2).tolist()
    ([1, 2, 4, 12], [2, 4, 8, 16])
    """
    top = 1 << (int(world_size).bit_length() - 1)  # 2**floor(log2(world_size))
    sizes = [1 << k for k in range(top.bit_length()) if min_cp_size <= (1 << k) < top]
    return np.array(sizes + [world_size], dtype=np.int64)


def check_min_cp_size(min_cp_size: int, world_size: int, name: str = "world_size") -> None:
    """Refuse a ``min_cp_size`` Megatron builds no group for: above ``world_size`` (given
    as ``name``), or not one of :func:`allowed_sizes` (its dynamic scheduler would ask for a
    group of that size and find none)."""
    sizes = allowed_sizes(world_size, 1).tolist()
    if min_cp_size > world_size:
        raise ValueError(f"min_cp_size = {min_cp_size} > {name} = {world_size}: no CP group is that large; "
                         f"choose one of the sizes Megatron builds there, {sizes}")
    if min_cp_size not in sizes:
        raise ValueError(f"min_cp_size = {min_cp_size} is not a CP size Megatron builds at {name} = {world_size} "
                         f"(the powers of two below {1 << (world_size.bit_length() - 1)} and {world_size} itself: "
                         f"{sizes}); choose one of them")


def seq_cost(lengths: np.ndarray, cp: np.ndarray, cost) -> np.ndarray:
    """Each GPU's cost of a sequence of ``l`` tokens on a CP group of ``c`` GPUs:
    ``(a·l + b·l²) / c + e·l·(c − 1) / c`` (float64)."""
    a, b, e = cost
    ln = np.asarray(lengths, dtype=np.float64)
    c = np.asarray(cp, dtype=np.float64)
    return (a * ln + b * ln * ln + e * ln * (c - 1.0)) / c


def min_sizes(lengths: np.ndarray, capacity: int, sizes: np.ndarray) -> np.ndarray:
    """The smallest allowed CP size whose GPUs hold each sequence (``c · capacity >= l``)."""
    need = -(-lengths // capacity)
    return sizes[np.searchsorted(sizes, need)]


def _sizes_for(lengths, cmin, sizes, cost, limit):
    """Each sequence's smallest allowed size ``>= cmin`` whose per-GPU cost is ``<= limit``,
    and that cost; ``-1`` where no size is fast enough."""
    grid = np.broadcast_to(sizes, (lengths.size, sizes.size))
    per_gpu = seq_cost(lengths[:, None], grid, cost)
    ok = (grid >= cmin[:, None]) & (per_gpu <= limit)
    first = np.where(ok.any(axis=1), ok.argmax(axis=1), -1)
    c = np.where(first >= 0, sizes[np.maximum(first, 0)], -1)
    return c, per_gpu[np.arange(lengths.size), np.maximum(first, 0)]


def lower_bounds(lengths: np.ndarray, capacity: int, sizes: np.ndarray, cost) -> tuple[float, float]:
    """``(simple, tight)`` lower bounds of any step's critical path.

    simple: ``max(Σ_i c_i·t(l_i, c_i) / G, max_i min_c t(l_i, c))`` with ``c_i`` the smallest
    size that holds sequence ``i`` (the GPU-time of a sequence, ``c·t(l, c) = a·l + b·l² +
    e·l·(c − 1)``, grows with ``c``, so the smallest size spends the least).

    tight: the least ``T`` with ``Σ_i c_i(T)·t(l_i, c_i(T)) / G <= T``, where ``c_i(T)`` is
    the smallest size that holds sequence ``i`` *and* runs it in at most ``T``: a step
    finishing by ``T`` runs every sequence on at least that size, so its GPUs spend at
    least that much in all, and some GPU at least the mean. The left side only falls as
    ``T`` grows, so the least such ``T`` is found by bisection over the breakpoints.
    """
    G = float(sizes[-1])
    if lengths.size == 0:
        return 0.0, 0.0
    cmin = min_sizes(lengths, capacity, sizes)
    total = float((cmin * seq_cost(lengths, cmin, cost)).sum())
    grid = seq_cost(lengths[:, None], sizes[None, :], cost)
    longest = float(np.where(sizes[None, :] >= cmin[:, None], grid, np.inf).min(axis=1).max())
    simple = max(total / G, longest)

    def spend(limit):
        c, t = _sizes_for(lengths, cmin, sizes, cost, limit)
        return np.inf if (c < 0).any() else float((c * t).sum()) / G

    lo = simple
    if spend(lo) <= lo:
        return simple, lo
    hi = max(longest, spend(longest))
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if spend(mid) <= mid else (mid, hi)
    return simple, hi
