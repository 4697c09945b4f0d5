"""A plan's one form: each strategy descending, equal strategies merged, in a fixed order."""
from __future__ import annotations

import numpy as np

from ._validate import readonly_view

__all__ = ["canonical_rows", "csr_to_dense"]


def csr_to_dense(items: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Rows in CSR form as a zero-padded ``(rows, widest)`` int64 array."""
    sizes = np.diff(offsets)
    dense = np.zeros((sizes.size, int(sizes.max(initial=0))), dtype=np.int64)
    dense[np.repeat(np.arange(sizes.size), sizes), np.arange(items.size) - np.repeat(offsets[:-1], sizes)] = items
    return dense


#: The most entries (rows x widest row) a plan is put in canonical form with numpy; a
#: larger one goes to the kernel, which works in place of the ragged rows.
DENSE_CANONICAL_ENTRIES = 1 << 22


def canonical_rows(items: np.ndarray, offsets: np.ndarray, counts: np.ndarray):
    """A plan in its one form (CSR in, CSR out ``(items, offsets, counts)``): each row's
    non-zero entries descending, rows with a zero count or no entries dropped, equal rows
    merged (counts added), rows in lexicographically descending order (a longer row first
    where one is a prefix of the other). The same as the kernel
    :func:`packlib._kernels.csr.canonical_rows`, which it calls for very large plans only:
    a plan from a histogram packer is small, and numpy needs no compiling."""
    sizes = np.diff(offsets)
    if counts.size * int(sizes.max(initial=0)) > DENSE_CANONICAL_ENTRIES:
        from ._kernels.csr import canonical_rows as kernel

        return kernel(readonly_view(items), readonly_view(offsets), readonly_view(counts))
    nonzero = items > 0
    if not nonzero.all():  # a zero-padded dense plan: its zeros dropped first, so rows are only as wide as needed
        per_row = np.bincount(np.repeat(np.arange(sizes.size), sizes)[nonzero], minlength=sizes.size)
        items, offsets = items[nonzero], np.concatenate(([0], np.cumsum(per_row))).astype(np.int64)
    rows = -np.sort(-csr_to_dense(items, offsets), axis=1)  # each row descending, zeros last
    keep = (counts > 0) & (rows[:, 0] > 0) if rows.shape[1] else np.zeros(counts.size, bool)
    rows, counts = rows[keep], counts[keep]
    rows = rows[:, :int((rows > 0).sum(axis=1).max(initial=0))]
    if rows.size == 0:
        return np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64)
    order = np.lexsort([-rows[:, j] for j in range(rows.shape[1] - 1, -1, -1)])  # column 0 the first key
    rows, counts = rows[order], counts[order]
    first = np.flatnonzero(np.concatenate(([True], (rows[1:] != rows[:-1]).any(axis=1))))
    rows, counts = rows[first], np.add.reduceat(counts, first).astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum((rows > 0).sum(axis=1)))).astype(np.int64)
    return np.ascontiguousarray(rows[rows > 0], dtype=np.int64), offsets, counts
