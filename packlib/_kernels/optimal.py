"""Kernels of the near-optimal histogram packer (:mod:`packlib.optimal`).

- :func:`price`: the pricing problem of Gilmore-Gomory column generation. Given a value
  ``y[l-1]`` per length and a cap on the copies of each length one pack may hold, it finds,
  for every length ``a``, the most valuable pack whose longest sequence is ``a`` (at most
  ``D`` sequences, at most ``L`` tokens). One dynamic programme over (lengths in ascending
  order, sequences used, tokens used) gives all of them, so a pricing round can add up to
  one improving column per length instead of one in total. With integer-valued ``y`` below
  2**45 every value the DP forms is an exact float64 integer, which is how the public code
  certifies its lower bound.
- :func:`round_columns`: round an LP solution down and take surplus copies out of the
  rounded packs, so that they cover at most the histogram; returns the residual.
"""
import numpy as np

from .._jit import jit


@jit
def price(y, caps, L, D, threshold, width, want_rows):
    """Best pack per longest length for values ``y`` (float64 ``(L,)``).

    Parameters: ``caps[l-1]`` most copies of length ``l`` in one pack (0: not allowed);
    ``D`` most sequences per pack, or ``0`` for unlimited; ``threshold``: only packs worth
    more than this are returned; ``width``: most sequences any pack can hold (row width);
    ``want_rows``: build the packs (needs ``n_lengths * (D+1) * (L+1)`` bytes, and then at
    most 255 copies of one length are considered); ``False`` only computes ``best``, exactly.

    Returns ``(best, values, rows)``: the value of the best pack overall, and one row of
    lengths (descending, zero-padded to ``width``) per returned pack with its value.
    """
    ncard = D + 1 if D > 0 else 1
    top = D if D > 0 else 0
    # the lengths that may take part, ascending
    n = 0
    for l in range(1, L + 1):
        if caps[l - 1] > 0 and y[l - 1] > 0.0:
            n += 1
    lens = np.empty(n, np.int64)
    j = 0
    for l in range(1, L + 1):
        if caps[l - 1] > 0 and y[l - 1] > 0.0:
            lens[j] = l
            j += 1
    # g[c, s]: best value of a pack of at most c sequences and at most s tokens (c ignored
    # when unlimited); choice[j, c, s]: copies of lens[j] in that optimum
    g = np.zeros((ncard, L + 1), np.float64)
    if want_rows:
        choice = np.zeros((n, ncard, L + 1), np.uint8)
    else:
        choice = np.zeros((1, 1, 1), np.uint8)
    best_with = np.full(n, -1.0)
    k_with = np.zeros(n, np.int64)
    for j in range(n):
        l = lens[j]
        v = y[l - 1]
        cap = min(caps[l - 1], 255) if want_rows else caps[l - 1]
        # value of the best pack whose longest length is l: k >= 1 copies on top of g
        bw = -1.0
        bk = 0
        for k in range(1, cap + 1):
            if k * l > L or (D > 0 and k > top):
                break
            c0 = top - k if D > 0 else 0
            cand = g[c0, L - k * l] + k * v
            if cand > bw:
                bw = cand
                bk = k
        best_with[j] = bw
        k_with[j] = bk
        # in-place update: c and s descending, so g[c-k, s-k*l] is still the old value
        for c in range(ncard - 1, -1, -1):
            if D > 0 and c == 0:
                break
            for s in range(L, l - 1, -1):
                cur = g[c, s]
                ck = 0
                for k in range(1, cap + 1):
                    if k * l > s or (D > 0 and k > c):
                        break
                    cand = g[c - k if D > 0 else 0, s - k * l] + k * v
                    if cand > cur:
                        cur = cand
                        ck = k
                if ck > 0:
                    g[c, s] = cur
                    if want_rows:
                        choice[j, c, s] = ck
    best = g[top, L]
    m = 0
    for j in range(n):
        if want_rows and best_with[j] > threshold:
            m += 1
    values = np.empty(m, np.float64)
    rows = np.zeros((m, width), np.int64)
    i = 0
    for j in range(n - 1, -1, -1):  # longest first
        if not want_rows or best_with[j] <= threshold:
            continue
        values[i] = best_with[j]
        k = k_with[j]
        w = 0
        for _ in range(k):
            rows[i, w] = lens[j]
            w += 1
        c = top - k if D > 0 else 0
        s = L - k * lens[j]
        for jj in range(j - 1, -1, -1):
            kk = choice[jj, c, s]
            for _ in range(kk):
                rows[i, w] = lens[jj]
                w += 1
            if D > 0:
                c -= kk
            s -= kk * lens[jj]
        i += 1
    return best, values, rows


