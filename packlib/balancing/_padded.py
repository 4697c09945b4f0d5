"""The planner of ``balance(..., padded=True)``: micro-batches of unpacked sequences, one
right-padded row each (:class:`packlib.torch.PaddedCollator`), for models that cannot pack.

A micro-batch of ``n`` sequences whose longest has ``m`` tokens lays out ``n * m`` tokens
(at most ``max_sequence_length``) and costs ``n * (a * m + b * m**2)``. Each window of the
shuffled epoch takes as many samples as fill exactly ``window`` steps of such micro-batches,
sorts them longest first and cuts them greedily (:mod:`packlib._kernels.padded`), so that a
micro-batch holds sequences of similar length and little padding; the micro-batches are
then dealt to steps and ranks by their padded cost, and the steps ordered, as the packed
planner does (:mod:`._planner`). Nothing waits for a later window: the window's cut holds
exactly its micro-batches.
"""
from __future__ import annotations

import numpy as np


def run_padded(p, order: np.ndarray, drop_last: bool, cost, extra) -> np.ndarray:
    """Plan the epoch ``order`` (shuffled sample ids) into the planner ``p``'s steps; returns
    each sample's share of its micro-batch's padded cost (float64, by sample id; a dropped
    sample's own cost)."""
    rows_per_window = p.window * p.W * p.M
    depth = p.L if p.depth is None else p.depth
    shares = p.costs.copy()
    start, w, guess = 0, 0, rows_per_window
    while start < order.size:
        stop = _window_stop(p.lens, order, start, rows_per_window, p.L, depth, guess)
        guess = stop - start
        _window(p, order[start:stop], rows_per_window, stop >= order.size, drop_last, w, depth, cost, extra, shares)
        start, w = stop, w + 1
    return shares


def _count(lens, L, depth) -> int:
    """Micro-batches of the greedy cut of ``lens`` (any order)."""
    from .._kernels.padded import padded_count

    return int(padded_count(-np.sort(-lens), L, depth))


def _window_stop(lens, order, start, n_rows, L, depth, guess) -> int:
    """The largest ``stop`` for which ``order[start:stop]`` cuts into at most ``n_rows``
    micro-batches (the count grows by at most one per sample, so it is ``n_rows`` unless the
    epoch ends first): a galloping search from ``start + guess``, then bisection."""
    end = order.size

    def fits(stop):
        return _count(lens[order[start:stop]], L, depth) <= n_rows

    lo, hi = start + 1, min(end, start + max(1, guess))  # one sample is one micro-batch: lo fits
    step = max(1, guess)
    while fits(hi):
        if hi == end:
            return end
        lo, step = hi, 2 * step
        hi = min(end, hi + step)
    while hi - lo > 1:  # fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _window(p, ids, n_rows, last, drop_last, w, depth, cost, extra, shares) -> None:
    """Cut the window's samples into micro-batches, longest first, and append its steps."""
    from .._kernels.padded import padded_costs, padded_cut

    lens = p.lens[ids]
    by_length = np.argsort(-lens, kind="stable")  # ties in the shuffled order
    ids, lens = ids[by_length], lens[by_length]
    offsets = padded_cut(lens, p.L, depth)
    state = p.window_state(w)
    rows, step_rows = offsets.size - 1, p.W * p.M
    if last:  # the last window: as many steps as it fills
        n_rows = (rows // step_rows if drop_last else -(-rows // step_rows)) * step_rows
        if n_rows < rows:
            ids, lens, offsets = _drop_rows(p, ids, lens, offsets, rows - n_rows, state)
    if n_rows == 0:
        return
    costs = padded_costs(lens, offsets, *cost)
    if extra is not None:
        costs = costs + extra[ids]
    shares[ids] = costs
    p.steps(ids, offsets, lens, costs, n_rows, 0, state)  # no exchanges: they would break the rows' padding


def _drop_rows(p, ids, lens, offsets, k, state):
    """Leave out ``k`` of the micro-batches, drawn at random (so every sample of the window
    is as likely to be left out, whatever its length); returns what is kept."""
    from .._kernels.rng import shuffle_range

    rows = offsets.size - 1
    drawn = np.arange(rows, dtype=np.int64)
    shuffle_range(drawn, np.int64(0), np.int64(rows), state)
    keep = np.ones(rows, bool)
    keep[drawn[:k]] = False
    sizes = np.diff(offsets)
    kept_item = np.repeat(keep, sizes)
    p.dropped.append(ids[~kept_item])
    offsets = np.concatenate(([0], np.cumsum(sizes[keep]))).astype(np.int64)
    return ids[kept_item], lens[kept_item], offsets
