"""The DP×CP step planner: :func:`plan_cp_step` and the phases it runs (groups for long
sequences, then the short ones filled around them, then every GPU given work)."""
from __future__ import annotations

import numpy as np

from .._validate import as_bool, as_lengths, as_optional_int, as_positive_int, as_seed
from ._cost import allowed_sizes, as_cp_cost, check_min_cp_size, lower_bounds, min_sizes, seq_cost
from ._fill import cover, fill
from ._step import CPStep

#: The most GPUs a step is planned for (the planner keeps a few arrays of this size).
MAX_WORLD_SIZE = 1 << 20
#: One more micro-batch is taken only where it shortens the step (both shares) by more than this.
FEWER_MICRO_BATCHES_TOLERANCE = 0.01


def plan_cp_step(lengths, max_sequence_length: int, max_sequences_per_pack: int | None = None, *,
                 world_size: int, min_cp_size: int = 1, cost=None, micro_batches: int | None = None,
                 micro_batch_multiple: int = 1, attention_balance: bool = True, seed: int = 0) -> CPStep:
    """Lay out one training step's sequences over ``world_size`` data-parallel ×
    context-parallel GPUs: each sequence's CP size, micro-batch and aligned block of ranks.

    Every GPU holds at most ``max_sequence_length`` tokens (``Σ l / c`` over the sequences
    it shares) in each micro-batch. CP sizes are those Megatron builds groups for (powers
    of two from ``min_cp_size`` below ``2**floor(log2(world_size))``, and ``world_size``:
    :func:`~packlib.context_parallel.allowed_sizes`), on aligned
    blocks (ranks ``k·c .. k·c + c − 1``). The layout keeps the step's critical path
    (:meth:`CPStep.critical_path`) near its lower bound: sequences get the smallest CP size
    that holds them unless one alone would outlast the step's mean on it; long sequences
    are placed first as groups, in the step's first micro-batches, each on the size and
    block that leave its GPUs least loaded (a larger size counting the exchange it adds to
    every GPU's share); short ones are then dealt, longest first, to the GPU that stays
    least loaded, in its later micro-batches (into a group only where no GPU has room).
    Groups only split over the step (a GPU's group in one micro-batch lies inside its group
    in the one before), so no GPU waits for another and the critical path is the busiest
    GPU's total. See docs/context-parallel.md.

    Parameters
    ----------
    lengths : array_like of int
        The step's sequence lengths, each ``<= world_size * max_sequence_length``.
    max_sequence_length : int
        The memory cap: tokens per GPU per micro-batch (Megatron's ``max_seqlen_per_dp_cp_rank``).
    max_sequences_per_pack : int or None, default None
        At most this many sequences on a GPU in a micro-batch (Megatron's ``max_num_seqs``).
    world_size : int
        GPUs in the step, ``dp_size * cp_size``.
    min_cp_size : int, default 1
        The smallest CP size: one Megatron builds (:func:`~packlib.context_parallel.allowed_sizes`).
    cost : tuple of float, optional
        ``(a, b)`` or ``(a, b, e)``: a sequence of ``l`` tokens on ``c`` GPUs costs each
        ``(a·l + b·l²) / c + e·l·(c − 1) / c`` (linear layers, attention, ring exchange).
        ``(a, b)`` from :func:`packlib.transformer_cost` or :func:`packlib.fit_cost`;
        default ``(1, 1 / (12·4096), 0.05)``.
    micro_batches : int, optional
        The number of micro-batches; default ``⌈Σ l / (world_size · max_sequence_length)⌉``
        (at least ``⌈n / (world_size · max_sequences_per_pack)⌉``; rounded up to
        ``micro_batch_multiple``), or one more where that shortens the step
        by more than 1 % (or where the sequences do not fit that few; more still only where
        they fit in no fewer).
    micro_batch_multiple : int, default 1
        The number of micro-batches is a multiple of this (Megatron's
        ``microbatch_group_size_per_vp_stage`` with virtual pipeline stages).
    attention_balance : bool, default True
        Also balance attention alone (``l² / c`` a GPU, Megatron's own cost): a GPU's load
        is the larger of its two shares (see docs/context-parallel.md). ``False`` balances
        ``cost`` only.
    seed : int, default 0
        Draws which of equally good ranks takes which load.

    Returns
    -------
    CPStep

    Raises
    ------
    ValueError
        A sequence longer than ``world_size * max_sequence_length``, a length that is not
        a positive whole number, a capacity, size or count that is not positive, a
        ``min_cp_size`` above ``world_size`` or not a size Megatron builds, or a
        ``micro_batches`` too few to hold the step.

    Examples
    --------
    >>> import packlib
    >>> lengths = [20_000, 6_000, 5_000, 4_000, 4_000, 3_000, 3_000, 2_000, 2_000, 2_000, 1_000, 1_000]
    >>> step = packlib.plan_cp_step(lengths, 8_192, world_size=4)
    >>> step.cp.tolist()                 # the 20k sequence on all 4 GPUs, the others on one each
    [4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    >>> step.sample_id_groups()          # Megatron's layout: micro-batches of per-GPU id lists
    [[[0], [0], [0], [0]], [[2, 9], [1], [3, 6], [4, 5]], [[11], [10], [8], [7]]]
    >>> bool(step.rank_tokens().max() <= 8_192), round(step.efficiency, 3), round(step.balance, 3)
    (True, 0.959, 0.958)
    """
    cap = as_positive_int(max_sequence_length, "max_sequence_length")
    depth = as_optional_int(max_sequences_per_pack, "max_sequences_per_pack", minimum=1)
    G = as_positive_int(world_size, "world_size", maximum=MAX_WORLD_SIZE, hint="plan for fewer GPUs")
    min_cp = as_positive_int(min_cp_size, "min_cp_size")
    check_min_cp_size(min_cp, G)
    multiple = as_positive_int(micro_batch_multiple, "micro_batch_multiple")
    micro_batches = as_optional_int(micro_batches, "micro_batches", minimum=1)
    seed = as_seed(seed)
    arr = as_lengths(lengths, None)
    if arr.size and arr.max() > G * cap:
        i = int(np.argmax(arr > G * cap))
        raise ValueError(f"lengths[{i}] = {arr[i]} exceeds world_size * max_sequence_length = {G} * {cap} = {G * cap}: "
                         "no CP group holds it; split it, or raise max_sequence_length or world_size")
    attention = as_bool(attention_balance, "attention_balance")
    return _plan(arr, cap, depth, G, min_cp, as_cp_cost(cost), micro_batches, multiple, attention, seed)


