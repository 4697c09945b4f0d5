"""The settings of a balanced schedule, checked once: :func:`balance_settings` turns the
arguments of :func:`packlib.balance` (and of :class:`packlib.BalancedBatchSampler` and
:func:`packlib.round_robin`) into a :class:`BalanceSettings` record, or raises."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .._kernels.splitmix import GAMMA
from .._validate import (
    as_bool,
    as_depth,
    as_float_array,
    as_int,
    as_lengths,
    as_nonnegative_int,
    as_positive_int,
    as_seed,
    exact_sum,
    seed_to_int64,
)

#: Steps a window spans (the planner reorders samples only within a window): large enough
#: for every step's rows to find neighbours of similar cost (balance >= 0.99 on the
#: benchmark's workloads), small enough that every tenth of an epoch keeps the epoch's mean
#: length (within 1 % on the same workloads; docs/balance.md measures the trade-off).
DEFAULT_WINDOW = 16
MAX_WINDOW_ROWS = 2**26  # rows of one window (window x world_size x micro_batches)


class BalanceSettings(NamedTuple):
    """Every setting of a balanced schedule, checked (see :func:`packlib.balance`)."""

    lengths: np.ndarray  # int64, every sample's tokens, each in [1, max_sequence_length]
    max_sequence_length: int
    max_sequences_per_pack: int | None  # None: unlimited
    world_size: int
    micro_batches: int
    cost: tuple  # (a, b): a sequence of l tokens costs a*l + b*l**2
    window: int
    seed: int
    epoch: int
    drop_last: bool


def as_rank(r, world_size: int) -> int:
    """``r`` checked as a rank of ``world_size`` ranks (``IndexError`` outside)."""
    r = as_int(r, "rank")
    if not 0 <= r < world_size:
        raise IndexError(f"rank {r} is out of range for world_size = {world_size}: ranks are 0 .. {world_size - 1}")
    return r


def as_cost(cost) -> tuple[float, float]:
    """``cost`` checked as a pair ``(a, b)`` of non-negative floats, not both zero."""
    if isinstance(cost, (str, bytes)) or not hasattr(cost, "__len__") or len(cost) != 2:
        raise TypeError(f"cost must be a pair (a, b): a sequence of l tokens costs a*l + b*l**2; got {cost!r}; "
                        "transformer_cost(hidden_size) gives it for a transformer")
    a, b = (float(x) for x in as_float_array(list(cost), "cost"))
    if a < 0 or b < 0:
        raise ValueError(f"cost must be non-negative, got {(a, b)}")
    if a == 0 and b == 0:
        raise ValueError("cost is (0, 0): every sequence would cost nothing; use (1.0, 0.0) to balance tokens")
    return a, b


def balance_settings(lengths, max_sequence_length, max_sequences_per_pack, *, world_size, micro_batches, cost,
                     window, seed, epoch, drop_last) -> BalanceSettings:
    """Every argument of :func:`packlib.balance`, checked once."""
    from ..packing import MAX_BFD_LENGTH

    L = as_positive_int(max_sequence_length, "max_sequence_length")
    lens = as_lengths(lengths, L)
    if lens.size == 0:
        raise ValueError("lengths is empty: give the length of every sample of the epoch")
    if min(L, exact_sum(lens)) > MAX_BFD_LENGTH:
        raise ValueError(f"max_sequence_length = {L:,} is above what balance supports ({MAX_BFD_LENGTH:,} tokens per "
                         "row: its packer keeps one bucket per free-space value)")
    W = as_positive_int(world_size, "world_size", maximum=2**20)
    M = as_positive_int(micro_batches, "micro_batches", maximum=2**20)
    drop_last = as_bool(drop_last, "drop_last")
    window = as_positive_int(window, "window", maximum=2**20)
    if window * W * M > MAX_WINDOW_ROWS:
        raise ValueError(f"window x world_size x micro_batches = {window} x {W} x {M} rows per window is above the "
                         f"supported {MAX_WINDOW_ROWS:,}; use a smaller window")
    if drop_last and lens.size < W * M:
        raise ValueError(f"{lens.size:,} samples cannot fill one step of {W} ranks x {M} micro-batches with "
                         "drop_last=True; pass drop_last=False, or use fewer ranks or micro-batches")
    return BalanceSettings(lens, L, as_depth(max_sequences_per_pack), W, M, as_cost(cost), window, as_seed(seed),
                           as_nonnegative_int(epoch, "epoch"), drop_last)


def epoch_seed(seed: int, epoch: int):
    """The seed of ``epoch``'s shuffle (the kernels' int64 form)."""
    return seed_to_int64((seed + epoch * GAMMA) % 2**64)
