"""Kernels of the near-optimal histogram packer (:mod:`packlib.optimal`).

- :func:`price`: the pricing problem of Gilmore-Gomory column generation. Given a value
  ``y[l-1]`` per length, it finds, for every length ``a``, the most valuable pack whose
  longest sequence is ``a`` (at most ``D`` sequences, at most ``L`` tokens). One dynamic
  programme over (lengths in ascending order, sequences used, tokens used) gives all of
  them, so a pricing round can add up to one improving column per length instead of one
  in total.
- :func:`round_columns`: round an LP solution down and swap surplus copies for shorter
  lengths (or take them out), so that the packs cover at most the histogram; returns the
  residual.
"""
import numpy as np

from .._jit import jit
from .fill_modes import EVEN_PAIR, LONG_PAIR, ROOM_FOR_SHORTEST, SPREAD_SHORT, TINY_BESIDE_HUGE


@jit
def price(y, caps, L, D, threshold, width, want_rows):
    """Best pack per longest length for values ``y`` (float64 ``(L,)``).

    Parameters: ``caps[l-1] > 0`` for the lengths a pack may hold (a pack holds as many
    copies as fit: the caps of :func:`packlib.optimal._lp._caps` are only the physical
    limits); ``D`` most sequences per pack, or ``0`` for unlimited; ``threshold``: only
    packs worth more than this are returned; ``width``: most sequences any pack can hold
    (row width); ``want_rows``: build the packs (one bit per DP cell); ``False`` only
    computes ``best``.

    Unbounded knapsack over (sequences, tokens), ``O(n * D * L)`` for ``n`` rising
    lengths: ``g[c, s]``, the best value of at most ``c`` sequences and ``s`` tokens,
    takes one more copy of the current length from ``g[c - 1, s - l]``, which already
    holds its copies (``c`` ascending). Only a length priced above every shorter one
    enters the DP: any other can be swapped for a shorter one without lowering a pack's
    value or breaking a limit. Every priced length still gets its best pack (itself on
    top of the DP of the shorter lengths), so a round adds as many columns as before.

    Returns ``(best, values, rows)``: the value of the best pack overall, and one row of
    lengths (descending, zero-padded to ``width``) per returned pack with its value.
    """
    ncard = D + 1 if D > 0 else 1
    top = D if D > 0 else 0
    n_all = 0
    n = 0
    hi = 0.0
    for l in range(1, L + 1):
        if caps[l - 1] > 0 and y[l - 1] > 0.0:
            n_all += 1
            if y[l - 1] > hi:
                hi = y[l - 1]
                n += 1
    lens = np.empty(n, np.int64)  # the rising lengths, ascending
    g = np.zeros((ncard, L + 1), np.float64)
    words = (L >> 6) + 1
    # taken[j, c, s]: the optimum of g[c, s] after rising length j takes a copy of it
    taken = np.zeros((n if want_rows else 1, ncard, words), np.uint64)
    top_len = np.empty(n_all, np.int64)  # every priced length, ascending ...
    top_val = np.empty(n_all, np.float64)  # ... the best pack it tops ...
    top_dp = np.empty(n_all, np.int64)  # ... and the last rising length the rest may use
    j = -1
    i = 0
    hi = 0.0
    for l in range(1, L + 1):
        if caps[l - 1] == 0 or y[l - 1] <= 0.0:
            continue
        v = y[l - 1]
        if v > hi:
            hi = v
            j += 1
            lens[j] = l
            for c in range(1 if D > 0 else 0, ncard):
                prev = g[c - 1] if D > 0 else g[0]
                cur = g[c]
                if want_rows:
                    bits = taken[j, c]
                    for s in range(l, L + 1):
                        cand = prev[s - l] + v
                        if cand > cur[s]:
                            cur[s] = cand
                            bits[s >> 6] |= np.uint64(1) << np.uint64(s & 63)
                else:
                    for s in range(l, L + 1):
                        cand = prev[s - l] + v
                        if cand > cur[s]:
                            cur[s] = cand
        # the best pack whose longest length is l: one copy on top of the best of the rest
        top_len[i] = l
        top_val[i] = g[top - 1 if D > 0 else 0, L - l] + v
        top_dp[i] = j
        i += 1
    best = g[top, L]
    m = 0
    if want_rows:
        for i in range(n_all):
            if top_val[i] > threshold:
                m += 1
    values = np.empty(m, np.float64)
    rows = np.zeros((m, width), np.int64)
    r = 0
    for i in range(n_all - 1, -1, -1):  # longest first
        if r == m:
            break
        if top_val[i] <= threshold:
            continue
        values[r] = top_val[i]
        rows[r, 0] = top_len[i]
        _unwind(taken, lens, top_dp[i], top - 1 if D > 0 else 0, L - top_len[i], D, rows[r])
        r += 1
    return best, values, rows


