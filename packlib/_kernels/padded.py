"""Kernels of padded micro-batches (:func:`packlib.balance` with ``padded=True``): each
sequence its own right-padded row, so a micro-batch of ``n`` sequences whose longest has
``m`` tokens lays out ``n * m`` tokens, at most ``L``.

Lengths sorted longest first are cut greedily: a micro-batch opens at the longest sequence
left and takes the next ones while ``n * m <= L`` and ``n <= D``. No partition of the same
lengths into micro-batches of capacity ``L`` and depth ``D`` has fewer micro-batches (the
micro-batch of the longest sequence may as well hold the next-longest ones, by exchange),
so adding a sequence adds at most one micro-batch.
"""
import numpy as np

from .._jit import jit


@jit
def padded_cut(lens, L, D):
    """The greedy cut of ``lens`` (sorted longest first, each in ``[1, L]``) into micro-batches
    of at most ``L // longest`` and ``D`` sequences. Returns CSR offsets (int64)."""
    n = lens.size
    offsets = np.empty(n + 1, np.int64)
    offsets[0] = 0
    rows = np.int64(0)
    i = np.int64(0)
    while i < n:
        take = min(L // lens[i], D, n - i)
        i += take
        rows += 1
        offsets[rows] = i
    return offsets[:rows + 1]


@jit
def padded_count(lens, L, D):
    """How many micro-batches :func:`padded_cut` makes of ``lens`` (sorted longest first)."""
    n = lens.size
    rows = np.int64(0)
    i = np.int64(0)
    while i < n:
        i += min(L // lens[i], D)
        rows += 1
    return rows


@jit
def padded_costs(lens, offsets, a, b):
    """Each sequence's share of its micro-batch's padded cost: the cost ``a * m + b * m**2``
    of the micro-batch's longest ``m`` (its first: ``lens`` sorted longest first within each
    micro-batch), so that a micro-batch's shares sum to ``n * (a * m + b * m**2)``."""
    out = np.empty(lens.size, np.float64)
    for r in range(offsets.size - 1):
        m = np.float64(lens[offsets[r]])
        c = a * m + b * m * m
        for k in range(offsets[r], offsets[r + 1]):
            out[k] = c
    return out
