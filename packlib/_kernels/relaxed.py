"""Kernels of the grid relaxations of :mod:`packlib.optimal` (long context with a depth limit).

A length ``l`` of a histogram over ``1..L`` falls in the *bucket* ``ceil(l * K / L)`` of a
grid of ``K`` units: a pattern of buckets that fits ``K`` units is a pack of real lengths
that fits ``L`` tokens, whichever lengths of those buckets fill it.

- :func:`expand_bucket_packs`: patterns of buckets (an LP rounded to whole packs) as packs
  of the histogram's lengths, each bucket handing out its longest lengths first.
"""
import numpy as np

from .._jit import jit


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
