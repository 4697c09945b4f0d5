"""Kernels of compute-balanced step planning (:mod:`packlib.balancing`).

A window of the shuffled epoch is packed into rows (:func:`spread_bfd`: best-fit decreasing
that spreads the short sequences over the rows); the rows (CSR over the window's sequences)
become steps of ``W`` ranks x ``M`` micro-batches: rows sorted by cost are cut into groups
of ``W`` neighbours, and each step takes ``M`` groups from different cost bands (so each
rank can get one row of each, and each micro-batch round holds rows of one cost), dealt to
ranks longest-processing-time first with ``M`` rows each; then each step's most and least
loaded ranks exchange sequences (a move or a swap, whichever brings them closest to even)
while the rows' capacity and depth allow. The steps come out in a seeded random order that
keeps every run's mean sequence length (:func:`shuffled_balanced_order`).
"""
import numpy as np

from .._jit import jit, trailing_zeros
from .binpack import decreasing_order
from .csr import csr_from_assignment
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
    n_neg, n_pos = 0, 0
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
            take_neg = after_neg < after_pos or (after_neg == after_pos and next_below(state, 2) == 0)
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
def _strata(row_cost, steps, W, M, state):
    """The rows of each step: the window's rows sorted by cost (ties in an order drawn from
    ``state``) form ``steps * M`` groups of ``W`` neighbours, ``M`` bands of ``steps``
    groups; each step takes one group of every band (snaking: the costliest group of one
    band with the cheapest of the next), so its ``M`` micro-batch rounds each hold rows of
    one cost, and steps mix the bands alike. Returns ``(steps, W * M)`` row ids, band by
    band, each band cost-descending."""
    n = row_cost.size
    shuffled = np.arange(n)
    shuffle_range(shuffled, 0, n, state)
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
        shuffle_range(label, 0, W, state)
        for m in range(M):
            rounds[m] = m
        shuffle_range(rounds, 0, M, state)
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


_DENSE_MIN = 16  # plain best-fit decreasing stays when no row holds more sequences than this,
_DENSE_RATIO = 4  # or than this many times the mean
_SURELY_DENSE = 2  # a densest row of this many times the limit: the next window skips the test
_FIRST_GUESS = 0.875  # the reserve tried first (/ the even spread) when no window before found one


_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@jit
def _bitset_levels(n):
    """Word offsets of a hierarchical bitset over ``n`` leaves: level 0 holds a bit per
    leaf, level ``k + 1`` a bit per non-zero word of level ``k``, up to one word."""
    nlev = 1
    w = (n + 63) >> 6
    while w > 1:
        w = (w + 63) >> 6
        nlev += 1
    off = np.zeros(nlev + 1, np.int64)
    w = (n + 63) >> 6
    for k in range(nlev):
        off[k + 1] = off[k] + w
        w = (w + 63) >> 6
    return off


@jit
def _bit_at_or_above(bits, off, i):
    """The smallest set leaf ``>= i``, or -1."""
    nlev = off.size - 1
    k = 0
    while k < nlev:
        w = i >> 6
        if off[k] + w >= off[k + 1]:
            return -1
        word = bits[off[k] + w] & (_ALL << np.uint64(i & 63))
        if word != 0:
            i = (w << 6) + np.int64(trailing_zeros(word))
            while k > 0:  # down to the leaf: the lowest set bit of each word below
                k -= 1
                i = (i << 6) + np.int64(trailing_zeros(bits[off[k] + i]))
            return i
        k += 1
        i = w + 1
    return -1


@jit
def _bit_has(bits, i):
    return (bits[i >> 6] >> np.uint64(i & 63)) & _ONE != 0


@jit
def _bit_set(bits, off, i):
    for k in range(off.size - 1):
        w = i >> 6
        was = bits[off[k] + w]
        bits[off[k] + w] = was | (_ONE << np.uint64(i & 63))
        if was != 0:
            return
        i = w


@jit
def _bit_clear(bits, off, i):
    for k in range(off.size - 1):
        w = i >> 6
        now = bits[off[k] + w] & ~(_ONE << np.uint64(i & 63))
        bits[off[k] + w] = now
        if now != 0:
            return
        i = w


@jit
def _bucket_push(bits, off, head, nxt, f, p):
    """Pack ``p`` on top of the bucket of free space ``f`` (LIFO; an empty bucket's head
    is stale, its bit tells)."""
    if _bit_has(bits, f):
        nxt[p] = head[f]
    else:
        nxt[p] = -1
        _bit_set(bits, off, f)
    head[f] = p


