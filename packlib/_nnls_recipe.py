"""The NNLSHP recipe around its kernels: solve, round, repeat; settle the dummies; repair.

The recipe's outer steps run here, in numpy, between calls to separately compiled kernels
(:func:`~packlib._kernels.nnls.nnls_columns` for each weighted NNLS solve,
:func:`~packlib._kernels.nnls.settle_dummies` for the dummy slots,
:func:`~packlib._kernels.greedy.lpfhp` for what is left over and for the repair). They are a
few dozen array operations per solve, so nothing is lost by leaving them to numpy, and each
kernel is compiled once on a new machine instead of again inside one large kernel that links
them all (the first call's compile is most of its time).
"""
from __future__ import annotations

import numpy as np

__all__ = ["nnls_recipe", "repack_underfilled"]


def nnls_recipe(h: np.ndarray, L: int, D: int, w: np.ndarray, max_iterations: int):
    """The NNLSHP recipe on histogram ``h`` (``int64``, ``L`` lengths) at depth ``D``
    (``L`` or more: unlimited) with residual weights ``w``: the plan's rows (descending,
    zero-padded), counts and the number of NNLS solves. Only real sequences remain."""
    from ._kernels.greedy import lpfhp
    from ._kernels.nnls import nnls_columns, settle_dummies

    L, D, width = int(L), int(D), min(int(D), int(L))
    w2 = w * w
    b = np.array(h, dtype=np.int64)
    padding = np.zeros(L + 1, np.int64)  # dummy slots per length
    groups, group_counts = [], []
    iterations = 0
    for _ in range(max_iterations):
        left = int(b.sum())
        if left < 100 and iterations > 0 or left == 0:
            break
        col_len, col_mult, col_n, x = nnls_columns(b.astype(np.float64), w2, L, D, 20 * L + 100)
        iterations += 1
        counts = np.where(x < 2.0, np.rint(x), np.floor(x)).astype(np.int64)
        taken = np.flatnonzero(counts > 0)
        if taken.size == 0:
            break
        lens, mults, row_of = _column_parts(col_len[taken], col_mult[taken], col_n[taken])
        groups.append(_column_rows(lens, mults, row_of, taken.size, width))
        group_counts.append(counts[taken])
        used = np.zeros(L + 1, np.int64)
        np.add.at(used, lens, mults * counts[taken][row_of])
        resid = b - used[1:]
        padding[1:] -= np.minimum(resid, 0)
        b = np.maximum(resid, 0)
    rows = np.concatenate(groups) if groups else np.zeros((0, width), np.int64)
    counts = np.concatenate(group_counts) if group_counts else np.zeros(0, np.int64)
    rows, counts = settle_dummies(np.ascontiguousarray(rows), counts, b, padding)
    rest_rows, rest_counts = lpfhp(b, L, D)  # whatever is still left
    return _stack(rows, counts, rest_rows, rest_counts), iterations


def _column_parts(col_len, col_mult, col_n):
    """Each NNLS column's distinct lengths (ascending, ``col_n`` of them) in descending order,
    flat: ``(lengths, multiplicities, column of each)``."""
    back = col_n[:, None] - 1 - np.arange(col_len.shape[1])  # the entries of each row, last first
    valid = back >= 0
    at = np.maximum(back, 0)
    lens = np.take_along_axis(col_len, at, axis=1)[valid]
    mults = np.take_along_axis(col_mult, at, axis=1)[valid]
    return lens, mults, np.repeat(np.arange(col_n.size), col_n)


def _column_rows(lens, mults, row_of, n_rows, width):
    """Rows of lengths, descending and zero-padded to ``width``, of the columns' parts."""
    parts, part_row = np.repeat(lens, mults), np.repeat(row_of, mults)
    sizes = np.bincount(part_row, minlength=n_rows)
    rows = np.zeros((n_rows, width), np.int64)
    rows[part_row, np.arange(parts.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)] = parts
    return rows


def _stack(rows, counts, more_rows, more_counts):
    """``(rows, counts)`` followed by ``(more_rows, more_counts)``, zero-padded to one width."""
    width = max(rows.shape[1], more_rows.shape[1])
    out = np.zeros((counts.size + more_counts.size, width), np.int64)
    out[:counts.size, :rows.shape[1]] = rows
    out[counts.size:, :more_rows.shape[1]] = more_rows
    return out, np.concatenate([counts, more_counts]).astype(np.int64)


def repack_underfilled(rows: np.ndarray, counts: np.ndarray, L: int, D: int):
    """Repack the packs filled below a threshold with LPFHP when that takes fewer packs.

    Removing NNLS's dummy slots leaves some packs nearly empty (a long strategy whose long
    parts were surplus). Thresholds from L/2 up to L are tried; the best total wins, and
    the plan is returned unchanged if no threshold helps.
    """
    from ._kernels.greedy import lpfhp

    L, D = int(L), int(D)
    fill = rows.sum(axis=1)
    row_of, slot = np.nonzero(rows)  # every sequence of the plan: its pack group and length
    lengths, times = rows[row_of, slot] - 1, counts[row_of]
    best_total, best_threshold = int(counts.sum()), -1
    for k in range(5):
        threshold = L - (L >> (k + 1)) if k < 4 else L  # L/2, 3L/4, 7L/8, 15L/16, L
        below = fill < threshold
        sub = _histogram_of(lengths, times, below[row_of], L)
        total = int(counts[~below].sum())
        if total + _packs_needed(sub, L, D) >= best_total:
            continue  # no packing of these sequences can win: LPFHP's would not either
        total += int(lpfhp(sub, L, D)[1].sum())
        if total < best_total:
            best_total, best_threshold = total, threshold
    if best_threshold < 0:
        return rows, counts
    below = fill < best_threshold
    sub_rows, sub_counts = lpfhp(_histogram_of(lengths, times, below[row_of], L), L, D)
    return _stack(rows[~below], counts[~below], sub_rows, sub_counts)


def _histogram_of(lengths, times, chosen, L):
    """The length histogram (``int64``, ``L`` lengths) of the ``chosen`` sequences (0-based
    ``lengths``, each ``times`` times): exact, every count far below 2**53."""
    return np.rint(np.bincount(lengths[chosen], weights=times[chosen], minlength=L)).astype(np.int64)


def _packs_needed(sub, L, D) -> int:
    """Packs any packing of ``sub`` needs: by tokens, by depth, one per length above L/2."""
    lengths = np.arange(1, sub.size + 1)
    tokens, n = int(lengths @ sub), int(sub.sum())
    big = int(sub[2 * lengths > L].sum())
    return max(-(-tokens // L), -(-n // D), big)
