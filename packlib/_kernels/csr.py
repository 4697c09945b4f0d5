"""Operations on packs stored as CSR (offsets / indices / lengths)."""
import numpy as np

from .._jit import jit
from .sorting import sort_ints


@jit
def csr_take(offsets, indices, lengths, order):
    """The packs ``order[0], order[1], ...`` as a new CSR triple."""
    new_offsets = np.empty(order.size + 1, np.int64)
    new_offsets[0] = 0
    for k in range(order.size):
        p = order[k]
        new_offsets[k + 1] = new_offsets[k] + offsets[p + 1] - offsets[p]
    n = new_offsets[order.size]
    new_indices = np.empty(n, np.int64)
    new_lengths = np.empty(n, np.int64)
    for k in range(order.size):
        p = order[k]
        src = offsets[p]
        dst = new_offsets[k]
        for t in range(offsets[p + 1] - src):
            new_indices[dst + t] = indices[src + t]
            new_lengths[dst + t] = lengths[src + t]
    return new_offsets, new_indices, new_lengths


@jit
def csr_from_assignment(order, pack_of, n_packs):
    """CSR packs from items visited in ``order`` and the pack each visit went to.

    Within a pack, items keep the visiting order.
    """
    offsets = np.zeros(n_packs + 1, np.int64)
    for k in range(pack_of.size):
        offsets[pack_of[k] + 1] += 1
    for p in range(n_packs):
        offsets[p + 1] += offsets[p]
    cursor = offsets[:-1].copy()
    indices = np.empty(pack_of.size, np.int64)
    for k in range(pack_of.size):
        p = pack_of[k]
        indices[cursor[p]] = order[k]
        cursor[p] += 1
    return offsets, indices


@jit
def by_size(size, n, limit):
    """The packs ``t < n`` with ``size[t] < limit`` (``size[t] >= 0``), smallest first and in
    pack order among equals: a stable counting sort, ``O(n + max size)``."""
    top = np.int64(0)
    for t in range(n):
        top = max(top, size[t]) if size[t] < limit else top
    first = np.zeros(top + 2, np.int64)  # where each size starts in ``order``, then its next slot
    for t in range(n):
        if size[t] < limit:
            first[size[t] + 1] += 1
    for s in range(top + 1):
        first[s + 1] += first[s]
    order = np.empty(first[top + 1], np.int64)
    for t in range(n):
        if size[t] < limit:
            order[first[size[t]]] = t
            first[size[t]] += 1
    return order


@jit
def _row_less(items, offsets, a, b):
    """Row ``a`` before row ``b`` in lexicographically descending order (a longer row
    first when one is a prefix of the other)."""
    i, j = offsets[a], offsets[b]
    ea, eb = offsets[a + 1], offsets[b + 1]
    while i < ea and j < eb:
        if items[i] != items[j]:
            return items[i] > items[j]
        i += 1
        j += 1
    return (ea - offsets[a]) > (eb - offsets[b])


@jit
def _rows_equal(items, offsets, a, b):
    if offsets[a + 1] - offsets[a] != offsets[b + 1] - offsets[b]:
        return False
    for k in range(offsets[a + 1] - offsets[a]):
        if items[offsets[a] + k] != items[offsets[b] + k]:
            return False
    return True


@jit
def _merge_sort_rows(items, offsets, order, tmp, lo, hi):
    """Stable merge sort of ``order[lo:hi]`` by :func:`_row_less` (iterative, bottom-up)."""
    n = hi - lo
    width = 1
    src, dst = order, tmp
    while width < n:
        for start in range(lo, hi, 2 * width):
            mid = min(start + width, hi)
            end = min(start + 2 * width, hi)
            i, j, k = start, mid, start
            while i < mid and j < end:
                if _row_less(items, offsets, src[j], src[i]):
                    dst[k] = src[j]
                    j += 1
                else:
                    dst[k] = src[i]
                    i += 1
                k += 1
            while i < mid:
                dst[k] = src[i]
                i += 1
                k += 1
            while j < end:
                dst[k] = src[j]
                j += 1
                k += 1
        src, dst = dst, src
        width *= 2
    if src is not order:
        for k in range(lo, hi):
            order[k] = src[k]


@jit
def canonical_rows(items, offsets, counts):
    """A plan in its one form: each row's non-zero entries descending, rows with a zero
    count or no entries dropped, equal rows merged (counts added), rows in lexicographically
    descending order. CSR in (``items``, ``offsets``), CSR out ``(items, offsets, counts)``."""
    S = counts.size
    keep = np.zeros(S, np.bool_)
    sizes = np.zeros(S, np.int64)
    for s in range(S):
        for k in range(offsets[s], offsets[s + 1]):
            if items[k] > 0:
                sizes[s] += 1
        keep[s] = counts[s] > 0 and sizes[s] > 0
    n_rows = np.int64(0)  # not a literal 0, which numba would compile the callees for as well
    total = 0
    for s in range(S):
        if keep[s]:
            n_rows += 1
            total += sizes[s]
    rows = np.empty(total, np.int64)
    off = np.zeros(n_rows + 1, np.int64)
    cnt = np.empty(n_rows, np.int64)
    r = 0
    for s in range(S):
        if not keep[s]:
            continue
        t = off[r]
        for k in range(offsets[s], offsets[s + 1]):
            if items[k] > 0:
                rows[t] = items[k]
                t += 1
        sort_ints(rows[off[r]:t])
        lo, hi = off[r], t - 1
        while lo < hi:  # descending
            rows[lo], rows[hi] = rows[hi], rows[lo]
            lo += 1
            hi -= 1
        off[r + 1] = t
        cnt[r] = counts[s]
        r += 1
    order = np.arange(n_rows)
    _merge_sort_rows(rows, off, order, np.empty(n_rows, np.int64), np.int64(0), n_rows)
    out_items = np.empty(total, np.int64)
    out_off = np.zeros(n_rows + 1, np.int64)
    out_cnt = np.zeros(n_rows, np.int64)
    m = -1
    for q in range(n_rows):
        s = order[q]
        if m >= 0 and _rows_equal(rows, off, s, order[q - 1]):
            out_cnt[m] += cnt[s]
            continue
        m += 1
        size = off[s + 1] - off[s]
        for k in range(size):  # a loop, not a slice copy: no shape-error path to compile
            out_items[out_off[m] + k] = rows[off[s] + k]
        out_off[m + 1] = out_off[m] + size
        out_cnt[m] = cnt[s]
    m += 1
    return out_items[:out_off[m]].copy(), out_off[:m + 1].copy(), out_cnt[:m].copy()
