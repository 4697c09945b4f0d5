"""Kernels of compute-balanced step planning (:mod:`packlib.balancing`).

A window of packed rows (CSR over the window's sequences) becomes steps of ``W`` ranks x
``M`` micro-batches: rows sorted by cost are cut into groups of ``W`` neighbours, and each
step takes ``M`` groups from different cost bands (so each rank can get one row of each),
dealt to ranks longest-processing-time first with ``M`` rows each, and then each step's most and least loaded ranks exchange sequences (a move or
a swap, whichever brings them closest to even) while the rows' capacity and depth allow.
"""
import numpy as np

from .._jit import jit


@jit
def prefix_balanced_order(samples, tokens, mean, running):
    """An order of steps (``samples`` and ``tokens`` each) in which every prefix keeps the
    mean sequence length of the whole: each next step is taken from the side (many short
    sequences, or few long ones) that brings the running count of sequences closest to
    ``tokens so far / mean`` (``mean``: the epoch's mean length). Returns ``(order, running)``: ``order[j]`` is the step at position ``j``;
    ``running`` (in and out) carries the deviation from one window to the next."""
    k = samples.size
    dev = np.empty(k, np.float64)
    for i in range(k):
        dev[i] = samples[i] - tokens[i] / mean
    by_dev = np.argsort(dev, kind="mergesort")
    lo, hi = 0, k - 1
    order = np.empty(k, np.int64)
    for j in range(k):
        take_low = running > 0.0
        if take_low:
            i = by_dev[lo]
            lo += 1
        else:
            i = by_dev[hi]
            hi -= 1
        order[j] = i
        running += dev[i]
    return order, running


@jit
def sequence_costs(lens, a, b):
    """``a * l + b * l**2`` for every length (float64)."""
    out = np.empty(lens.size, np.float64)
    for i in range(lens.size):
        l = np.float64(lens[i])
        out[i] = a * l + b * l * l
    return out


@jit
def _deal(costs, rows, W, M, rank_of):
    """Deal a step's rows (``M`` bands of ``W`` rows, each band cost-descending) to ranks,
    one row of every band per rank: a band's costliest row to the least loaded rank so far,
    its next to the next least loaded, and so on (longest processing time first, by band:
    ``O(M W log W)``). Fills ``rank_of[row]``."""
    load = np.zeros(W, np.float64)
    for band in range(M):
        by_load = np.argsort(load, kind="mergesort")
        for j in range(W):
            row = rows[band * W + j]
            r = by_load[j]
            rank_of[row] = r
            load[r] += costs[row]


@jit
def _best_exchange(items, rows, item_row, item_len, item_cost, row_rank, row_tokens, row_count, hi, lo, gap, L, D):
    """The move (of one sequence of rank ``hi`` into a row of ``lo``) or swap (of one
    sequence of each) that brings the two ranks' costs closest to even, within the rows'
    capacity ``L`` and depth ``D`` (0: none). Returns ``(s, t, row)``: swap ``s`` and ``t``
    (``t >= 0``), or move ``s`` into ``row``; ``s = -1`` if nothing improves."""
    n = items.size
    best_s, best_t, best_row = -1, -1, -1
    best_score = gap / 2.0
    for i in range(n):
        s = items[i]
        rs = item_row[s]
        if row_rank[rs] != hi:
            continue
        cs = item_cost[s]
        if cs < gap and abs(gap / 2.0 - cs) < best_score:  # a move, into any row of lo with room
            for q in rows:
                if row_rank[q] == lo and row_tokens[q] + item_len[s] <= L and (D == 0 or row_count[q] < D):
                    best_s, best_t, best_row, best_score = s, -1, q, abs(gap / 2.0 - cs)
                    break
        for j in range(n):
            t = items[j]
            rt = item_row[t]
            if row_rank[rt] != lo:
                continue
            delta = cs - item_cost[t]
            if delta <= 0.0 or delta >= gap:
                continue
            if row_tokens[rs] - item_len[s] + item_len[t] > L or row_tokens[rt] - item_len[t] + item_len[s] > L:
                continue
            score = abs(gap / 2.0 - delta)
            if score < best_score:
                best_s, best_t, best_row, best_score = s, t, -1, score
    return best_s, best_t, best_row


