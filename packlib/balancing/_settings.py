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
    as_int_array,
    as_lengths,
    as_matrix,
    as_nonnegative_int,
    as_positive_int,
    as_seed,
    check_total,
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

    lengths: np.ndarray  # int64, every sample's tokens (a group's: laid out), each in [1, max_sequence_length]
    max_sequence_length: int
    max_sequences_per_pack: int | None  # None: unlimited
    world_size: int
    micro_batches: int
    cost: tuple  # (a, b): a sequence of l tokens costs a*l + b*l**2
    window: int
    seed: int
    epoch: int
    drop_last: bool
    group_lengths: np.ndarray | None = None  # int64 (n, k): each group's sequence lengths (0: absent)
    shared_prompt_lengths: np.ndarray | None = None  # int64 (n,): each group's prompt, laid out once
    extra_costs: np.ndarray | None = None  # float64 (n,): each sample's cost besides its tokens' (its images')
    padded: bool = False  # micro-batches of unpacked, right-padded sequences (n x longest tokens)


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


def as_groups(lengths, L: int, shared_prompt_lengths):
    """2-D ``lengths`` (row i: group i's sequence lengths, 0 for an absent member) checked:
    ``(tokens laid out per group, the (n, k) lengths, the prompts or None)``."""
    m = as_matrix(lengths, "lengths", np.int64)
    if m.size == 0:
        raise ValueError(f"lengths of shape {m.shape} is empty: give the sequence lengths of every group of the epoch")
    if (m < 0).any():
        i, j = (int(x) for x in np.argwhere(m < 0)[0])
        raise ValueError(f"lengths[{i}, {j}] = {m[i, j]} is negative: group {i}'s sequence lengths must be >= 0 "
                         "(0 for an absent member)")
    present = m > 0
    if (~present.any(axis=1)).any():
        i = int(np.flatnonzero(~present.any(axis=1))[0])
        raise ValueError(f"lengths[{i}] is all zeros: group {i} has no sequence; drop it from the epoch, or give "
                         "its sequences' lengths")
    check_total(exact_sum(m.reshape(-1)), "lengths", "number of tokens")
    tokens = m.sum(axis=1)
    prompts = None
    if shared_prompt_lengths is not None:
        prompts = as_int_array(shared_prompt_lengths, "shared_prompt_lengths", minimum=1)
        if prompts.size != m.shape[0]:
            raise ValueError(f"shared_prompt_lengths holds {prompts.size} values for {m.shape[0]} groups: give one "
                             "prompt length per row of lengths")
        short = present & (m <= prompts[:, None])
        if short.any():
            i, j = (int(x) for x in np.argwhere(short)[0])
            raise ValueError(f"lengths[{i}, {j}] = {m[i, j]} is not longer than shared_prompt_lengths[{i}] = "
                             f"{prompts[i]}: each length is its group's prompt plus a completion of at least one "
                             "token")
        tokens = tokens - (present.sum(axis=1) - 1) * prompts
    if (tokens > L).any():
        i = int(np.flatnonzero(tokens > L)[0])
        raise ValueError(f"group {i} lays out {int(tokens[i]):,} tokens (lengths[{i}] = {m[i].tolist()}), over "
                         f"max_sequence_length = {L:,}: a group is never split across micro-batches; drop or "
                         "truncate it, or raise max_sequence_length")
    return tokens, m, prompts


def item_costs(s: BalanceSettings) -> np.ndarray:
    """Each sample's cost (float64): ``a * l + b * l**2``; a group's, the sum of its
    sequences' costs, less ``(k - 1)`` times its shared prompt's; plus its ``extra_costs``."""
    from .._kernels.balance import sequence_costs

    a, b = s.cost
    if s.group_lengths is None:
        costs = sequence_costs(s.lengths, a, b)
        return costs if s.extra_costs is None else costs + s.extra_costs
    m = s.group_lengths
    per = sequence_costs(m.reshape(-1), a, b).reshape(m.shape)
    per[m == 0] = 0.0
    costs = per.sum(axis=1)
    if s.shared_prompt_lengths is not None:
        shared = (m > 0).sum(axis=1) - 1
        costs -= shared * sequence_costs(s.shared_prompt_lengths, a, b)
    return costs if s.extra_costs is None else costs + s.extra_costs


def balance_settings(lengths, max_sequence_length, max_sequences_per_pack, *, world_size, micro_batches, cost,
                     window, seed, epoch, drop_last, shared_prompt_lengths=None, extra_costs=None,
                     padded=False) -> BalanceSettings:
    """Every argument of :func:`packlib.balance`, checked once."""
    from ..packing import MAX_BFD_LENGTH

    L = as_positive_int(max_sequence_length, "max_sequence_length")
    padded = as_bool(padded, "padded")
    try:
        two_d = np.ndim(lengths) == 2
    except (ValueError, TypeError):  # ragged: as_lengths says what is wrong
        two_d = False
    if padded and (two_d or shared_prompt_lengths is not None):
        raise ValueError("padded=True plans one right-padded row per sequence (packlib.torch.PaddedCollator), which "
                         "lays out text samples, not groups: 2-D lengths and shared_prompt_lengths (preference pairs, "
                         "a prompt laid out once) are not supported with it; pass 1-D lengths, one per sequence")
    groups = prompts = None
    if two_d:
        lens, groups, prompts = as_groups(lengths, L, shared_prompt_lengths)
    elif shared_prompt_lengths is not None:
        raise ValueError("shared_prompt_lengths needs 2-D lengths (n groups x k sequences, each prompt + completion)")
    else:
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
    extra = None if extra_costs is None else as_extra_costs(extra_costs, lens.size)
    return BalanceSettings(lens, L, as_depth(max_sequences_per_pack), W, M, as_cost(cost), window, as_seed(seed),
                           as_nonnegative_int(epoch, "epoch"), drop_last, groups, prompts, extra, padded)


def as_extra_costs(extra_costs, n: int) -> np.ndarray:
    """``extra_costs`` checked: ``n`` finite costs ``>= 0`` (float64)."""
    extra = as_float_array(extra_costs, "extra_costs")
    if extra.ndim != 1 or extra.size != n:
        raise ValueError(f"extra_costs holds {extra.size} values for {n} samples: give one cost per sample")
    if (extra < 0).any():
        i = int(np.flatnonzero(extra < 0)[0])
        raise ValueError(f"extra_costs[{i}] = {extra[i]} is negative: every sample's extra cost must be >= 0")
    return extra


def epoch_seed(seed: int, epoch: int):
    """The seed of ``epoch``'s shuffle (the kernels' int64 form)."""
    return seed_to_int64((seed + epoch * GAMMA) % 2**64)
