"""NNLSHP's pricing: the strategy with the largest gradient, by dynamic programming.

A strategy is a multiset of at most ``D`` lengths summing exactly to ``L``; its gradient is
``sum_{l in s} rho_l``. :func:`_price` finds the best one over (parts, total length) in
``O(D * L**2 / 2)``, never listing strategies (``docs/design.md``).
"""
import numpy as np

from .._jit import jit


@jit
def _best_split(f, r, rho, s, hi):
    """``max_{1 <= l < hi} f[r, s - l] + rho[l - 1]``, with four running maxima (``max`` is
    exact, so the value is that of one running maximum)."""
    neg = -np.inf
    m0 = neg
    m1 = neg
    m2 = neg
    m3 = neg
    l = 1
    while l + 3 < hi:
        m0 = max(m0, f[r, s - l] + rho[l - 1])
        m1 = max(m1, f[r, s - l - 1] + rho[l])
        m2 = max(m2, f[r, s - l - 2] + rho[l + 1])
        m3 = max(m3, f[r, s - l - 3] + rho[l + 2])
        l += 4
    while l < hi:
        m0 = max(m0, f[r, s - l] + rho[l - 1])
        l += 1
    return max(max(m0, m1), max(m2, m3))


@jit
def _first_split(f, r, rho, s, hi, value):
    """The first ``l`` whose ``f[r, s - l] + rho[l - 1]`` is ``value`` (the maximum)."""
    for l in range(1, hi):
        if f[r, s - l] + rho[l - 1] == value:
            return l
    return 0


@jit
def _price(rho, L, D, f, parts):
    """Best strategy for gradient ``rho``: max of ``sum rho[l-1]`` over multisets of at most
    ``D`` lengths summing to exactly ``L``. Writes the lengths into ``parts``; returns
    ``(value, n_parts)``. ``f`` is ``(D+1, L+1)`` scratch (only row 0 if D >= L). The
    dynamic programme keeps values only; the parts are recovered on the way back as the
    first length reaching each value (the choice a running arg-max would make).
    """
    neg = -np.inf
    if D >= L:  # unbounded: g[s] = max_l g[s-l] + rho[l-1]
        f[0, 0] = 0.0
        for s in range(1, L + 1):
            f[0, s] = _best_split(f, 0, rho, s, s + 1)
        n = 0
        s = L
        while s > 0:
            l = _first_split(f, 0, rho, s, s + 1, f[0, s])
            parts[n] = l
            s -= l
            n += 1
        return f[0, L], n
    # f[c, s]: best sum of exactly c lengths totalling s; layer D is only needed at s = L
    for s in range(L + 1):
        f[1, s] = rho[s - 1] if s >= 1 else neg
    for c in range(2, D + 1):
        lo = L if c == D else c
        for s in range(lo, L + 1):
            # two parts are symmetric: the shorter one suffices
            f[c, s] = _best_split(f, c - 1, rho, s, s // 2 + 1 if c == 2 else s - c + 2)
    best = neg
    best_c = 1
    for c in range(1, D + 1):
        if f[c, L] > best:
            best = f[c, L]
            best_c = c
    s = L
    for c in range(best_c, 0, -1):
        l = s if c == 1 else _first_split(f, c - 1, rho, s, s // 2 + 1 if c == 2 else s - c + 2, f[c, s])
        parts[best_c - c] = l
        s -= l
    return best, best_c