@jit
def _unwind(taken, lens, j, c, s, D, row):
    """Fill ``row[1:]`` with the optimum of ``g[c, s]`` over the rising lengths up to
    ``lens[j]``, read back from :func:`price`'s ``taken`` bits: where length ``j`` took a
    copy, take it and stay on ``j``; else step to the shorter lengths."""
    w = 1
    while j >= 0 and s > 0 and (D == 0 or c > 0) and w < row.size:
        if taken[j, c, s >> 6] >> np.uint64(s & 63) & np.uint64(1):
            row[w] = lens[j]
            w += 1
            s -= lens[j]
            if D > 0:
                c -= 1
        else:
            j -= 1


@jit
def round_columns(rows, x, h):
    """Round the LP solution ``x`` (float64, one per row of lengths) down to whole packs
    covering at most ``h``.

    Where the rounded packs cover a length more often than ``h`` counts it, the surplus
    copies become copies of the next shorter length of ``h`` (a pack stays within its
    limits when a sequence is swapped for a shorter one), longest length first, so surplus
    covers what shorter lengths lack; at the shortest length it is taken out. This is also
    how an LP solved with the exchange columns (:class:`packlib.optimal._lp._Master`)
    becomes packs: they move cover from a length to the next shorter one. One group at a
    time, splitting a group when only part of it must change. Returns ``(rows, counts,
    residual)``: the rounded packs (possibly with new, thinner rows) and the histogram
    they leave uncovered.
    """
    S, W = rows.shape
    L = h.size
    counts = np.empty(S, np.int64)
    for p in range(S):
        counts[p] = np.int64(np.floor(x[p] + 1e-9)) if x[p] > 0.0 else 0
    cover = np.zeros(L, np.int64)
    for p in range(S):
        for w in range(W):
            if rows[p, w] > 0:
                cover[rows[p, w] - 1] += counts[p]
    # each length splits at most one group (the last one it takes copies from)
    out = np.zeros((S + L, W), np.int64)
    out_counts = np.zeros(S + L, np.int64)
    for p in range(S):  # loops, not slice copies: no shape-error path to compile
        out_counts[p] = counts[p]
        for w in range(W):
            out[p, w] = rows[p, w]
    n_out = S
    shorter = 0  # the longest length of h below l (0: none)
    for l in range(L, 0, -1):
        surplus = cover[l - 1] - h[l - 1]
        if surplus > 0:
            shorter = l - 1
            while shorter > 0 and h[shorter - 1] == 0:
                shorter -= 1
        p = 0
        while surplus > 0 and p < n_out:
            if out_counts[p] > 0:
                # swap one copy of l for the shorter length in up to `surplus` packs of this group
                pos = -1
                for w in range(W):
                    if out[p, w] == l:
                        pos = w
                if pos >= 0:
                    take = min(out_counts[p], surplus)
                    if take < out_counts[p]:
                        for w in range(W):  # element by element: no shape-error path to compile
                            out[n_out, w] = out[p, w]
                        out_counts[n_out] = out_counts[p] - take
                        out_counts[p] = take
                        n_out += 1
                    out[p, pos] = shorter
                    if shorter > 0:
                        cover[shorter - 1] += take
                    surplus -= take
                    continue  # the same group may hold further copies of l
            p += 1
    residual = h.copy()
    for p in range(n_out):
        for w in range(W):
            if out[p, w] > 0:
                residual[out[p, w] - 1] -= out_counts[p]
    return out[:n_out], out_counts[:n_out], residual


