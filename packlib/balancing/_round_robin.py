"""The anchor :func:`round_robin` schedules are measured against: packs dealt to ranks in
turn, as a plain distributed sampler does."""
from __future__ import annotations

import numpy as np

from .._packs import Packs
from .._validate import readonly
from ._schedule import Schedule
from ._settings import balance_settings, epoch_seed, item_costs


def round_robin(lengths, max_sequence_length, max_sequences_per_pack=None, *, world_size, micro_batches=1,
                cost=(1.0, 0.0), seed=0, epoch=0, shared_prompt_lengths=None) -> Schedule:
    """The anchor: best-fit-decreasing packs of the whole epoch, shuffled, dealt round-robin
    to the ranks (pack ``j`` to rank ``j % world_size``), as TRL's ``pack_dataset`` followed
    by a ``DistributedSampler`` does; the packs that do not fill a last step are dropped.

    Parameters
    ----------
    lengths, max_sequence_length, max_sequences_per_pack, world_size, micro_batches, cost, seed, epoch
        As for :func:`balance`.
    shared_prompt_lengths : array_like of int, optional
        As for :func:`balance`.

    Returns
    -------
    Schedule

    See Also
    --------
    balance : the compute-balanced schedule this is measured against.
    """
    from .._kernels.csr import csr_take
    from .._kernels.rng import permutation
    from ..packing import _bfd

    s = balance_settings(lengths, max_sequence_length, max_sequences_per_pack, world_size=world_size,
                         micro_batches=micro_batches, cost=cost, window=1, seed=seed, epoch=epoch, drop_last=True,
                         shared_prompt_lengths=shared_prompt_lengths)
    lens, L, depth, W, M, cost, seed, epoch = (s.lengths, s.max_sequence_length, s.max_sequences_per_pack,
                                               s.world_size, s.micro_batches, s.cost, s.seed, s.epoch)
    packs = _bfd(lens, L, depth)
    packs = packs.take(permutation(packs.num_packs, epoch_seed(seed, epoch)))
    steps = packs.num_packs // (W * M)
    j = np.arange(steps * W * M)
    rank, local = j % W, j // W
    slot = ((local // M) * W + rank) * M + local % M
    order = np.empty_like(j)
    order[slot] = j
    off, ix, ln = csr_take(packs.offsets, packs.indices, packs.lengths, order.astype(np.int64))
    costs = item_costs(s)
    c = costs[ix]
    per_pack = np.add.reduceat(c, off[:-1]) if ln.size else np.zeros(order.size)
    per_pack[np.diff(off) == 0] = 0.0
    rank_cost = per_pack.reshape(steps, W, M).sum(axis=2)
    used = np.zeros(lens.size, bool)
    used[ix] = True
    return Schedule(Packs._unchecked(off, ix, ln, L, depth), steps, W, M, readonly(np.flatnonzero(~used)),
                    readonly(rank_cost), L, depth, cost, seed, epoch, 0,
                    None if s.group_lengths is None else readonly(costs))
