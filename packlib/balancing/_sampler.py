""":class:`BalancedBatchSampler`: one rank's micro-batches of a :func:`packlib.balance`
schedule, as a ``batch_sampler`` for ``torch.utils.data.DataLoader`` (packlib does not
import torch: a batch sampler is any iterable of lists of indices with a ``len()``).

Every rank builds the same schedule from the same lengths, seed and epoch, alone, at
start-up; each then yields its own micro-batches, ``micro_batches`` per step, the same
number on every rank. ``state_dict()`` / ``load_state_dict()`` resume exactly mid-epoch.

>>> import numpy as np
>>> lengths = np.random.default_rng(0).integers(1, 512, 1000)
>>> samplers = [BalancedBatchSampler(lengths, 512, rank=r, world_size=2, micro_batches=2) for r in range(2)]
>>> len(samplers[0]) == len(samplers[1])
True
>>> first = next(iter(samplers[0]))     # rank 0, step 0, micro-batch 0: sample ids
>>> int(sum(lengths[first])) <= 512
True
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

from ._planner import plan
from ._settings import DEFAULT_WINDOW, as_rank, balance_settings

__all__ = ["BalancedBatchSampler"]

# 2: issue 29's planner (spread packing, seeded order): a version-1 state's position is in
# another schedule of the same settings
_STATE_VERSION = 2


class BalancedBatchSampler:
    """Rank ``rank``'s micro-batches (lists of sample ids) of the balanced schedule of
    ``lengths``, in training order.

    Parameters
    ----------
    lengths, max_sequence_length, max_sequences_per_pack
        As for :func:`packlib.balance`.
    rank : int
        This process's data-parallel rank, in ``[0, world_size)``.
    world_size : int
        Data-parallel ranks.
    micro_batches : int, default 1
        Micro-batches per rank per step (gradient accumulation): one step is that many
        consecutive items of this sampler.
    cost, window, seed, drop_last
        As for :func:`packlib.balance`; ``cost`` defaults to tokens, ``(1.0, 0.0)``.
    shared_prompt_lengths : array_like of int, optional
        As for :func:`packlib.balance` (with 2-D ``lengths``, whose items are then group ids).

    Notes
    -----
    ``set_epoch(epoch)`` before each epoch, as with ``DistributedSampler``: the schedule of
    each epoch is a new shuffle. ``len()`` is the number of micro-batches of the current
    epoch, equal on every rank. Each iteration starts the epoch from its beginning, except
    the first after :meth:`load_state_dict`, which starts where the state was taken.
    """

    def __init__(self, lengths, max_sequence_length, max_sequences_per_pack=None, *, rank, world_size,
                 micro_batches=1, cost=(1.0, 0.0), window=None, seed=0, drop_last=True, shared_prompt_lengths=None):
        window = DEFAULT_WINDOW if window is None else window
        self._settings = balance_settings(lengths, max_sequence_length, max_sequences_per_pack,
                                          world_size=world_size, micro_batches=micro_batches, cost=cost,
                                          window=window, seed=seed, epoch=0, drop_last=drop_last,
                                          shared_prompt_lengths=shared_prompt_lengths)
        self._W, self._M = self._settings.world_size, self._settings.micro_batches
        self.rank = as_rank(rank, self._W)
        self.world_size, self.micro_batches = self._W, self._M
        self.epoch = 0
        self._position = 0  # micro-batches of this epoch already yielded
        self._resume = 0  # where the next iteration starts (set by load_state_dict)
        self._schedule = None
        self._fingerprint = self._make_fingerprint()

    # -- the schedule ---------------------------------------------------------------------
    @property
    def schedule(self):
        """The whole :class:`~packlib.Schedule` of the current epoch (every rank's)."""
        if self._schedule is None:
            self._schedule = plan(self._settings._replace(epoch=self.epoch))
        return self._schedule

    def set_epoch(self, epoch: int) -> None:
        """Use the schedule of ``epoch`` from now on (from its start).

        Parameters
        ----------
        epoch : int
            ``>= 0``.
        """
        from .._validate import as_nonnegative_int

        epoch = as_nonnegative_int(epoch, "epoch")
        if epoch != self.epoch:
            self.epoch, self._schedule = epoch, None
        self._position = self._resume = 0

    def __len__(self) -> int:
        return self.schedule.num_steps * self._M

    def __iter__(self):
        start, self._resume = self._resume, 0
        self._position = start
        return self._micro_batches(start)

    def _micro_batches(self, start: int):
        s = self.schedule
        o, ix, W, M, r = s.packs.offsets, s.packs.indices, self._W, self._M, self.rank
        for i in range(start, s.num_steps * M):
            step, m = divmod(i, M)
            k = (step * W + r) * M + m
            self._position = i + 1
            yield ix[o[k]:o[k + 1]].tolist()

    # -- checkpoints ----------------------------------------------------------------------
    def _make_fingerprint(self) -> str:
        s = self._settings
        h = hashlib.sha256(np.ascontiguousarray(s.lengths, dtype="<i8").tobytes())
        for groups in (s.group_lengths, s.shared_prompt_lengths):  # 2-D lengths: the groups' make-up
            if groups is not None:
                h.update(repr(groups.shape).encode() + np.ascontiguousarray(groups, dtype="<i8").tobytes())
        h.update(json.dumps([s.max_sequence_length, s.max_sequences_per_pack, s.world_size, s.micro_batches,
                             list(s.cost), s.window, s.seed, s.drop_last]).encode())
        return h.hexdigest()

    def state_dict(self) -> dict:
        """Where this rank is: the epoch and how many micro-batches of it were yielded,
        with a fingerprint of the lengths and settings (checked on load)."""
        return {"version": _STATE_VERSION, "epoch": self.epoch, "position": self._position, "rank": self.rank,
                "fingerprint": self._fingerprint}

    def load_state_dict(self, state: dict) -> None:
        """Resume where :meth:`state_dict` was taken: the next item is the micro-batch that
        would have come next. Refuses a state of other lengths or settings (``ValueError``).

        Parameters
        ----------
        state : dict
            From :meth:`state_dict` of a sampler with the same lengths and settings.
        """
        from .._validate import as_nonnegative_int

        if isinstance(state, dict) and isinstance(state.get("version"), int) and "fingerprint" in state \
                and state["version"] != _STATE_VERSION:
            raise ValueError(f"this state was taken by another version of the planner (state version "
                             f"{state['version']}, this packlib's {_STATE_VERSION}): its schedule differs, so its "
                             "position cannot be resumed here; resume with the packlib that took it, or start "
                             "the epoch again")
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise ValueError(f"not a BalancedBatchSampler state (version {_STATE_VERSION}): {state!r:.120}")
        if state.get("fingerprint") != self._fingerprint:
            raise ValueError("this state was taken with other lengths or settings (max_sequence_length, depth, "
                             "world_size, micro_batches, cost, window, seed or drop_last): it cannot be resumed here")
        if state.get("rank") != self.rank:
            raise ValueError(f"this state is rank {state.get('rank')}'s; this sampler is rank {self.rank}'s")
        epoch = as_nonnegative_int(state.get("epoch"), "state['epoch']")
        position = as_nonnegative_int(state.get("position"), "state['position']")
        self.set_epoch(epoch)
        if position > len(self):
            raise ValueError(f"state['position'] = {position} is past the epoch's {len(self)} micro-batches")
        self._position = self._resume = position

    def __repr__(self) -> str:
        return (f"BalancedBatchSampler(rank {self.rank} of {self._W}, {self._M} micro-batches per step, "
                f"epoch {self.epoch}, {self._settings.lengths.size:,} samples)")


BalancedBatchSampler.__module__ = "packlib"  # pickles and reprs name the public path, which never moves