@jit
def max_pack_value(lens, prices, L, D):
    """Most valuable pack: the max of ``sum(prices[i])`` over multisets of ``lens`` (any
    number of copies of each) with at most ``L`` tokens and at most ``D`` sequences
    (``D = 0``: unlimited).

    ``lens`` ascending and distinct; ``prices`` (int64 or float64) >= 0. With int64 prices
    the answer is exact; so is float64 when every value formed is an integer below 2**53.
    A length whose price does not exceed that of a shorter length is skipped (swapping it
    for the shorter one never lowers a pack's value nor breaks its limits). Unbounded
    knapsack over (sequences, tokens): ``O(n * L)`` time unlimited, ``O(n * D * L)``
    with a depth limit.
    """
    ncard = D + 1 if D > 0 else 1
    g = np.zeros((ncard, L + 1), prices.dtype)
    top = prices[0] * 0
    first = True
    for j in range(lens.size):
        p = prices[j]
        l = lens[j]
        if p <= 0 or l > L:
            continue
        if not first and p <= top:
            continue  # dominated by a shorter length
        first = False
        top = p
        if D == 0:
            row = g[0]
            for s in range(l, L + 1):
                cand = row[s - l] + p
                if cand > row[s]:
                    row[s] = cand
        else:
            # c ascending: g[c-1] already holds copies of this length
            for c in range(1, D + 1):
                prev = g[c - 1]
                cur = g[c]
                for s in range(l, L + 1):
                    cand = prev[s - l] + p
                    if cand > cur[s]:
                        cur[s] = cand
    return g[ncard - 1, L]


@jit
def _largest_present(parent, g):
    """Largest length ``<= g`` still available (``parent[l] == l``), 0 if none; path
    halving keeps the chains short."""
    r = g
    while parent[r] != r:
        parent[r] = parent[parent[r]]
        r = parent[r]
    return r


