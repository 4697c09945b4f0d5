"""Kernels of compute-balanced step planning (:mod:`packlib.balancing`).

A window of the shuffled epoch is packed into rows (:mod:`packlib._kernels.spread`:
best-fit decreasing that spreads the short sequences over the rows); the rows (CSR over the
window's sequences) become steps of ``W`` ranks x ``M`` micro-batches: rows sorted by cost are cut into groups
of ``W`` neighbours, and each step takes ``M`` groups from different cost bands (so each
rank can get one row of each, and each micro-batch round holds rows of one cost), dealt to
ranks longest-processing-time first with ``M`` rows each; then each step's most and least
loaded ranks exchange sequences (a move or a swap, whichever brings them closest to even)
while the rows' capacity and depth allow. The steps come out in a seeded random order that
keeps every run's mean sequence length (:func:`shuffled_balanced_order`).
"""
import numpy as np

from .._jit import jit
from .rng import next_below, shuffle_range


@jit
def shuffled_balanced_order(samples, tokens, mean, running, state):
    """A random order of steps (``samples`` and ``tokens`` each) in which every prefix keeps
    the mean sequence length ``mean`` (the epoch's). A step's excess is ``samples - tokens /
    mean`` (positive: many short sequences; negative: few long ones). One step of each sign
    is drawn at random from those left (``state``), and the one that brings the running
    excess closer to zero comes next (a step of large excess thus waits until the steps
    before it have pulled the running excess to half its size the other way); the other
    stays drawn. No kind of step keeps a place in the window. Returns ``(order, running)``:
    ``order[j]`` is the step at position ``j``; ``running`` (in and out) carries the excess
    from one window to the next."""
    k = samples.size
    dev = np.empty(k, np.float64)
    neg = np.empty(k, np.int64)
    pos = np.empty(k, np.int64)
    n_neg, n_pos = np.int64(0), np.int64(0)  # typed: a literal 0 reaching a callee compiles it once more
    for i in range(k):
        dev[i] = samples[i] - tokens[i] / mean
        if dev[i] < 0.0:
            neg[n_neg] = i
            n_neg += 1
        else:
            pos[n_pos] = i
            n_pos += 1
    order = np.empty(k, np.int64)
    c_neg = next_below(state, n_neg) if n_neg else -1  # the drawn step of each side (a slot)
    c_pos = next_below(state, n_pos) if n_pos else -1
    for j in range(k):
        if c_pos < 0:
            take_neg = True
        elif c_neg < 0:
            take_neg = False
        else:
            after_neg = abs(running + dev[neg[c_neg]])
            after_pos = abs(running + dev[pos[c_pos]])
            take_neg = after_neg < after_pos or (after_neg == after_pos and next_below(state, np.int64(2)) == 0)
        if take_neg:
            i = neg[c_neg]
            n_neg -= 1
            neg[c_neg] = neg[n_neg]
            c_neg = next_below(state, n_neg) if n_neg else -1
        else:
            i = pos[c_pos]
            n_pos -= 1
            pos[c_pos] = pos[n_pos]
            c_pos = next_below(state, n_pos) if n_pos else -1
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
    capacity ``L`` and depth ``D`` (``L``: no limit). Returns ``(s, t, row)``: swap ``s`` and ``t``
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
                if row_rank[q] == lo and row_tokens[q] + item_len[s] <= L and row_count[q] < D:
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
        hi, lo = np.int64(0), np.int64(0)  # typed, as above
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
def _strata(row_cost, steps, W, M, state):
    """The rows of each step: the window's rows sorted by cost (ties in an order drawn from
    ``state``) form ``steps * M`` groups of ``W`` neighbours, ``M`` bands of ``steps``
    groups; each step takes one group of every band (snaking: the costliest group of one
    band with the cheapest of the next), so its ``M`` micro-batch rounds each hold rows of
    one cost, and steps mix the bands alike. Returns ``(steps, W * M)`` row ids, band by
    band, each band cost-descending."""
    n = row_cost.size
    shuffled = np.arange(n)
    shuffle_range(shuffled, np.int64(0), n, state)
    by_cost = shuffled[np.argsort(-row_cost[shuffled], kind="mergesort")]
    out = np.empty((steps, W * M), np.int64)
    for g in range(steps * M):
        band, k = divmod(g, steps)
        st = k if band % 2 == 0 else steps - 1 - k
        out[st, band * W:(band + 1) * W] = by_cost[g * W:(g + 1) * W]
    return out


@jit
def balance_window(offsets, item_len, item_cost, n_rows, W, M, L, D, rounds, state):
    """Steps from one window of ``n_rows = steps * W * M`` rows (CSR ``offsets`` over the
    window's items; rows past the packed ones are empty); ``state`` (a generator, see
    :mod:`.rng`) draws what may be random: the order of rows of equal cost, which rank
    label each of a step's loads gets, the order of a step's micro-batch rounds and the
    order of sequences in a row.

    Returns ``(slot_offsets, slot_items, rank_cost)``: slot ``k = (step * W + rank) * M + m``
    holds items ``slot_items[slot_offsets[k]:slot_offsets[k + 1]]``; its rows of round ``m``
    are one band of neighbours in cost; ``rank_cost`` is ``(steps, W)``.
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
    step_rows = _strata(row_cost, steps, W, M, state)
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
    slot_of_row = _layout(step_rows, row_rank, rank_cost, W, M, state)
    slot_offsets, slot_items = _slots(item_row, slot_of_row, n_rows)
    for k in range(n_rows):
        shuffle_range(slot_items, slot_offsets[k], slot_offsets[k + 1], state)
    return slot_offsets, slot_items, rank_cost


@jit
def _layout(step_rows, row_rank, rank_cost, W, M, state):
    """The slot ``(step * W + rank) * M + m`` of every row: round ``m`` of a step is one of
    its bands (the rounds in an order drawn from ``state``), and the step's loads take rank
    labels in an order drawn from ``state`` (``rank_cost`` rows permuted alike)."""
    steps = step_rows.shape[0]
    slot_of_row = np.empty(steps * W * M, np.int64)
    label = np.empty(W, np.int64)
    rounds = np.empty(M, np.int64)
    cost = np.empty(W, np.float64)
    for st in range(steps):
        for r in range(W):
            label[r] = r
        shuffle_range(label, np.int64(0), W, state)
        for m in range(M):
            rounds[m] = m
        shuffle_range(rounds, np.int64(0), M, state)
        for r in range(W):
            cost[label[r]] = rank_cost[st, r]
        rank_cost[st, :] = cost
        for band in range(M):
            for j in range(W):
                row = step_rows[st, band * W + j]
                slot_of_row[row] = (st * W + label[row_rank[row]]) * M + rounds[band]
    return slot_of_row


@jit
def _slots(item_row, slot_of_row, n_rows):
    """CSR over slots: the items of every slot, in item order."""
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