@jit
def _refine(items, rows, item_row, item_len, item_cost, row_rank, row_tokens, row_count, rank_cost, W, L, D, rounds):
    """Exchanges between the most and the least loaded rank of one step (see the module docs)."""
    for _ in range(rounds):
        hi, lo = 0, 0
        for r in range(W):
            if rank_cost[r] > rank_cost[hi]:
                hi = r
            if rank_cost[r] < rank_cost[lo]:
                lo = r
        gap = rank_cost[hi] - rank_cost[lo]
        if gap <= 1e-12 * rank_cost[hi]:
            return
        s, t, q = _best_exchange(items, rows, item_row, item_len, item_cost, row_rank, row_tokens, row_count,
                                 hi, lo, gap, L, D)
        if s < 0:
            return
        rs = item_row[s]
        if t < 0:  # move s into row q
            row_tokens[rs] -= item_len[s]
            row_count[rs] -= 1
            row_tokens[q] += item_len[s]
            row_count[q] += 1
            item_row[s] = q
            rank_cost[hi] -= item_cost[s]
            rank_cost[lo] += item_cost[s]
        else:  # swap s and t
            rt = item_row[t]
            row_tokens[rs] += item_len[t] - item_len[s]
            row_tokens[rt] += item_len[s] - item_len[t]
            item_row[s], item_row[t] = rt, rs
            delta = item_cost[s] - item_cost[t]
            rank_cost[hi] -= delta
            rank_cost[lo] += delta


@jit
def _strata(row_cost, steps, W, M):
    """The rows of each step: the window's rows sorted by cost form ``steps * M`` groups of
    ``W`` neighbours, ``M`` bands of ``steps`` groups; each step takes one group of every
    band (snaking: the costliest group of one band with the cheapest of the next), so its
    ``M`` micro-batch rounds each hold rows of one cost, and steps mix the bands alike.
    Returns ``(steps, W * M)`` row ids, each step's rows cost-descending."""
    by_cost = np.argsort(-row_cost, kind="mergesort")  # stable: ties keep the packer's order
    out = np.empty((steps, W * M), np.int64)
    for g in range(steps * M):
        band, k = divmod(g, steps)
        st = k if band % 2 == 0 else steps - 1 - k
        out[st, band * W:(band + 1) * W] = by_cost[g * W:(g + 1) * W]
    return out


@jit
def balance_window(offsets, item_len, item_cost, n_rows, W, M, L, D, rounds):
    """Steps from one window of ``n_rows = steps * W * M`` rows (CSR ``offsets`` over the
    window's items; rows past the packed ones are empty).

    Returns ``(slot_offsets, slot_items, rank_cost)``: slot ``k = (step * W + rank) * M + m``
    holds items ``slot_items[slot_offsets[k]:slot_offsets[k + 1]]``; ``rank_cost`` is
    ``(steps, W)``.
    """
    n_items = item_len.size
    packed = offsets.size - 1
    item_row = np.empty(n_items, np.int64)
    row_cost = np.zeros(n_rows, np.float64)
    row_tokens = np.zeros(n_rows, np.int64)
    row_count = np.zeros(n_rows, np.int64)
    for r in range(packed):
        for k in range(offsets[r], offsets[r + 1]):
            item_row[k] = r
            row_cost[r] += item_cost[k]
            row_tokens[r] += item_len[k]
            row_count[r] += 1
    steps = n_rows // (W * M)
    step_rows = _strata(row_cost, steps, W, M)
    row_rank = np.empty(n_rows, np.int64)
    rank_cost = np.zeros((steps, W), np.float64)
    step_of_row = np.empty(n_rows, np.int64)
    for st in range(steps):
        rows = step_rows[st]
        _deal(row_cost, rows, W, M, row_rank)
        for r in rows:
            step_of_row[r] = st
            rank_cost[st, row_rank[r]] += row_cost[r]
    # the items of each step, for its exchanges
    step_start = np.zeros(steps + 1, np.int64)
    for k in range(n_items):
        step_start[step_of_row[item_row[k]] + 1] += 1
    for st in range(steps):
        step_start[st + 1] += step_start[st]
    fill = step_start[:-1].copy()
    step_items = np.empty(n_items, np.int64)
    for k in range(n_items):
        st = step_of_row[item_row[k]]
        step_items[fill[st]] = k
        fill[st] += 1
    for st in range(steps):
        _refine(step_items[step_start[st]:step_start[st + 1]], step_rows[st], item_row,
                item_len, item_cost, row_rank, row_tokens, row_count, rank_cost[st], W, L, D, rounds)
    slot_offsets, slot_items = _slots(item_row, step_of_row, row_rank, n_rows, W, M)
    return slot_offsets, slot_items, rank_cost


@jit
def _slots(item_row, step_of_row, row_rank, n_rows, W, M):
    """CSR over slots ``(step * W + rank) * M + m``; a rank's rows take ``m`` in row order."""
    slot_of_row = np.empty(n_rows, np.int64)
    used = np.zeros(n_rows // M + 1, np.int64)
    for r in range(n_rows):
        sr = step_of_row[r] * W + row_rank[r]
        slot_of_row[r] = sr * M + used[sr]
        used[sr] += 1
    counts = np.zeros(n_rows + 1, np.int64)
    for k in range(item_row.size):
        counts[slot_of_row[item_row[k]] + 1] += 1
    for s in range(n_rows):
        counts[s + 1] += counts[s]
    fill = counts[:-1].copy()
    items = np.empty(item_row.size, np.int64)
    for k in range(item_row.size):
        s = slot_of_row[item_row[k]]
        items[fill[s]] = k
        fill[s] += 1
    return counts, items