@jit
def _pair_partner(mode, gap, rem, parent, L):
    """The longer of two sequences that close ``gap`` exactly (``LONG_PAIR``: the longer as
    long as possible; ``EVEN_PAIR`` and after: the pair as even as possible), or 0 if no pair
    is left."""
    if mode >= EVEN_PAIR:
        # the shorter of the pair, longest first (so the pair is even)
        d = _largest_present(parent, gap // 2)
        tries = 0
        while d > 0 and tries < 4096:
            c = gap - d
            if c <= L and rem[c - 1] > (1 if c == d else 0):
                return c
            d = _largest_present(parent, d - 1)
            tries += 1
    elif mode == LONG_PAIR:
        c = _largest_present(parent, gap - 1)
        while c > 0 and 2 * c >= gap:
            if rem[gap - c - 1] > (1 if c == gap - c else 0):
                return c
            c = _largest_present(parent, c - 1)
    return 0


@jit
def _fill_state(h, L):
    """What :func:`exact_fill` starts from: the copies left of each length, the union-find
    over the lengths that have some (``parent[l] == l``), and the sequences and tokens left."""
    rem = h.copy()
    parent = np.arange(L + 1)
    items_left = np.int64(0)
    tokens_left = np.int64(0)
    for l in range(1, L + 1):
        if rem[l - 1] == 0:
            parent[l] = l - 1
        items_left += rem[l - 1]
        tokens_left += rem[l - 1] * l
    return rem, parent, items_left, tokens_left


@jit
def _grown(a, size):
    """``a`` in a zeroed array of at least ``size`` entries (doubling)."""
    out = np.zeros(max(2 * a.size, size), a.dtype)
    for i in range(a.size):
        out[i] = a[i]
    return out


@jit
def exact_fill(h, L, D, mode):
    """Pack a histogram pack by pack, aiming for packs that are exactly full.

    Each pack starts with the longest sequence left (except with ``SPREAD_SHORT`` and
    ``ROOM_FOR_SHORTEST``). While there is room (and fewer than ``D`` sequences; ``D = 0``:
    unlimited), the gap ``g`` is filled by one rule, the ``mode`` (named in
    :mod:`packlib._kernels.fill_modes`):

    - ``BEST_FIT`` (0): the longest sequence that fits (best fit);
    - ``LONG_PAIR`` (1): a sequence of length exactly ``g`` if one is left, else two that add
      up to ``g`` (the longer one as long as possible), else best fit;
    - ``EVEN_PAIR`` (2): like ``LONG_PAIR``, but the pair as even as possible, which keeps
      the short sequences for the packs that need them at the end;
    - ``SPREAD_SHORT`` (3, depth limits): like ``EVEN_PAIR``, but while the pack holds fewer
      sequences than the rest of the histogram needs per pack on average
      (``ceil(sequences * L / tokens)``, at least 3), it takes the longest sequence of at
      most ``g / (slots wanted)`` (also for its first sequence), so short sequences are
      spread over the packs instead of piling up at the end, where the depth limit would
      leave their packs part-empty;
    - ``ROOM_FOR_SHORTEST`` (4, depth limits that bind, ``sequences / depth > tokens / L``):
      the longest sequence that leaves room for the shortest one left in each other free slot;
    - ``TINY_BESIDE_HUGE`` (5, the same, for huge sequences beside tiny ones): like
      ``ROOM_FOR_SHORTEST``, but each pack starts with the longest sequence left, and where
      the shortest left do not fit in every free slot it takes the shortest (as many
      sequences as fit), so a huge sequence with little room still fills its slots with
      the tiniest ones (``ROOM_FOR_SHORTEST`` leaves it for the end, alone).

    A pack is repeated while every length it uses has enough copies left. Returns
    ``(items, offsets, counts)``: pack type ``t`` holds ``items[offsets[t]:offsets[t+1]]``
    (descending) and is used ``counts[t]`` times. Lengths without copies are skipped in
    ``O(1)`` amortised (a union-find over lengths), so the cost is about
    ``O(types * depth)`` plus the pair searches (``O(g)`` each).
    """
    rem, parent, items_left, tokens_left = _fill_state(h, L)
    items = np.zeros(1024, np.int64)
    offsets = np.zeros(1025, np.int64)
    counts = np.zeros(1024, np.int64)
    n_types = 0
    n_items = 0
    pack = np.zeros(L, np.int64)
    smin = 1
    while _largest_present(parent, L) > 0:
        target = 0
        if mode == SPREAD_SHORT and D > 0:
            # sequences per pack the rest needs on average (tokens / L packs)
            target = np.int64(np.ceil(items_left * L / max(tokens_left, 1)))
        n = 0
        gap = L
        while gap > 0 and (D == 0 or n < D):
            if mode >= ROOM_FOR_SHORTEST and D > 0:
                # many sequences per pack: the longest that leaves room for the shortest ones
                # left in every other free slot
                while smin <= L and rem[smin - 1] == 0:
                    smin += 1
                b = _largest_present(parent, gap - (D - n - 1) * smin) if gap > (D - n - 1) * smin else 0
                if mode == TINY_BESIDE_HUGE and n == 0:
                    b = _largest_present(parent, gap)  # the longest first, whatever room it leaves ...
                elif b == 0 and mode == TINY_BESIDE_HUGE and smin <= gap:
                    b = smin  # ... and where the shortest do not fit in every slot, as many as fit
                if b == 0:
                    b = _largest_present(parent, gap)  # best fit
            else:
                spread = 0
                if mode == SPREAD_SHORT and D > 0:
                    want = min(D, max(2, target)) - n  # sequences this pack should still take
                    if want >= 3:
                        spread = want
                if spread > 0:
                    b = _largest_present(parent, max(1, gap // spread))
                elif rem[gap - 1] > 0:  # close the pack exactly with one sequence ...
                    b = gap
                elif D == 0 or n + 2 <= D:  # ... or with two
                    b = _pair_partner(mode, gap, rem, parent, L)
                else:
                    b = 0
                if b == 0:
                    b = _largest_present(parent, gap)  # best fit
            if b == 0:
                break
            pack[n] = b
            n += 1
            gap -= b
            rem[b - 1] -= 1
            if rem[b - 1] == 0:
                parent[b] = b - 1
        for i in range(1, n):  # descending (the exact closer may be longer than the items before it)
            v = pack[i]
            j = i - 1
            while j >= 0 and pack[j] < v:
                pack[j + 1] = pack[j]
                j -= 1
            pack[j + 1] = v
        m = np.int64(1) << 62  # copies: as many as every length allows
        i = 0
        while i < n:
            l = pack[i]
            c = 1
            while i + c < n and pack[i + c] == l:
                c += 1
            m = min(m, rem[l - 1] // c)
            i += c
        if m > 0:
            for i in range(n):
                l = pack[i]
                rem[l - 1] -= m
                if rem[l - 1] == 0:
                    parent[l] = l - 1
        if n_items + n > items.size:
            items = _grown(items, n_items + n)
        if n_types == counts.size:
            offsets = _grown(offsets, 2 * counts.size + 1)
            counts = _grown(counts, 2 * counts.size)
        for i in range(n):
            items[n_items + i] = pack[i]
            items_left -= 1 + m
            tokens_left -= (1 + m) * pack[i]
        n_items += n
        counts[n_types] = 1 + m
        n_types += 1
        offsets[n_types] = n_items
    return items[:n_items].copy(), offsets[: n_types + 1].copy(), counts[:n_types].copy()


@jit
def pack_value_at_most(lens, prices, dear, L, den):
    """Whether every pack (any number of sequences, at most ``L`` tokens) of ``lens``
    (any copies) has a price sum of at most ``den``. Exact, in int64.

    ``dear[i]``: length ``i`` is worth more than ``den / L`` per token. Packs are split into
    their dear part (a DP over the dear lengths only: best price of a dear multiset of
    exactly ``s`` tokens) and the rest, which in ``c`` free tokens is worth at most
    ``den * c / L``, and exactly (a DP over the cheap lengths up to the largest ``c``
    where that estimate is not enough) where needed. Fast when the dear lengths are few
    or long, as in the L2 certificates; every price must be ``<= den <= 2**40``.
    """
    n = lens.size
    for i in range(n):
        if prices[i] > den:
            return False
    G = np.full(L + 1, -1, np.int64)
    G[0] = 0
    for i in range(n):
        if not dear[i]:
            continue
        l = lens[i]
        p = prices[i]
        for s in range(l, L + 1):
            if G[s - l] >= 0 and G[s - l] + p > G[s]:
                G[s] = G[s - l] + p
    # the largest free space whose cheap fill must be computed exactly
    C = 0
    for s in range(1, L + 1):
        if G[s] >= 0:
            c = L - s
            if G[s] + (den // L) * c + ((den % L) * c) // L > den and c > C:  # floor(den*c/L)
                C = c
    if C == 0:
        for s in range(1, L + 1):
            if G[s] > den:
                return False
        return True
    F = np.zeros(C + 1, np.int64)
    for i in range(n):
        if dear[i]:
            continue
        l = lens[i]
        p = prices[i]
        for c in range(l, C + 1):
            if F[c - l] + p > F[c]:
                F[c] = F[c - l] + p
    for s in range(1, L + 1):
        if G[s] >= 0:
            c = L - s
            fill = F[c] if c <= C else (den // L) * c + ((den % L) * c) // L
            if G[s] + fill > den:
                return False
    return True