def _plan(lengths, cap, depth, G, min_cp, cost, micro_batches, multiple, attention, seed) -> CPStep:
    """:func:`plan_cp_step` on checked arguments."""
    sizes = allowed_sizes(G, min_cp)
    simple, tight = lower_bounds(lengths, cap, sizes, cost)
    result = dict(num_micro_batches=0, world_size=G, max_sequence_length=cap, max_sequences_per_pack=depth,
                  cost_coefficients=cost, lower_bound=tight, simple_bound=simple)
    if lengths.size == 0:
        empty = np.zeros(0, np.int64)
        return CPStep(lengths, empty, empty, empty, **result)
    plan_cap = min(cap, int(lengths.sum()))  # a cap above the step's tokens never binds (and never overflows)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(lengths.size)
    order = perm[np.argsort(-lengths[perm], kind="stable")]
    fewest = -(-int(lengths.sum()) // (G * cap))
    if depth is not None:  # a micro-batch holds at most G * depth sequences
        fewest = max(fewest, -(-lengths.size // (G * depth)))
    fewest = -(-fewest // multiple) * multiple
    if micro_batches is not None:
        if micro_batches % multiple:
            raise ValueError(f"micro_batches = {micro_batches} is not a multiple of micro_batch_multiple = {multiple}")
        tries = [micro_batches]
    else:
        tries = [fewest, fewest + multiple]
    scale = _Scale(lengths, sizes, cost, tight, attention)
    mask = int(rng.integers(G)) if G & (G - 1) == 0 else 0
    best = None
    while best is None:
        for M in tries:
            layout = _layout(lengths, order, plan_cap, depth or lengths.size, sizes, M, scale)
            if layout is None and M == tries[-1]:
                layout = _whole_groups(lengths, order, plan_cap, depth or lengths.size, G, M)
            if layout is None:
                continue
            cp, mb, first = layout
            first = first ^ (mask & ~(cp - 1))
            step = CPStep(lengths, cp, mb, first, **{**result, "num_micro_batches": M})
            score = max(step.critical_path() / scale.full, step.critical_path((0.0, 1.0, 0.0)) / scale.quad)
            if best is None or score < best[0] * (1 - FEWER_MICRO_BATCHES_TOLERANCE):  # near ties: fewer
                best = (score, step)
        if best is None:
            if micro_batches is not None:
                raise ValueError(f"micro_batches = {micro_batches} cannot hold the step's {lengths.size} sequences "
                                 f"({int(lengths.sum()):,} tokens) within max_sequence_length = {cap} per GPU; "
                                 "give more micro-batches, or None to choose")
            tries = [tries[-1] + multiple]
            if tries[0] > lengths.size:  # every GPU needs a sequence in every micro-batch
                raise ValueError(f"found no layout of the step's {lengths.size} sequences: every GPU needs one in "
                                 f"every micro-batch, within max_sequences_per_pack = {depth} and a multiple of "
                                 f"micro_batch_multiple = {multiple} micro-batches; allow more sequences per GPU or "
                                 "a smaller multiple")
    _check_memory(best[1], cap)
    return best[1]


def _check_memory(step, cap):
    """Refuse (as a bug, never silently) a layout that puts more than ``cap`` tokens on a
    GPU: each group's tokens, summed exactly, within ``cp · cap``."""
    keys, inverse = np.unique(np.stack([step.micro_batch, step.first_rank, step.cp]), axis=1, return_inverse=True)
    tokens = np.zeros(keys.shape[1], np.int64)
    np.add.at(tokens, inverse.ravel(), step.lengths)
    if any(int(t) > int(c) * cap for t, c in zip(tokens, keys[2])):
        raise RuntimeError("packlib.plan_cp_step built a layout over the memory cap: please report this input")


def _whole_groups(lengths, order, cap, depth, G, M):
    """The fallback layout: every micro-batch one group of all ``G`` GPUs, filled first fit
    (longest first) up to ``G · cap`` tokens; None unless that fills exactly ``M``."""
    tokens, count = np.zeros(M, np.int64), np.zeros(M, np.int64)
    mb = np.empty(lengths.size, np.int64)
    for i in order:
        fits = np.flatnonzero((tokens + lengths[i] <= G * cap) & (count < depth))
        if fits.size == 0:
            return None
        m = int(fits[0])
        tokens[m] += lengths[i]
        count[m] += 1
        mb[i] = m
    if (count == 0).any():
        return None
    return np.full(lengths.size, G, np.int64), mb, np.zeros(lengths.size, np.int64)


class _Scale:
    """A sequence's load on each GPU of its group as two shares: of the step's time bound
    under the planning cost, and of the bound under attention alone (``l² / c``, Megatron's
    cost). A GPU's load is the larger share: balancing it balances both."""

    def __init__(self, lengths, sizes, cost, tight, attention=True):
        self.cost = cost
        self.full = tight if tight > 0 else 1.0
        sq = lengths.astype(np.float64) ** 2
        self.quad = max(float(sq.sum()) / float(sizes[-1]), 1.0) if attention else np.inf

    def __call__(self, length, size):
        ln = np.asarray(length, np.float64)
        return np.stack([seq_cost(ln, size, self.cost) / self.full, ln * ln / np.asarray(size) / self.quad], axis=-1)


def _choose_sizes(lengths, cmin, sizes, scale):
    """Each sequence's smallest allowed size that holds it with both shares at most 1, or
    else the size with the smallest larger share."""
    shares = scale(lengths[:, None], sizes[None, :]).max(axis=-1)
    shares[sizes[None, :] < cmin[:, None]] = np.inf
    ok = shares <= 1.0
    pick = np.where(ok.any(axis=1), ok.argmax(axis=1), shares.argmin(axis=1))
    return sizes[pick].copy()


def _layout(lengths, order, cap, depth, sizes, M, scale):
    """The CP size, micro-batch and first rank of every sequence in ``M`` micro-batches,
    or None where the phases cannot fit them."""
    G = int(sizes[-1])
    cp = _choose_sizes(lengths, min_sizes(lengths, cap, sizes), sizes, scale)
    mb = np.full(lengths.size, -1, np.int64)
    first = np.full(lengths.size, -1, np.int64)
    state = _Groups(G, M, cap, depth, (scale(lengths, cp) * cp[:, None]).sum(axis=0) / G)
    unit = int(sizes[0])
    big = [i for i in order if cp[i] > unit]
    big.sort(key=lambda i: -cp[i])  # stable: longest first within a size
    for i in big:
        if not state.place_group(i, int(lengths[i]), int(cp[i]), sizes, scale, cp, mb, first):
            return None
    if not fill(state, lengths, [i for i in order if cp[i] <= unit], unit, scale, cp, mb, first):
        return None
    if not cover(state, lengths, unit, sizes, cp, mb, first):
        return None
    return cp, mb, first


class _Groups:
    """The groups of a layout under construction, and every GPU's load (two shares, see
    :class:`_Scale`) and next free micro-batch."""

    def __init__(self, G, M, cap, depth, level):
        self.G, self.M, self.cap, self.depth = G, M, cap, depth
        self.level = level  # the mean load (two shares) all GPUs reach, as sizes stand
        self.load = np.zeros((G, 2))
        self.next_free = np.zeros(G, np.int64)
        self.start, self.size, self.mb, self.tokens, self.count = [], [], [], [], []

    def block_max(self, values, size):
        """The largest of ``values`` over each aligned block of ``size`` GPUs."""
        n = self.G // size
        return values[:n * size].reshape((n, size) + values.shape[1:]).max(axis=1)

    def place_group(self, i, length, c, sizes, scale, cp, mb, first) -> bool:
        """Place sequence ``i`` on ``c`` GPUs or more: into an open group of a size with
        room, or a new group on the free block whose GPUs stay least loaded. A larger size
        spends more GPU-time (its exchange), counted as raising every GPU's final level
        (:attr:`level`); the size whose busiest GPU, or that level, ends lowest wins."""
        base = float(scale(length, c)[0]) * c
        found = None
        for size in sizes[sizes >= c]:
            size = int(size)
            t = scale(length, size)
            best = self._best_place(length, size, t)
            if best is None:
                continue
            extra = (float(t[0]) * size - base) / self.G
            score = max(best[0][0], self.level[0] + extra, self.level[1])
            if found is None or score < found[0]:
                found = (score, size, t, extra, best[1], best[2])
        if found is None:
            return False
        _, size, t, extra, g, s = found
        self.level[0] += extra
        if g < 0:
            g = len(self.start)
            m = int(self.next_free[s:s + size].max())
            self.start.append(s), self.size.append(size), self.mb.append(m)
            self.tokens.append(0), self.count.append(0)
            self.next_free[s:s + size] = m + 1
        self.tokens[g] += length
        self.count[g] += 1
        self.load[s:s + size] = self.load[s:s + size].max(axis=0) + t
        cp[i], mb[i], first[i] = size, self.mb[g], s
        return True

    def _best_place(self, length, size, t):
        """``((key, new), group, first rank)`` of the best place on ``size`` GPUs (group
        ``-1``: a new group), or None where there is none."""
        best = None
        blocks = self.block_max(self.load, size)
        n = len(self.start)
        if n:
            start = np.asarray(self.start)
            ok = ((np.asarray(self.size) == size) & (np.asarray(self.tokens) + length <= size * self.cap)
                  & (np.asarray(self.count) < self.depth))
            if ok.any():
                open_ = np.flatnonzero(ok)
                keys = (blocks[start[open_] // size] + t).max(axis=1)
                g = int(open_[np.argmin(keys)])
                best = ((keys.min(), 0), g, int(start[g]))
        free = self.block_max(self.next_free, size)
        keys = np.where(free < self.M, (blocks + t).max(axis=1), np.inf)
        k = int(np.argmin(keys))
        if keys[k] < np.inf and (best is None or (keys[k], 1) < best[0]):
            best = ((keys[k], 1), -1, k * size)
        return best
