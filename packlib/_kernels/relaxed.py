"""Kernels of the grid relaxations of :mod:`packlib.optimal` (long context with a depth limit).

A length ``l`` of a histogram over ``1..L`` falls in the *bucket* ``ceil(l * K / L)`` of a
grid of ``K`` units: a pattern of buckets that fits ``K`` units is a pack of real lengths
that fits ``L`` tokens, whichever lengths of those buckets fill it.

- :func:`expand_bucket_packs`: patterns of buckets (an LP rounded to whole packs) as packs
  of the histogram's lengths, each bucket handing out its longest lengths first.
"""
import numpy as np

from .._jit import jit
from .optimal import _largest_present, _pair_partner


@jit
def _next_present(rem, cur, lo):
    """The longest length ``<= cur`` and ``>= lo`` with copies left, or ``lo - 1``."""
    while cur >= lo and rem[cur - 1] == 0:
        cur -= 1
    return cur


@jit
def expand_bucket_packs(rows, counts, h, lo, hi):
    """Packs of real lengths for ``counts[p]`` copies of each bucket pattern ``rows[p]``.

    ``rows``: ``(S, W)`` int64 bucket numbers, zero-padded; ``h``: the histogram (lengths
    ``1..L``); bucket ``b`` holds the lengths ``lo[b]..hi[b]`` (``lo[b] > hi[b]``: none).
    The patterns must not use a bucket more often than it has sequences. Identical packs
    come out as one row with a count: a run of copies lasts while every slot's current
    length has copies left. Returns ``(packs, pack_counts, residual)``: rows of lengths
    (zero-padded, ``W`` wide), their counts, and the histogram of what no pattern took.
    """
    S, W = rows.shape
    rem = h.copy()
    cur = hi.copy()
    n_len = 0
    for l in range(h.size):
        if h[l] > 0:
            n_len += 1
    out = np.zeros((S + 2 * n_len + 16, W), np.int64)
    out_counts = np.zeros(S + 2 * n_len + 16, np.int64)
    n_out = 0
    buckets = np.zeros(W, np.int64)
    mult = np.zeros(W, np.int64)
    for p in range(S):
        # the pattern's distinct buckets and how many slots each fills
        nb = 0
        for w in range(W):
            b = rows[p, w]
            if b <= 0:
                continue
            k = 0
            while k < nb and buckets[k] != b:
                k += 1
            if k == nb:
                buckets[nb] = b
                mult[nb] = 0
                nb += 1
            mult[k] += 1
        c = counts[p]
        while c > 0:
            run = c
            for k in range(nb):
                b = buckets[k]
                cur[b] = _next_present(rem, cur[b], lo[b])
                run = min(run, rem[cur[b] - 1] // mult[k])
            w = 0
            if run >= 1:  # `run` identical packs
                for k in range(nb):
                    b = buckets[k]
                    rem[cur[b] - 1] -= run * mult[k]
                    for _ in range(mult[k]):
                        out[n_out, w] = cur[b]
                        w += 1
            else:  # one pack whose slots of a bucket take different lengths
                run = 1
                for k in range(nb):
                    b = buckets[k]
                    for _ in range(mult[k]):
                        cur[b] = _next_present(rem, cur[b], lo[b])
                        rem[cur[b] - 1] -= 1
                        out[n_out, w] = cur[b]
                        w += 1
            out_counts[n_out] = run
            n_out += 1
            c -= run
    return out[:n_out], out_counts[:n_out], rem


@jit
def _take(rem, parent, l):
    """Take one copy of ``l``; a length that runs out leaves the union-find."""
    rem[l - 1] -= 1
    if rem[l - 1] == 0:
        parent[l] = l - 1


@jit
def _refill_one(row, n, gap, slots, rem, parent, L, shortest):
    """Fill the ``gap`` tokens and ``slots`` free places of one pack (``row[:n]`` holds its
    skeleton) from the pool: a sequence of exactly the gap, else an even pair that closes
    it, else the longest that leaves room for the shortest left in each other free slot,
    else the longest that fits. Returns the new ``n``."""
    while slots > 0 and gap > 0:
        l = _largest_present(parent, gap)
        if l == 0:
            break
        if l != gap and slots >= 2:
            c = _pair_partner(2, gap, rem, parent, L)
            if c > 0:
                _take(rem, parent, c)
                row[n] = c
                n += 1
                slots -= 1
                gap -= c
                continue
            if slots >= 2 and gap - (slots - 1) * shortest > 0:
                m = _largest_present(parent, gap - (slots - 1) * shortest)
                if m > 0:
                    l = m
        _take(rem, parent, l)
        row[n] = l
        n += 1
        slots -= 1
        gap -= l
    return n


@jit
def refill_skeletons(packs, counts, tau, extra, L, D):
    """Take the sequences shorter than ``tau`` out of every pack (``packs``: rows of real
    lengths, zero-padded; ``counts`` copies each) and put them back where they fit best:
    each copy, smallest gap first, is refilled from the pool of those sequences and
    ``extra`` (a histogram of sequences in no pack) by :func:`_refill_one`. The long
    sequences (the *skeletons*) stay where an LP put them; the short ones, which a coarse
    grid prices least accurately, are placed by their real lengths. Returns ``(packs,
    counts, left)``: rows ``D`` wide, counts (consecutive identical packs merged), and the
    histogram of the pool left over."""
    S, W = packs.shape
    rem = extra.copy()
    gaps = np.empty(S, np.int64)
    for p in range(S):
        total = 0
        for w in range(W):
            l = packs[p, w]
            if l >= tau:
                total += l
            elif l > 0:
                rem[l - 1] += counts[p]
        gaps[p] = L - total
    parent = np.arange(L + 1)
    shortest = 0
    for l in range(L, 0, -1):
        if rem[l - 1] == 0:
            parent[l] = l - 1
        else:
            shortest = l
    n_copies = 0
    for p in range(S):
        n_copies += counts[p]
    out = np.zeros((n_copies + 1, D), np.int64)
    out_counts = np.zeros(n_copies + 1, np.int64)
    n_out = 0
    row = np.zeros(D, np.int64)
    for p in np.argsort(gaps, kind="mergesort"):
        for _ in range(counts[p]):
            n = 0
            for w in range(W):
                if packs[p, w] >= tau:
                    row[n] = packs[p, w]
                    n += 1
            for w in range(n, D):
                row[w] = 0
            while shortest > 0 and shortest <= L and rem[shortest - 1] == 0:
                shortest += 1
            n = _refill_one(row, n, gaps[p], D - n, rem, parent, L, shortest if shortest <= L else L)
            same = n_out > 0
            if same:
                for w in range(D):
                    if out[n_out - 1, w] != row[w]:
                        same = False
                        break
            if same:
                out_counts[n_out - 1] += 1
            else:
                out[n_out] = row
                out_counts[n_out] = 1
                n_out += 1
    return out[:n_out], out_counts[:n_out], rem