@jit
def round_columns(rows, x, h):
    """Round the LP solution ``x`` (float64, one per row of lengths) down to whole packs
    covering at most ``h``.

    Surplus copies (where the rounded packs cover a length more often than ``h`` counts
    it) are taken out of the packs that use the most of the length, one group at a time,
    splitting a group when only part of it must give up a copy. Returns
    ``(rows, counts, residual)``: the rounded packs (possibly with new, thinner rows) and
    the histogram they leave uncovered.
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
    out[:S] = rows
    out_counts[:S] = counts
    n_out = S
    for l in range(1, L + 1):
        surplus = cover[l - 1] - h[l - 1]
        p = 0
        while surplus > 0 and p < n_out:
            if out_counts[p] > 0:
                # remove one copy of l from up to `surplus` packs of this group
                pos = -1
                for w in range(W):
                    if out[p, w] == l:
                        pos = w
                if pos >= 0:
                    take = min(out_counts[p], surplus)
                    if take < out_counts[p]:
                        out[n_out] = out[p]
                        out_counts[n_out] = out_counts[p] - take
                        out_counts[p] = take
                        n_out += 1
                    out[p, pos] = 0
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
    """The longer of two sequences that close ``gap`` exactly (mode 1: the longer as long
    as possible; modes 2-3: the pair as even as possible), or 0 if no pair is left."""
    if mode >= 2:
        # the shorter of the pair, longest first (so the pair is even)
        d = _largest_present(parent, gap // 2)
        tries = 0
        while d > 0 and tries < 4096:
            c = gap - d
            if c <= L and rem[c - 1] > (1 if c == d else 0):
                return c
            d = _largest_present(parent, d - 1)
            tries += 1
    elif mode == 1:
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
    out[: a.size] = a
    return out


@jit
def exact_fill(h, L, D, mode):
    """Pack a histogram pack by pack, aiming for packs that are exactly full.

    Each pack starts with the longest sequence left (except in modes 3 and 4). While there is room (and fewer than
    ``D`` sequences; ``D = 0``: unlimited), the gap ``g`` is filled by one rule:

    - ``mode 0``: the longest sequence that fits (best fit);
    - ``mode 1``: a sequence of length exactly ``g`` if one is left, else two that add up
      to ``g`` (the longer one as long as possible), else best fit;
    - ``mode 2``: like 1, but the pair as even as possible, which keeps the short
      sequences for the packs that need them at the end;
    - ``mode 3`` (depth limits): like 2, but while the pack holds fewer sequences than the
      rest of the histogram needs per pack on average (``ceil(sequences * L / tokens)``,
      at least 3), it takes the longest sequence of at most ``g / (slots wanted)`` (also
      for its first sequence), so short sequences are spread over the packs instead of
      piling up at the end, where the depth limit would leave their packs part-empty;
    - ``mode 4`` (depth limits that bind, ``sequences / depth > tokens / L``): the longest
      sequence that leaves room for the shortest one left in each other free slot;
    - ``mode 5`` (the same, for huge sequences beside tiny ones): like 4, but each pack
      starts with the longest sequence left, and where the shortest left do not fit in
      every free slot it takes the shortest (as many sequences as fit), so a huge
      sequence with little room still fills its slots with the tiniest ones (mode 4 leaves
      it for the end, alone).

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
        if mode == 3 and D > 0:
            # sequences per pack the rest needs on average (tokens / L packs)
            target = np.int64(np.ceil(items_left * L / max(tokens_left, 1)))
        n = 0
        gap = L
        while gap > 0 and (D == 0 or n < D):
            if mode >= 4 and D > 0:
                # many sequences per pack: the longest that leaves room for the shortest ones
                # left in every other free slot
                while smin <= L and rem[smin - 1] == 0:
                    smin += 1
                b = _largest_present(parent, gap - (D - n - 1) * smin) if gap > (D - n - 1) * smin else 0
                if mode == 5 and n == 0:
                    b = _largest_present(parent, gap)  # the longest first, whatever room it leaves ...
                elif b == 0 and mode == 5 and smin <= gap:
                    b = smin  # ... and where the shortest do not fit in every slot, as many as fit
                if b == 0:
                    b = _largest_present(parent, gap)  # best fit
            else:
                spread = 0
                if mode == 3 and D > 0:
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
