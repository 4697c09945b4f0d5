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

__all__ = ["nnls_recipe", "repack_underfilled", "refill_slots"]


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


def refill_slots(rows: np.ndarray, counts: np.ndarray, L: int, D: int, q: int = 1):
    """At a depth ``D`` below ``L``: refill the packs that have a free slot with the shortest
    sequences of the plan, when that takes fewer packs.

    A plan of length classes turned back into lengths leaves packs of fewer than ``D``
    sequences whose last slot a rounded-up class could not take, and fills their room with
    one longer sequence where two shorter ones would fit. Each such pack keeps its longest
    sequence and gives up the others; the packs of ``D`` sequences filled to at most ``L/2``
    give up theirs too. The kept packs, tightest first, then take the shortest sequences given
    up that fit (as many packs at once as take the same), and LPFHP packs what is left (on
    length classes of ``q`` tokens when ``q > 1``: LPFHP's time grows faster than ``L``). The
    plan is returned unchanged unless that takes fewer packs.
    """
    L, D = int(L), int(D)
    n, fill = np.count_nonzero(rows, axis=1), rows.sum(axis=1)
    open_, donor = n < D, (n == D) & (2 * fill <= L)
    if D >= L or not open_.any() or not donor.any():
        return rows, counts
    row_of, slot = np.nonzero(rows)
    given_up = donor[row_of] | (open_[row_of] & (slot > 0))
    pool = _histogram_of(rows[row_of, slot] - 1, counts[row_of], given_up, L)
    firsts, times = rows[open_, 0], counts[open_]
    order = np.argsort(firsts, kind="stable")[::-1]  # the longest first sequence: the tightest pack
    filled, filled_counts = _take_shortest(firsts[order], times[order], pool, L, D)
    rest_rows, rest_counts = _lpfhp_rest(pool, L, D, int(q))
    if int(rest_counts.sum()) >= int(counts[donor].sum()):
        return rows, counts
    keep = ~(open_ | donor)
    out, out_counts = _stack(rows[keep], counts[keep], filled, filled_counts)
    return _stack(out, out_counts, rest_rows, rest_counts)


def _lpfhp_rest(pool, L, D, q):
    """LPFHP of the histogram ``pool`` at capacity ``L`` and depth ``D``; with ``q > 1`` on
    ``L // q`` length classes, turned back into lengths."""
    from ._kernels.greedy import lpfhp

    if q == 1:
        return lpfhp(pool, L, D)
    from ._kernels.nnls_grid import classes_to_lengths

    G = L // q
    rows, counts = lpfhp(np.add.reduceat(pool, np.arange(G, dtype=np.int64) * q), G, D)
    return classes_to_lengths(rows, counts, pool, q, G)


def _take_shortest(firsts, times, pool, L, D):
    """Packs of one sequence (``times[i]`` of length ``firsts[i]``, in this order) each take
    the shortest sequences of ``pool`` (a histogram, drawn from in place) that fit, up to ``D``
    in all: rows (descending, zero-padded to ``D``) and counts."""
    out_rows, out_counts = [], []
    present = np.flatnonzero(pool).tolist()  # lengths - 1 in the pool; drawn from the front
    low = 0
    for first, left in zip(firsts.tolist(), times.tolist()):
        while left > 0:
            while low < len(present) and pool[present[low]] == 0:
                low += 1
            picks = _one_pack(pool, present, low, L - first, D - 1)
            same = left if not picks else min(left, min(int(pool[l - 1]) // t for l, t in picks))
            row = [first] + [l for l, t in reversed(picks) for _ in range(t)]
            out_rows.append(row + [0] * (D - len(row)))
            out_counts.append(same)
            for l, t in picks:
                pool[l - 1] -= same * t
            left -= same
    return np.array(out_rows, np.int64).reshape(-1, D), np.array(out_counts, np.int64)


def _one_pack(pool, present, low, room, slots):
    """The shortest sequences of ``pool`` (its lengths ``present[low:]``) that fit ``room``
    tokens in ``slots`` slots, smallest first: ``[(length, copies), ...]``."""
    picks = []
    for at in present[low:]:
        if slots == 0 or at + 1 > room:
            break
        take = min(int(pool[at]), slots, room // (at + 1))
        if take:
            picks.append((at + 1, take))
            slots, room = slots - take, room - take * (at + 1)
    return picks


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
