"""The planner of :func:`balance`: windows of the shuffled epoch packed into rows, dealt
to ranks and steps, and put in an order that keeps the epoch's mean length (the package's
docs tell the steps)."""
from __future__ import annotations

import numpy as np

from .._packs import Packs
from .._validate import readonly
from ._padded import run_padded
from ._schedule import Schedule
from ._settings import DEFAULT_WINDOW, BalanceSettings, balance_settings, epoch_seed, item_costs

_ROUNDS_PER_RANK = 8  # exchange rounds per step: this many times the ranks ...
_MAX_ROUNDS = 512  # ... up to this many (each round scans the step's sequences)
# the window's packing: sequences under L / _SMALL tokens are the short ones spread over the
# rows; their reserve is searched in steps of 1 / 2**_RESERVE_STEP of the even spread, from
# the last window's (so most windows pack twice), allowing the packing one row per _SLACK
# rows of the window more than the tokens need (carried to the next window)
_SMALL = 8
_RESERVE_STEP = 5
_SLACK = 512


def balance(lengths, max_sequence_length, max_sequences_per_pack=None, *, world_size, micro_batches=1,
            cost=(1.0, 0.0), window=DEFAULT_WINDOW, seed=0, epoch=0, drop_last=True,
            shared_prompt_lengths=None, extra_costs=None, padded=False) -> Schedule:
    """Plan one epoch as compute-balanced steps (see the module docs).

    Parameters
    ----------
    lengths : array_like of int
        Tokens of every sample of the epoch (sample ids are positions), each in
        ``[1, max_sequence_length]``. Or 2-D, shape ``(n, k)``: row ``i`` holds the sequence
        lengths of group ``i`` (a preference pair: ``prompt + chosen``, ``prompt + rejected``;
        0 for an absent member); sample ids are then group ids, a group is never split, its
        tokens are the sum of its lengths and its cost the sum of its sequences' costs.
    max_sequence_length : int
        Tokens per packed row.
    max_sequences_per_pack : int or None, default None
        At most this many samples (groups, with 2-D lengths) per row (``None``: unlimited).
    world_size : int
        Data-parallel ranks.
    micro_batches : int, default 1
        Packed rows per rank per step (gradient accumulation).
    cost : pair of float, default (1.0, 0.0)
        ``(a, b)``: a sequence of ``l`` tokens costs ``a * l + b * l**2``; the default
        balances tokens. :func:`transformer_cost` gives it for a transformer.
    window : int, default 16
        Steps within which samples may be reordered; longer windows balance better, shorter
        ones keep the shuffled order closer (docs/balance.md).
    seed, epoch : int, default 0
        The epoch's shuffle; the same lengths, settings, seed and epoch give the same
        schedule in every process.
    drop_last : bool, default True
        ``True``: the samples that do not fill a last whole step (at most one step's worth)
        are left out and listed in ``Schedule.dropped``. ``False``: a last step filled as
        well as it can be, with ``micro_batches`` (possibly empty) rows on every rank.
    shared_prompt_lengths : array_like of int, optional
        With 2-D lengths whose groups lay their prompt out once (``PackedCollator(
        share_prompt=True)``): each group's prompt length, shape ``(n,)``. A group then lays
        out ``sum(l) - (k - 1) * p`` tokens and costs ``(k - 1)`` prompt costs less.
    extra_costs : array_like of float, optional
        Each sample's cost besides its tokens' (in the unit of ``cost``), shape ``(n,)``:
        the vision encoder's work on its images (:func:`vision_cost`), say. A sample then
        costs ``a * l + b * l**2 + extra_costs[i]``.
    padded : bool, default False
        Plan micro-batches of unpacked sequences, one right-padded row each
        (:class:`packlib.torch.PaddedCollator`, for models that cannot pack): a micro-batch
        of ``n`` sequences whose longest has ``m`` tokens lays out ``n * m`` tokens, at most
        ``max_sequence_length``, and costs ``n * (a * m + b * m**2)``; each window's samples
        are sorted by length and cut into micro-batches of similar lengths, which are then
        balanced across ranks by that cost (``Schedule.computed_tokens`` counts the padding).
        1-D ``lengths`` only (no groups or shared prompts).

    Returns
    -------
    Schedule

    See Also
    --------
    round_robin : the baseline, packs dealt to ranks in turn.
    BalancedBatchSampler : one rank's micro-batches of this schedule, for a DataLoader.
    transformer_cost, fit_cost : the cost coefficients.

    References
    ----------
    .. [1] R. L. Graham, "Bounds on multiprocessing timing anomalies", SIAM Journal on Applied
       Mathematics 17(2), 1969 (longest processing time first, how loads are dealt to ranks).
    """
    settings = balance_settings(lengths, max_sequence_length, max_sequences_per_pack, world_size=world_size,
                                micro_batches=micro_batches, cost=cost, window=window, seed=seed, epoch=epoch,
                                drop_last=drop_last, shared_prompt_lengths=shared_prompt_lengths,
                                extra_costs=extra_costs, padded=padded)
    return plan(settings)