@jit
def _bfd_rounds(lengths, order, L, depth, small, reserve, short_round, pack_of, fill, count, head, nxt, bits, off,
                limit):
    """Best fit, in ``order``: the sequences of at least ``small`` tokens into rows filled
    up to ``L - reserve`` (a longer one alone opens a row); with ``short_round``, then the
    shorter ones into the rows' whole free space. Buckets of rows by free space (``head``,
    ``nxt``), the non-empty ones in the bitset ``bits`` (levels ``off``). Returns the number
    of rows, or, as soon as it passes ``limit``, ``limit + 1`` (the packing unfinished)."""
    n = lengths.size
    bits[:] = 0
    n_packs = 0
    cap = L - reserve
    k = 0
    for phase in range(2 if short_round else 1):
        if phase == 1:  # every row's whole free space, for the short sequences
            bits[:] = 0
            cap = L
            for p in range(n_packs):
                f = L - fill[p]
                if count[p] < depth and f > 0:
                    _bucket_push(bits, off, head, nxt, f, p)
        while k < n and (phase == 1 or lengths[order[k]] >= small):
            l = lengths[order[k]]
            r = _bit_at_or_above(bits, off, l)
            if r < 0:
                p = n_packs
                n_packs += 1
                if n_packs > limit:
                    return n_packs
                fill[p] = 0
                count[p] = 0
            else:
                p = head[r]
                head[r] = nxt[p]
                if head[r] < 0:
                    _bit_clear(bits, off, r)
            pack_of[k] = p
            fill[p] += l
            count[p] += 1
            f = cap - fill[p]
            if count[p] < depth and f > 0:
                _bucket_push(bits, off, head, nxt, f, p)
            k += 1
    return n_packs


@jit
def _probe(lengths, order, L, depth, small, reserve, rows, pack_of, fill, count, head, nxt, bits, off, best):
    """One packing with ``reserve`` (see :func:`_bfd_rounds`); kept in ``best`` if it needs
    at most ``rows`` rows. Returns its rows, or 0 if it needs more."""
    got = _bfd_rounds(lengths, order, L, depth, small, reserve, True, pack_of, fill, count, head, nxt, bits, off, rows)
    if got > rows:
        return 0
    best[:] = pack_of
    return got


@jit
def spread_bfd(lengths, L, depth, small, rows, steps, guess=-1.0, check=True):
    """Best-fit decreasing that spreads the short sequences (under ``small`` tokens) over
    the rows instead of leaving them to rows of their own, where plain best-fit decreasing
    leaves a row of more than 16 sequences and 4 times the mean: the longer ones first, into
    rows filled only up to ``L - reserve``, then the short ones, best fit into the rows'
    whole free space. ``reserve`` is searched up to ``top``, the short sequences' tokens per
    row (of the rows that hold no sequence longer than ``L`` minus it), in steps of ``top /
    2**steps``: from ``guess * top`` (the previous window's ``reserve / top``; 7/8 if it is
    negative: none yet, or that window was packed plainly) up while the packing needs at
    most ``rows`` rows, else down (doubling the step) until it does; so most windows need
    two packings. With ``check`` false the plain packing (and its test for a dense row) is
    skipped. If no reserve fits: plain best-fit decreasing. Returns CSR ``(offsets,
    items)`` over positions in ``lengths``, ``reserve / top`` (-1: packed plainly) and
    whether the next window should test (false when this window's densest row held at
    least twice the dense limit, so a window like it is surely dense; a window that skipped
    the test has the next one make it)."""
    n = lengths.size
    order = decreasing_order(lengths, lengths.max() if n else 0)
    off = _bitset_levels(L + 1)
    bits = np.zeros(off[-1], np.uint64)
    head = np.empty(L + 1, np.int64)
    nxt = np.empty(max(n, 1), np.int64)
    fill = np.zeros(max(n, 1), np.int64)
    count = np.zeros(max(n, 1), np.int64)
    pack_of = np.empty(n, np.int64)
    short = 0
    for i in range(n):
        if lengths[i] < small:
            short += lengths[i]
    reserve = short // max(rows, 1)
    alone = 0
    for i in range(n):
        if lengths[i] > L - reserve:
            alone += 1
    top = min(short // max(rows - alone, 1), L - small)
    best = np.empty(n, np.int64)
    n_plain = 0
    check_next = True
    if check:  # plain best-fit decreasing first: if no row holds many more sequences than the mean, it stays
        n_plain = _bfd_rounds(lengths, order, L, depth, small, 0, True, best, fill, count, head, nxt, bits, off, n)
        most = 0
        for p in range(n_plain):
            most = max(most, count[p])
        limit = max(_DENSE_MIN, _DENSE_RATIO * n / max(n_plain, 1))
        if most <= limit:
            return csr_from_assignment(order, best, n_plain), -1.0, True
        check_next = most < _SURELY_DENSE * limit
    if guess < 0.0:
        guess = _FIRST_GUESS
    # from the guess: up in steps while it fits, else down, doubling the step
    lo, hi, n_lo = 0, top + 1, 0  # lo: the largest reserve found to fit, hi: the smallest found not to
    delta = max(1, top >> steps)
    mid = min(top, max(1, int(guess * top + 0.5)))
    for attempt in range(2 * steps + 2):
        if top <= 1:
            break
        got = _probe(lengths, order, L, depth, small, mid, rows, pack_of, fill, count, head, nxt, bits, off, best)
        if got:
            lo, n_lo = mid, got
            up = min(mid + delta, top)
            if up >= hi or up == mid:
                break
            mid = up
        else:
            hi = mid
            if lo > 0 or mid <= 1:
                break
            mid = max(1, mid - delta)
            delta *= 2
    if n_lo:
        return csr_from_assignment(order, best, n_lo), lo / top, check_next
    if not n_plain:  # no reserve fits: plain best-fit decreasing (the next window searches afresh)
        n_plain = _bfd_rounds(lengths, order, L, depth, small, 0, True, best, fill, count, head, nxt, bits, off, n)
    return csr_from_assignment(order, best, n_plain), -1.0, True
