"""Compute-balanced steps for data-parallel training: every rank equally busy, every step.

With padding-free attention a packed row's cost is not its token count: a sequence of
``l`` tokens costs about ``a * l + b * l**2`` (linear layers, then attention), so a row
holding one 32k-token document costs about twice a row of thirty-two 1k documents, and
data-parallel ranks wait at every optimizer step for the slowest one. :func:`balance`
plans one epoch as steps of ``world_size`` ranks x ``micro_batches`` packed rows in which
every rank's cost is as equal as the data allows, rows stay full (steps keep a near-constant
number of tokens), and the epoch's random order is kept up to a window of steps:

1. the epoch is a seeded shuffle of the samples (``seed``, ``epoch``);
2. it is cut into windows of ``window`` steps' worth of tokens; each window is packed into
   exactly ``window * world_size * micro_batches`` rows by best-fit decreasing, the long
   sequences first into rows filled only up to a reserve for the short ones, which then
   spread over the rows instead of filling rows of their own (a row of a hundred short
   sequences would make its step one of far more sequences than the others); sequences a
   window cannot fit wait for the next one;
3. the window's rows, sorted by cost, are cut into steps of neighbours, dealt to ranks
   (largest first, to the least loaded rank with a free micro-batch), and each step's most
   and least loaded ranks exchange sequences while that evens them out and the rows'
   capacity and depth allow;
4. the window's steps come out in a random order (from the seed) in which every run of
   steps keeps the epoch's mean sequence length: the next step is one of two drawn at random
   (one of many short sequences, one of few long ones), the one that brings the running
   count of sequences closer to tokens so far / mean length. What may be random is: ties
   in cost, which rank takes which load, the order of a step's micro-batch rounds and of
   the sequences in a row. The epoch's order thus keeps no pattern of the planner's: each
   tenth of it is as close to the epoch's mean length as the steps allow.

Every rank computes the same :class:`Schedule` from the same lengths, seed and epoch, in
any process, on any machine, without communicating.

>>> import numpy as np, packlib
>>> lengths = np.clip(np.random.default_rng(0).lognormal(5.5, 1.0, 4000).astype(int), 1, 2048)
>>> s = packlib.balance(lengths, 2048, world_size=4, micro_batches=2, cost=packlib.transformer_cost(1024))
>>> s
Schedule(93 steps x 4 ranks x 2 micro-batches, 3,992 samples, 8 dropped, balance=0.9988, efficiency=0.9988)
>>> [len(mb) for mb in next(s.rank(0))]   # rank 0, first step: its micro-batches of sample ids
[4, 7]
>>> round(s.micro_batch_balance, 4)       # when ranks meet at every micro-batch (FSDP, ZeRO-3)
0.9983
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ._packs import Packs, _html_table
from ._validate import (
    as_bool,
    as_depth,
    as_float_array,
    as_lengths,
    as_nonnegative_int,
    as_positive_int,
    as_seed,
    exact_sum,
    readonly,
    seed_to_int64,
)

__all__ = ["balance", "Schedule", "transformer_cost", "fit_cost", "round_robin"]

#: Steps a window spans (the planner reorders samples only within a window): large enough
#: for every step's rows to find neighbours of similar cost (balance >= 0.99 on the
#: benchmark's workloads), small enough that every tenth of an epoch keeps the epoch's mean
#: length (within 1 % on the same workloads; docs/balance.md measures the trade-off).
DEFAULT_WINDOW = 16
_ROUNDS_PER_RANK = 8  # exchange rounds per step: this many times the ranks ...
_MAX_ROUNDS = 512  # ... up to this many (each round scans the step's sequences)
_MAX_WINDOW_ROWS = 2**26  # rows of one window (window x world_size x micro_batches)
_GOLDEN = 0x9E3779B97F4A7C15
# the window's packing: sequences under L / _SMALL tokens are the short ones spread over the
# rows; their reserve is searched in steps of 1 / 2**_RESERVE_STEP of the even spread, from
# the last window's (so most windows pack twice), allowing the packing one row per _SLACK
# rows of the window more than the tokens need (carried to the next window)
_SMALL = 8
_RESERVE_STEP = 5
_SLACK = 512


def transformer_cost(hidden_size: int, *, causal: bool = True, ffn_multiplier: float = 4.0) -> tuple[float, float]:
    """Cost coefficients ``(a, b)`` of a sequence of ``l`` tokens, ``a * l + b * l**2``, for
    a dense transformer of hidden size ``h`` (per layer, forward; backward scales both terms
    alike, so the ratio holds):

    - linear layers: QKV ``6·h²``, output projection ``2·h²``, MLP ``4·f·h²`` FLOPs per
      token (``f = ffn_multiplier``), i.e. ``(8 + 4·f)·h²·l``;
    - attention: scores and weighted sum ``4·h·l²`` FLOPs, half of it causal.

    Normalised to ``a = 1``: ``b = 4 / ((8 + 4·f)·h)``, halved when causal (``1 / (12·h)``
    for ``f = 4``). Fit ``a`` and ``b`` to measured kernel times when you have them.

    Parameters
    ----------
    hidden_size : int
        The model's hidden size ``h``.
    causal : bool, default True
        Causal attention (a decoder) computes half the scores.
    ffn_multiplier : float, default 4.0
        MLP width over ``h``.

    Returns
    -------
    tuple of float

    Examples
    --------
    >>> transformer_cost(4096)
    (1.0, 2.0345052083333332e-05)
    >>> transformer_cost(4096, causal=False)[1] == 1 / (6 * 4096)
    True
    """
    h = as_positive_int(hidden_size, "hidden_size")
    causal = as_bool(causal, "causal")
    f = float(as_float_array([ffn_multiplier], "ffn_multiplier")[0])
    if f < 0:
        raise ValueError(f"ffn_multiplier must be >= 0, got {f}")
    b = 4.0 / ((8.0 + 4.0 * f) * h)
    return 1.0, (b / 2.0 if causal else b)


def fit_cost(rows, seconds) -> tuple[float, float]:
    """Cost coefficients ``(a, b)`` fitted to measured times of packed rows: a row holding
    sequences of lengths ``l_1 .. l_k`` takes ``a * sum(l) + b * sum(l**2)`` seconds, the
    model :func:`balance` and :class:`~packlib.BalancedBatchSampler` take. Non-negative
    least squares (``scipy.optimize.nnls``) over the rows; time rows of varied make-up
    (one long sequence, many short ones, mixtures) so that both terms show.

    Parameters
    ----------
    rows : sequence of array_like of int
        The timed rows: for each, the lengths of the sequences it holds.
    seconds : array_like of float
        The measured time of each row (one forward and backward, say), ``>= 0``.

    Returns
    -------
    tuple of float
        ``(a, b)``, seconds per token and per squared token, both ``>= 0``.

    Raises
    ------
    ValueError
        An empty row, a negative or non-finite time (naming the row), counts that differ,
        or rows that cannot tell the two terms apart (every row's ``sum(l**2) / sum(l)``
        the same, e.g. rows of single sequences of one length).

    Examples
    --------
    >>> rows = [[4096], [1024] * 4, [256] * 16, [2048, 1024, 512, 512]]
    >>> seconds = [2e-6 * sum(r) + 1e-9 * sum(l * l for l in r) for r in rows]   # a = 2e-6, b = 1e-9
    >>> a, b = fit_cost(rows, seconds)
    >>> round(a / 1e-6, 6), round(b / 1e-9, 6)
    (2.0, 1.0)
    """
    from scipy.optimize import nnls

    if isinstance(rows, (str, bytes)) or not hasattr(rows, "__len__"):
        raise TypeError(f"rows must be a sequence of rows, each the lengths of its sequences; got {type(rows).__name__}")
    secs = as_float_array(seconds, "seconds", allow_empty=False)
    if len(rows) != secs.size:
        raise ValueError(f"{len(rows)} rows but {secs.size} times: give one time per row")
    if (secs < 0).any():
        i = int(np.flatnonzero(secs < 0)[0])
        raise ValueError(f"seconds[{i}] = {secs[i]} is negative: row {i}'s time must be >= 0")
    features = np.empty((secs.size, 2), np.float64)
    for i, row in enumerate(rows):
        lens = as_lengths(row, None, f"rows[{i}]").astype(np.float64)
        if lens.size == 0:
            raise ValueError(f"rows[{i}] is empty: every timed row holds at least one sequence")
        features[i] = lens.sum(), (lens * lens).sum()
    ratio = features[:, 1] / features[:, 0]  # the row's mean length, weighted by tokens
    if ratio.max() <= ratio.min() * (1 + 1e-9):
        raise ValueError(f"the {secs.size} rows cannot determine both a and b: every row has the same "
                         f"sum(l**2) / sum(l) = {ratio[0]:g}, so their features are proportional; time rows of "
                         "different make-up (one long sequence, many short ones)")
    scale = features.max(axis=0)
    coef, _ = nnls(features / scale, secs)
    a, b = (float(x) for x in coef / scale)
    if a == 0 and b == 0:
        raise ValueError("the fit gives a = b = 0 (are the times all zero?): measure the rows' times again")
    return a, b


@dataclass(frozen=True, eq=False, repr=False)
class Schedule:
    """One epoch of balanced steps (see :func:`balance`).

    Attributes
    ----------
    packs : Packs
        Pack ``k = (step * world_size + rank) * micro_batches + m`` is micro-batch ``m`` of
        ``rank`` at ``step`` (possibly empty in the last step with ``drop_last=False``).
    num_steps, world_size, micro_batches : int
    dropped : int64 array
        Sample ids in no pack (``drop_last=True``: at most one step's worth, at the end).
    cost : float64 array, shape ``(num_steps, world_size)``
        Each rank's cost at each step (the sum over its micro-batches).
    max_sequence_length : int
    max_sequences_per_pack : int or None
    cost_coefficients : tuple of float
        ``(a, b)``: a sequence of ``l`` tokens costs ``a * l + b * l**2``.
    seed, epoch, window : int
    """

    packs: Packs
    num_steps: int
    world_size: int
    micro_batches: int
    dropped: np.ndarray
    cost: np.ndarray
    max_sequence_length: int
    max_sequences_per_pack: int | None
    cost_coefficients: tuple
    seed: int = 0
    epoch: int = 0
    window: int = DEFAULT_WINDOW

    @property
    def balance(self) -> float:
        """Total cost / (world_size x the sum over steps of the largest rank cost): the share
        of the ranks' time not spent waiting for the slowest (1.0: perfect)."""
        worst = float(self.cost.max(axis=1).sum()) if self.num_steps else 0.0
        return float(self.cost.sum()) / (self.world_size * worst) if worst > 0 else 1.0

    @property
    def micro_batch_balance(self) -> float:
        """Balance when ranks meet at every micro-batch (FSDP, ZeRO-3: a collective per
        layer, so each micro-batch round waits for its slowest rank): total cost /
        (world_size x the sum over steps and micro-batch rounds ``m`` of the largest cost
        of a rank's micro-batch ``m``). At most :attr:`balance` (1.0: perfect)."""
        if not self.num_steps:
            return 1.0
        a, b = self.cost_coefficients
        ln = self.packs.lengths.astype(np.float64)
        sizes = np.diff(self.packs.offsets)
        per_pack = np.bincount(np.repeat(np.arange(sizes.size), sizes), weights=a * ln + b * ln * ln,
                               minlength=sizes.size)
        worst = float(per_pack.reshape(self.num_steps, self.world_size, self.micro_batches).max(axis=1).sum())
        return float(per_pack.sum()) / (self.world_size * worst) if worst > 0 else 1.0

    @property
    def efficiency(self) -> float:
        """Tokens / (num_steps x world_size x micro_batches x max_sequence_length)."""
        slots = self.num_steps * self.world_size * self.micro_batches * self.max_sequence_length
        return self.packs.num_tokens / slots if slots else 1.0

    @property
    def num_samples(self) -> int:
        """Samples scheduled (not counting ``dropped``)."""
        return self.packs.num_sequences

    def step_tokens(self) -> np.ndarray:
        """Tokens of each step, int64 ``(num_steps,)``."""
        per_pack = self.packs.pack_tokens
        return per_pack.reshape(self.num_steps, -1).sum(axis=1) if self.num_steps else per_pack[:0]

    def rank(self, r: int) -> Iterator[list[np.ndarray]]:
        """Rank ``r``'s steps, in order: for each, its ``micro_batches`` arrays of sample ids.

        Parameters
        ----------
        r : int
            In ``[0, world_size)``.
        """
        r = _as_rank(r, self.world_size)
        W, M, o, ix = self.world_size, self.micro_batches, self.packs.offsets, self.packs.indices
        for step in range(self.num_steps):
            k = (step * W + r) * M
            yield [ix[o[k + m]:o[k + m + 1]] for m in range(M)]

    def to_dict(self) -> dict:
        """A JSON-ready summary (the figures and settings, not the packs)."""
        return {
            "num_steps": self.num_steps, "world_size": self.world_size, "micro_batches": self.micro_batches,
            "num_samples": self.num_samples, "dropped": int(self.dropped.size), "balance": self.balance,
            "micro_batch_balance": self.micro_batch_balance, "efficiency": self.efficiency,
            "max_sequence_length": self.max_sequence_length, "max_sequences_per_pack": self.max_sequences_per_pack, "cost": list(self.cost_coefficients),
            "seed": self.seed, "epoch": self.epoch, "window": self.window,
        }

    def plot(self, baseline: "Schedule | None" = None, ax=None):
        """Cost per rank per step, as a picture (needs the ``plot`` extra); with ``baseline``
        (e.g. :func:`round_robin` of the same lengths), the two side by side.

        Parameters and return value as for :func:`packlib.plot.schedule`."""
        from .plot import schedule as plot_schedule

        return plot_schedule(self, baseline=baseline, ax=ax)

    def __repr__(self) -> str:
        return (f"Schedule({self.num_steps:,} steps x {self.world_size} ranks x {self.micro_batches} micro-batches, "
                f"{self.num_samples:,} samples, {self.dropped.size:,} dropped, balance={self.balance:.4f}, "
                f"efficiency={self.efficiency:.4f})")

    def _repr_html_(self) -> str:
        rows = [("steps × ranks × micro-batches", f"{self.num_steps:,} × {self.world_size} × {self.micro_batches}"),
                ("samples (dropped)", f"{self.num_samples:,} ({self.dropped.size:,})"),
                ("balance", f"{self.balance:.4f}"), ("balance at every micro-batch", f"{self.micro_batch_balance:.4f}"),
                ("token efficiency", f"{self.efficiency:.4f}"),
                ("cost of a sequence", f"{self.cost_coefficients[0]:g}·l + {self.cost_coefficients[1]:.3g}·l²")]
        return _html_table("Schedule", rows)


Schedule.__module__ = "packlib"  # pickles and reprs name the public path, which never moves


def _as_rank(r, world_size: int) -> int:
    from ._validate import as_int

    r = as_int(r, "rank")
    if not 0 <= r < world_size:
        raise IndexError(f"rank {r} is out of range for world_size = {world_size}: ranks are 0 .. {world_size - 1}")
    return r


def _as_cost(cost) -> tuple[float, float]:
    if isinstance(cost, (str, bytes)) or not hasattr(cost, "__len__") or len(cost) != 2:
        raise TypeError(f"cost must be a pair (a, b): a sequence of l tokens costs a*l + b*l**2; got {cost!r}; "
                        "transformer_cost(hidden_size) gives it for a transformer")
    a, b = (float(x) for x in as_float_array(list(cost), "cost"))
    if a < 0 or b < 0:
        raise ValueError(f"cost must be non-negative, got {(a, b)}")
    if a == 0 and b == 0:
        raise ValueError("cost is (0, 0): every sequence would cost nothing; use (1.0, 0.0) to balance tokens")
    return a, b


def _settings(lengths, max_sequence_length, max_sequences_per_pack, world_size, micro_batches, cost, window, seed,
              epoch, drop_last):
    """Every argument of :func:`balance`, checked once."""
    from .packing import MAX_BFD_LENGTH

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
    if window * W * M > _MAX_WINDOW_ROWS:
        raise ValueError(f"window x world_size x micro_batches = {window} x {W} x {M} rows per window is above the "
                         f"supported {_MAX_WINDOW_ROWS:,}; use a smaller window")
    if drop_last and lens.size < W * M:
        raise ValueError(f"{lens.size:,} samples cannot fill one step of {W} ranks x {M} micro-batches with "
                         "drop_last=True; pass drop_last=False, or use fewer ranks or micro-batches")
    return (lens, L, as_depth(max_sequences_per_pack), W, M, _as_cost(cost), window, as_seed(seed),
            as_nonnegative_int(epoch, "epoch"), drop_last)


def balance(lengths, max_sequence_length, max_sequences_per_pack=None, *, world_size, micro_batches=1,
            cost=(1.0, 0.0), window=DEFAULT_WINDOW, seed=0, epoch=0, drop_last=True) -> Schedule:
    """Plan one epoch as compute-balanced steps (see the module docs).

    Parameters
    ----------
    lengths : array_like of int
        Tokens of every sample of the epoch (sample ids are positions), each in
        ``[1, max_sequence_length]``.
    max_sequence_length : int
        Tokens per packed row.
    max_sequences_per_pack : int or None, default None
        At most this many sequences per row (``None``: unlimited).
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

    Returns
    -------
    Schedule
    """
    args = _settings(lengths, max_sequence_length, max_sequences_per_pack, world_size, micro_batches, cost, window,
                     seed, epoch, drop_last)
    return _balance(*args)


def _balance(lens, L, depth, W, M, cost, window, seed, epoch, drop_last) -> Schedule:
    from ._kernels.balance import sequence_costs
    from ._kernels.rng import permutation

    order = permutation(lens.size, _epoch_seed(seed, epoch))
    costs = sequence_costs(lens, cost[0], cost[1])
    planner = _Planner(lens, costs, L, depth, W, M, window, seed, epoch)
    planner.run(order, drop_last)
    return planner.schedule(cost, drop_last)


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
        from ._kernels.balance import balance_window, shuffled_balanced_order
        from ._kernels.rng import stream_seed

        lens = self.lens[ids]
        L = max(1, min(self.L, int(lens.sum())))
        depth = L if self.depth is None else min(self.depth, L)
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
        # window w's own generator: ties, rank labels, round and step order, sequences in rows
        state = np.array([stream_seed(_epoch_seed(self.seed, self.epoch), 1 + w)], np.uint64)
        slot_off, slot_items, rank_cost = balance_window(offsets, lens[it], self.costs[ids[it]], n_rows, self.W,
                                                         self.M, self.L, 0 if self.depth is None else self.depth,
                                                         min(_ROUNDS_PER_RANK * self.W, _MAX_ROUNDS), state)
        steps = n_rows // step_rows
        # the window's steps in a random order in which every run of them keeps the epoch's
        # mean sequence length (steps of long and of short sequences alternate, drawn at
        # random from each side): any part of the epoch keeps the epoch's mean, though the
        # window sorted its rows by cost
        counts = np.diff(slot_off).reshape(steps, step_rows).sum(axis=1)
        csum = np.concatenate(([0], np.cumsum(lens[it][slot_items])))
        tokens = csum[slot_off[1:]] - csum[slot_off[:-1]]
        perm, self.deviation = shuffled_balanced_order(counts, tokens.reshape(steps, step_rows).sum(axis=1),
                                                       self.mean_length, self.deviation, state)
        self._append(ids[it], slot_off, slot_items, rank_cost, perm, step_rows)
        return carry_ids

    def _append(self, item_ids, slot_off, slot_items, rank_cost, perm, step_rows):
        from ._kernels.csr import csr_take

        order = (perm[:, None] * step_rows + np.arange(step_rows)[None, :]).reshape(-1)
        off, ix, _ = csr_take(slot_off, slot_items, slot_items, order)
        self.offsets.append(off[1:] + self.n_items)
        self.items.append(item_ids[ix])
        self.n_items += ix.size
        self.rank_cost.append(rank_cost[perm])

    def schedule(self, cost, drop_last) -> Schedule:
        offsets = np.concatenate(self.offsets)
        items = np.concatenate(self.items) if self.items else np.zeros(0, np.int64)
        packs = Packs._unchecked(offsets, items, self.lens[items], self.L, self.depth)
        rank_cost = np.concatenate(self.rank_cost) if self.rank_cost else np.zeros((0, self.W))
        dropped = np.sort(np.concatenate(self.dropped)) if self.dropped else np.zeros(0, np.int64)
        if packs.num_packs == 0:
            raise ValueError(f"the {self.lens.size:,} samples fill no whole step of {self.W} ranks x {self.M} "
                             "micro-batches; pass drop_last=False, or use fewer ranks or micro-batches")
        return Schedule(packs, packs.num_packs // (self.W * self.M), self.W, self.M, readonly(dropped),
                        readonly(rank_cost), self.L, self.depth, tuple(cost), self.seed, self.epoch, self.window)


def _spread_pack(lens, L, depth, n_rows, guess, check):
    """The window's rows: best-fit decreasing, the short sequences spread over the rows (the
    search for their reserve warm-started from the last window's, ``guess``; ``check``: test
    for dense rows first). Returns CSR ``(offsets, items)``, this window's reserve and
    whether the next window tests."""
    from ._kernels.balance import spread_bfd

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


def _epoch_seed(seed: int, epoch: int):
    """The seed of ``epoch``'s shuffle (the kernels' int64 form)."""
    return seed_to_int64((seed + epoch * _GOLDEN) % 2**64)


def round_robin(lengths, max_sequence_length, max_sequences_per_pack=None, *, world_size, micro_batches=1,
                cost=(1.0, 0.0), seed=0, epoch=0) -> Schedule:
    """The anchor: best-fit-decreasing packs of the whole epoch, shuffled, dealt round-robin
    to the ranks (pack ``j`` to rank ``j % world_size``), as TRL's ``pack_dataset`` followed
    by a ``DistributedSampler`` does; the packs that do not fill a last step are dropped.

    Parameters
    ----------
    lengths, max_sequence_length, max_sequences_per_pack, world_size, micro_batches, cost, seed, epoch
        As for :func:`balance`.

    Returns
    -------
    Schedule
    """
    from ._kernels.balance import sequence_costs
    from ._kernels.csr import csr_take
    from ._kernels.rng import permutation
    from .packing import _bfd

    lens, L, depth, W, M, cost, _, seed, epoch, _ = _settings(lengths, max_sequence_length, max_sequences_per_pack,
                                                             world_size, micro_batches, cost, 1, seed, epoch, True)
    packs = _bfd(lens, L, depth)
    packs = packs.take(permutation(packs.num_packs, _epoch_seed(seed, epoch)))
    steps = packs.num_packs // (W * M)
    j = np.arange(steps * W * M)
    rank, local = j % W, j // W
    slot = ((local // M) * W + rank) * M + local % M
    order = np.empty_like(j)
    order[slot] = j
    off, ix, ln = csr_take(packs.offsets, packs.indices, packs.lengths, order.astype(np.int64))
    c = sequence_costs(ln, cost[0], cost[1])
    per_pack = np.add.reduceat(c, off[:-1]) if ln.size else np.zeros(order.size)
    per_pack[np.diff(off) == 0] = 0.0
    rank_cost = per_pack.reshape(steps, W, M).sum(axis=2)
    used = np.zeros(lens.size, bool)
    used[ix] = True
    return Schedule(Packs._unchecked(off, ix, ln, L, depth), steps, W, M, readonly(np.flatnonzero(~used)),
                    readonly(rank_cost), L, depth, cost, seed, epoch, 0)