def plan(s: BalanceSettings) -> Schedule:
    """The schedule of checked settings (:func:`balance` after its checks)."""
    from .._kernels.rng import permutation

    order = permutation(s.lengths.size, epoch_seed(s.seed, s.epoch))
    costs = item_costs(s)
    planner = _Planner(s.lengths, costs, s.max_sequence_length, s.max_sequences_per_pack, s.world_size,
                       s.micro_batches, s.window, s.seed, s.epoch)
    if s.padded:
        shares = run_padded(planner, order, s.drop_last, s.cost, s.extra_costs)
        return planner.schedule(s.cost, s.drop_last, readonly(shares), padded=True)
    planner.run(order, s.drop_last)
    plain = s.group_lengths is None and s.extra_costs is None
    return planner.schedule(s.cost, s.drop_last, None if plain else readonly(costs))


class _Planner:
    """Windows of the shuffled epoch -> steps (the kernels do the work)."""

    def __init__(self, lens, costs, L, depth, W, M, window, seed, epoch):
        self.lens, self.costs, self.L, self.depth, self.W, self.M = lens, costs, L, depth, W, M
        self.window, self.seed, self.epoch = window, seed, epoch
        self.offsets, self.items, self.rank_cost, self.dropped = [np.zeros(1, np.int64)], [], [], []
        self.n_items = 0
        self.mean_length = float(lens.sum()) / lens.size
        # samples scheduled so far minus tokens so far / mean length, across windows
        self.deviation = 0.0
        # the last window's reserve for short sequences / its even spread (-1: none), and
        # whether the next window tests for dense rows (a plain packing) before spreading
        self.spread = (-1.0, True)

    def run(self, order: np.ndarray, drop_last: bool) -> None:
        lens, rows_per_window = self.lens, self.window * self.W * self.M
        capacity = rows_per_window * self.L
        csum = np.cumsum(lens[order])
        carry = np.zeros(0, np.int64)
        start, w = 0, 0
        while start < order.size or carry.size:
            budget = capacity - int(lens[carry].sum())
            base = int(csum[start - 1]) if start else 0
            stop = int(np.searchsorted(csum, base + budget, side="right"))
            ids = np.concatenate((carry, order[start:stop]))
            start = max(stop, start)
            last = start >= order.size
            carry = self.window_steps(ids, rows_per_window, last, drop_last, w)
            w += 1
            if last and carry.size:  # what the last window could not place
                self.dropped.append(carry)
                carry = carry[:0]

    def window_steps(self, ids, n_rows, last, drop_last, w):
        """Pack the window's samples into ``n_rows`` rows, balance its steps and append
        them; returns the samples left for the next window."""
        lens = self.lens[ids]
        L = max(1, min(self.L, int(lens.sum())))
        depth = self.L if self.depth is None else self.depth  # the kernels' "no limit": L
        (offsets, idx), *self.spread = _spread_pack(lens, L, depth, n_rows, *self.spread)
        rows = offsets.size - 1
        step_rows = self.W * self.M
        tail = ids[:0]
        if last:  # the last window: as many steps as it fills
            n_rows = (rows // step_rows if drop_last else -(-rows // step_rows)) * step_rows
            if 0 < n_rows < rows:  # left out: the window's last samples in the shuffled order (not
                # the rows of fewest tokens, which would leave out short samples, and the
                # end of the epoch long)
                cut = int(np.searchsorted(np.cumsum(lens), n_rows * L, side="right"))
                ids, tail, lens = ids[:cut], ids[cut:], lens[:cut]
                (offsets, idx), *self.spread = _spread_pack(lens, L, depth, n_rows, *self.spread)
        keep, carry = _keep_rows(offsets, idx, lens, n_rows)
        carry_ids = np.sort(np.concatenate((ids[carry], tail))) if carry.size + tail.size else ids[:0]
        if n_rows == 0:
            return carry_ids
        offsets, it = keep  # it: window positions of the kept items, in row order
        self.steps(ids[it], offsets, lens[it], self.costs[ids[it]], n_rows, min(_ROUNDS_PER_RANK * self.W, _MAX_ROUNDS),
                   self.window_state(w))
        return carry_ids

    def window_state(self, w):
        """Window ``w``'s own generator: ties, rank labels, round and step order, sequences in rows."""
        from .._kernels.rng import stream_seed

        return np.array([stream_seed(epoch_seed(self.seed, self.epoch), 1 + w)], np.uint64)

    def steps(self, item_ids, offsets, lens, costs, n_rows, rounds, state):
        """Deal a window's rows (CSR ``offsets`` over its items, in row order) to the steps and
        ranks of ``n_rows`` rows, with ``rounds`` exchanges per step, and append the steps."""
        from .._kernels.balance import balance_window, shuffled_balanced_order

        depth = self.L if self.depth is None else self.depth
        step_rows = self.W * self.M
        slot_off, slot_items, rank_cost = balance_window(offsets, lens, costs, n_rows, self.W, self.M, self.L, depth,
                                                         rounds, state)
        steps = n_rows // step_rows
        # the window's steps in a random order in which every run of them keeps the epoch's
        # mean sequence length (steps of long and of short sequences alternate, drawn at
        # random from each side): any part of the epoch keeps the epoch's mean, though the
        # window sorted its rows by cost
        counts = np.diff(slot_off).reshape(steps, step_rows).sum(axis=1)
        csum = np.concatenate(([0], np.cumsum(lens[slot_items])))
        tokens = csum[slot_off[1:]] - csum[slot_off[:-1]]
        perm, self.deviation = shuffled_balanced_order(counts, tokens.reshape(steps, step_rows).sum(axis=1),
                                                       self.mean_length, self.deviation, state)
        self._append(item_ids, slot_off, slot_items, rank_cost, perm, step_rows)

    def _append(self, item_ids, slot_off, slot_items, rank_cost, perm, step_rows):
        from .._kernels.csr import csr_take

        order = (perm[:, None] * step_rows + np.arange(step_rows)[None, :]).reshape(-1)
        off, ix, _ = csr_take(slot_off, slot_items, slot_items, order)
        self.offsets.append(off[1:] + self.n_items)
        self.items.append(item_ids[ix])
        self.n_items += ix.size
        self.rank_cost.append(rank_cost[perm])

    def schedule(self, cost, drop_last, sample_costs=None, padded=False) -> Schedule:
        offsets = np.concatenate(self.offsets)
        items = np.concatenate(self.items) if self.items else np.zeros(0, np.int64)
        packs = Packs._unchecked(offsets, items, self.lens[items], self.L, self.depth)
        rank_cost = np.concatenate(self.rank_cost) if self.rank_cost else np.zeros((0, self.W))
        dropped = np.sort(np.concatenate(self.dropped)) if self.dropped else np.zeros(0, np.int64)
        if packs.num_packs == 0:
            raise ValueError(f"the {self.lens.size:,} samples fill no whole step of {self.W} ranks x {self.M} "
                             "micro-batches; pass drop_last=False, or use fewer ranks or micro-batches")
        return Schedule(packs, packs.num_packs // (self.W * self.M), self.W, self.M, readonly(dropped),
                        readonly(rank_cost), self.L, self.depth, tuple(cost), self.seed, self.epoch, self.window,
                        sample_costs, padded)


def _spread_pack(lens, L, depth, n_rows, guess, check):
    """The window's rows: best-fit decreasing, the short sequences spread over the rows (the
    search for their reserve warm-started from the last window's, ``guess``; ``check``: test
    for dense rows first). Returns CSR ``(offsets, items)``, this window's reserve and
    whether the next window tests."""
    from .._kernels.spread import spread_bfd

    rows = min(n_rows, -(-int(lens.sum()) // L)) + n_rows // _SLACK
    return spread_bfd(lens, L, depth, max(1, L // _SMALL), rows, _RESERVE_STEP, guess, check)


def _keep_rows(offsets, idx, lens, n_rows):
    """Keep at most ``n_rows`` rows (those with the most tokens, in packing order); the
    samples of the others wait. Returns ``((offsets, items), carried window positions)``."""
    rows = offsets.size - 1
    if rows <= n_rows:
        return (offsets, idx), idx[:0]
    tokens = np.add.reduceat(lens[idx], offsets[:-1]) if idx.size else np.zeros(rows, np.int64)
    by_tokens = np.argsort(-tokens, kind="stable")
    kept = np.sort(by_tokens[:n_rows])
    sizes = np.diff(offsets)
    keep_mask = np.zeros(rows, bool)
    keep_mask[kept] = True
    row_of_item = np.repeat(np.arange(rows), sizes)
    kept_items = idx[keep_mask[row_of_item]]
    carried = idx[~keep_mask[row_of_item]]
    new_off = np.concatenate(([0], np.cumsum(sizes[kept]))).astype(np.int64)
    return (new_off, kept_items), carried
