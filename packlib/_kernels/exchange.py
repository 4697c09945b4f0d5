"""Depth repair by exchanges: make a plan of exactly-full packs respect a depth limit.

The unlimited exact fill (:func:`packlib._kernels.optimal.exact_fill`) packs long context
into packs that are exactly full, but piles the short sequences into a few very deep packs
at the end. An *exchange* moves ``j`` sequences of a pack that is too deep (``m`` tokens
together) into a pack with room for ``j - 1`` more, which gives back one sequence of
exactly ``m`` tokens: both stay just as full, and the deep pack holds ``j - 1`` fewer
sequences. The ``j`` sequences need not be the shortest: any ``j`` of the deep pack's
sequences whose lengths add up to a length some roomy pack holds will do, which is what
makes partners easy to find (the deep packs hold many lengths close together).

Packs are rows of one growable arena (a pack of 2,500 tiny sequences at ``L = 131,072``
costs its items, not a row that wide for every pack); a row never changes once written, an
exchange appends the two new rows. Whole groups of identical packs are exchanged at once.
"""
import numpy as np

from .._jit import jit
from .csr import by_size
from .optimal import _grown
from .sorting import sort_ints

PAIR_WIDTH = 6  # packs of at most this many sequences offer pairs (15 sums each) to exchange


@jit
def pack_arena(items, offsets, counts):
    """The packs as rows of one growable arena: row ``t`` holds
    ``arena[start[t]:start[t] + size[t]]`` (room for twice as many rows and items)."""
    T = counts.size
    n = offsets[T]
    arena = np.zeros(2 * n + 16, np.int64)
    for i in range(n):
        arena[i] = items[i]
    start = np.zeros(2 * T + 16, np.int64)
    size = np.zeros(2 * T + 16, np.int64)
    cnt = np.zeros(2 * T + 16, np.int64)
    for t in range(T):
        start[t] = offsets[t]
        size[t] = offsets[t + 1] - offsets[t]
        cnt[t] = counts[t]
    return arena, start, size, cnt


@jit
def _grown_rows(start, size, cnt, n_rows):
    """The row starts, sizes and counts in arrays twice as long."""
    cap = 2 * start.shape[0]
    s1 = np.zeros(cap, np.int64)
    s2 = np.zeros(cap, np.int64)
    c2 = np.zeros(cap, np.int64)
    for t in range(n_rows):
        s1[t], s2[t], c2[t] = start[t], size[t], cnt[t]
    return s1, s2, c2


@jit
def kept_rows(arena, start, size, cnt, n_rows):
    """The rows still used (count > 0) as CSR ``(items, offsets, counts)``."""
    m = 0
    total = 0
    for r in range(n_rows):
        if cnt[r] > 0:
            m += 1
            total += size[r]
    items = np.empty(total, np.int64)
    offsets = np.zeros(m + 1, np.int64)
    counts = np.empty(m, np.int64)
    i = 0
    for r in range(n_rows):
        if cnt[r] > 0:
            for k in range(size[r]):  # a loop, not a slice copy: no shape-error path to compile
                items[offsets[i] + k] = arena[start[r] + k]
            offsets[i + 1] = offsets[i] + size[r]
            counts[i] = cnt[r]
            i += 1
    return items, offsets, counts


@jit
def _holder_lists(arena, start, size, T, L, D):
    """The packs with room (fewer than ``D`` sequences) listed under each length they hold,
    most room first (CSR: ``holders[hstart[l]:hstart[l + 1]]``)."""
    hstart = np.zeros(L + 2, np.int64)
    for t in range(T):
        if size[t] < D:
            for i in range(size[t]):
                v = arena[start[t] + i]
                if i == 0 or v != arena[start[t] + i - 1]:
                    hstart[v + 1] += 1
    for x in range(1, L + 2):
        hstart[x] += hstart[x - 1]
    holders = np.zeros(hstart[L + 1], np.int64)
    fill = hstart.copy()
    for t in by_size(size, T, D):  # fewest sequences (most room) first, stable
        for i in range(size[t]):
            v = arena[start[t] + i]
            if i == 0 or v != arena[start[t] + i - 1]:
                holders[fill[v]] = t
                fill[v] += 1
    return hstart, holders


@jit
def _tree_set(tree, P, leaf, value):
    """Set a leaf of the max segment tree ``tree`` (``P`` leaves) and its ancestors."""
    i = leaf + P
    tree[i] = value
    i >>= 1
    while i >= 1:
        tree[i] = max(tree[2 * i], tree[2 * i + 1])
        i >>= 1


@jit
def _tree_first(tree, P, lo, hi, t):
    """The leftmost leaf in ``[lo, hi]`` whose value is at least ``t``, or -1."""
    if lo > hi:
        return -1
    i = lo + P
    while True:
        if tree[i] >= t:
            while i < P:  # descend to the leftmost such leaf
                i = 2 * i if tree[2 * i] >= t else 2 * i + 1
            return i - P if i - P <= hi else -1
        while i & 1:  # a right child: climb until a left one, then step right
            i >>= 1
        if i == 0:
            return -1
        i += 1


@jit
def _retire(q, arena, start, size, cnt, hstart, holders, hptr, tree, P, D):
    """Pack ``q`` has no copies left: each length it holds is now offered by the next
    holder in its list (or none)."""
    for i in range(size[q]):
        v = arena[start[q] + i]
        if i > 0 and v == arena[start[q] + i - 1]:
            continue
        h = hptr[v]
        while h < hstart[v + 1] and cnt[holders[h]] == 0:
            h += 1
        hptr[v] = h
        _tree_set(tree, P, v, D - size[holders[h]] if h < hstart[v + 1] else 0)


@jit
def _exact_subset(row, n, j, m, prefix, taken):
    """Mark in ``taken[:n]`` ``j`` items of ``row`` (descending, ``prefix`` its prefix sums)
    that add up to exactly ``m``: a window of ``j`` consecutive items, or the window just
    below ``m`` with one item swapped for the item before it. Returns whether it found one."""
    if prefix[j] < m or prefix[n] - prefix[n - j] > m:
        return False
    lo, hi = 0, n - j  # the last window s with sum >= m (window sums fall with s)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if prefix[mid + j] - prefix[mid] >= m:
            lo = mid
        else:
            hi = mid - 1
    s = lo
    swap_out, swap_in = -1, -1
    if prefix[s + j] - prefix[s] != m:
        d = m - (prefix[s + j + 1] - prefix[s + 1])  # window s + 1 is d short
        want = row[s] - d  # swap out an item of this length for row[s]
        for c in range(s + 1, s + j + 1):
            if row[c] == want:
                swap_out, swap_in = c, s
                break
        if swap_out < 0:
            return False
        s += 1
    taken[:n] = False
    taken[s : s + j] = True
    if swap_out >= 0:
        taken[swap_out] = False
        taken[swap_in] = True
    return True


@jit
def _sort_down(arena, lo, hi):
    """Insertion sort of ``arena[lo:hi]``, descending (rows are nearly sorted already)."""
    for i in range(lo + 1, hi):
        v = arena[i]
        x = i - 1
        while x >= lo and arena[x] < v:
            arena[x + 1] = arena[x]
            x -= 1
        arena[x + 1] = v


@jit
def _exchange(arena, top, start, size, cnt, n_rows, p, q, taken, m1, m2, k):
    """Append the two packs of one exchange as rows ``n_rows`` and ``n_rows + 1`` (at
    ``arena[top:]``), ``k`` of each: ``p`` with its ``taken`` items replaced by the
    sequences ``m1`` and ``m2`` of ``q`` (``m2 = 0``: ``m1`` alone), and ``q`` with those
    replaced by the ``taken`` items (both descending). Returns the new top."""
    n = size[p]
    w = top
    for i in range(n):
        if not taken[i]:
            arena[w] = arena[start[p] + i]
            w += 1
    arena[w] = m1
    w += 1
    if m2 > 0:
        arena[w] = m2
        w += 1
    _sort_down(arena, top, w)
    start[n_rows], size[n_rows], cnt[n_rows] = top, w - top, k
    r0 = w
    drop1, drop2 = True, m2 > 0
    for i in range(size[q]):
        v = arena[start[q] + i]
        if drop1 and v == m1:
            drop1 = False
        elif drop2 and v == m2:
            drop2 = False
        else:
            arena[w] = v
            w += 1
    for i in range(n):
        if taken[i]:
            arena[w] = arena[start[p] + i]
            w += 1
    _sort_down(arena, r0, w)
    start[n_rows + 1], size[n_rows + 1], cnt[n_rows + 1] = r0, w - r0, k
    return w


@jit
def _scratch(size, T, D):
    """Prefix sums and a taken-mask as wide as the widest of rows ``0..T-1`` (the rows a
    pass appends are never wider than the deep row they came from, or than ``D``)."""
    widest = D
    for t in range(T):
        widest = max(widest, size[t])
    return np.zeros(widest + 1, np.int64), np.zeros(widest, np.bool_)


@jit
def _apply(arena, top, start, size, cnt, n_rows, p, q, taken, m1, m2, c):
    """One exchange of ``p`` (``c`` copies left) with ``q``, as many copies as both have,
    the arrays grown as needed: ``(arena, start, size, cnt, n_rows, top, copies left)``."""
    if n_rows + 2 > start.shape[0]:
        start, size, cnt = _grown_rows(start, size, cnt, n_rows)
    need = top + 2 * size[p] + size[q]  # the new p holds at most size[p], the new q size[q] + size[p]
    if need > arena.shape[0]:
        arena = _grown(arena, need)
    k = min(c, cnt[q])
    top = _exchange(arena, top, start, size, cnt, n_rows, p, q, taken, m1, m2, k)
    cnt[q] -= k
    cnt[p] = c - k
    return arena, start, size, cnt, n_rows + 2, top, c - k


@jit
def _find_partner(row, n, D, L, prefix, taken, tree, P, hptr, holders, tries):
    """A roomy pack to exchange with: ``(q, m)`` with the ``taken`` items of ``row`` adding
    up to ``m``, a length ``q`` holds, and ``q`` with room for them less one; ``(-1, 0)`` if
    none is found. Takes as many items as it can (``j`` from ``n - D + 1``, at most ``D``,
    down to 2), the shortest length that fits first, at most ``tries`` lengths per ``j``."""
    for j in range(min(n - D + 1, D), 1, -1):
        lo = prefix[n] - prefix[n - j]  # the j shortest
        hi = min(prefix[j], L)  # ... and the j longest
        m = _tree_first(tree, P, lo, hi, j - 1)
        t = 0
        while m >= 0 and t < tries:
            if _exact_subset(row, n, j, m, prefix, taken):
                return holders[hptr[m]], m
            m = _tree_first(tree, P, m + 1, hi, j - 1)
            t += 1
        if m >= 0:  # lengths left untried: try the sums of j consecutive items instead
            last = -1
            for s in range(n - j + 1):
                m = prefix[s + j] - prefix[s]
                if m != last and m <= L and tree[P + m] >= j - 1:
                    taken[:n] = False
                    taken[s : s + j] = True
                    return holders[hptr[m]], m
                last = m
    return -1, 0


@jit
def repair_pass(arena, start, size, cnt, T, top, L, D):
    """One pass of exchanges over rows ``0..T-1`` (partners: the rows with room among
    them). A deep row that finds no partner keeps its copies (a later pass, with the
    packs this one made as partners, may find one). Returns ``(arena, start, size, cnt,
    n_rows, exchanges)``."""
    n_rows = T
    hstart, holders = _holder_lists(arena, start, size, T, L, D)
    hptr = hstart[: L + 1].copy()
    P = 1
    while P < L + 1:
        P *= 2
    tree = np.zeros(2 * P, np.int64)  # per length: the most room of a pack holding it
    for v in range(1, L + 1):
        if hstart[v] < hstart[v + 1]:
            tree[P + v] = D - size[holders[hstart[v]]]
    for i in range(P - 1, 0, -1):
        tree[i] = max(tree[2 * i], tree[2 * i + 1])
    prefix, taken = _scratch(size, T, D)
    exchanges = 0
    p = np.int64(0)  # not a literal 0, which numba would compile the callees for as well
    while p < n_rows:  # the deep rows an exchange appends are treated again
        n = size[p]
        c = cnt[p]
        if n > D and c > 0:
            for i in range(n):
                prefix[i + 1] = prefix[i] + arena[start[p] + i]
        while n > D and c > 0:
            q, m = _find_partner(arena[start[p] : start[p] + n], n, D, L, prefix, taken, tree, P, hptr, holders, 16)
            if q < 0:
                break
            arena, start, size, cnt, n_rows, top, c = _apply(arena, top, start, size, cnt, n_rows, p, q, taken, m, np.int64(0), c)
            exchanges += 1
            if cnt[q] == 0:
                _retire(q, arena, start, size, cnt, hstart, holders, hptr, tree, P, D)
        p += 1
    return arena, start, size, cnt, n_rows, exchanges


@jit
def _pair_sums(arena, start, size, t, out):
    """The distinct sums of two items of row ``t``, into ``out``; returns how many."""
    k = 0
    for i in range(size[t]):
        for x in range(i + 1, size[t]):
            out[k] = arena[start[t] + i] + arena[start[t] + x]
            k += 1
    sort_ints(out[:k])
    d = 0
    for i in range(k):
        if i == 0 or out[i] != out[i - 1]:
            out[d] = out[i]
            d += 1
    return d


@jit
def _pair_index(arena, start, size, T, L, D, width):
    """The rows with room and at most ``width`` sequences, listed under each sum of two of
    their sequences (CSR over sums ``0..L``)."""
    sums = np.zeros(width * (width - 1) // 2 + 1, np.int64)
    pstart = np.zeros(L + 2, np.int64)
    for t in range(T):
        if 2 <= size[t] <= width and size[t] < D:
            for i in range(_pair_sums(arena, start, size, t, sums)):
                if sums[i] <= L:
                    pstart[sums[i] + 1] += 1
    for x in range(1, L + 2):
        pstart[x] += pstart[x - 1]
    rows = np.zeros(pstart[L + 1], np.int64)
    fill = pstart.copy()
    for t in range(T):
        if 2 <= size[t] <= width and size[t] < D:
            for i in range(_pair_sums(arena, start, size, t, sums)):
                if sums[i] <= L:
                    rows[fill[sums[i]]] = t
                    fill[sums[i]] += 1
    return pstart, rows


@jit
def _pair_of(arena, start, size, q, m):
    """Two items of row ``q`` adding up to ``m``: ``(a, b)``, or ``(0, 0)``."""
    for i in range(size[q]):
        for x in range(i + 1, size[q]):
            if arena[start[q] + i] + arena[start[q] + x] == m:
                return arena[start[q] + i], arena[start[q] + x]
    return 0, 0


@jit
def _pair_partner(n, D, L, prefix, taken, size, cnt, pstart, prows, scan):
    """Like :func:`_find_partner`, for a pack that gives back two sequences: ``(q, m)`` with
    ``j >= 3`` consecutive items of the row (``taken``) adding up to ``m``, a sum of two
    sequences of ``q``, and ``q`` with room for ``j - 2`` more; ``(-1, 0)`` if none (at
    most ``scan`` rows looked at per sum)."""
    for j in range(min(n - D + 2, D), 2, -1):
        last = -1
        for s in range(n - j + 1):
            m = prefix[s + j] - prefix[s]
            if m == last or m > L:
                continue
            last = m
            e = pstart[m]
            while e < pstart[m + 1] and e < pstart[m] + scan:
                q = prows[e]
                if cnt[q] > 0 and D - size[q] >= j - 2:
                    taken[:n] = False
                    taken[s : s + j] = True
                    return q, m
                e += 1
    return -1, 0


@jit
def pair_pass(arena, start, size, cnt, T, top, L, D, width):
    """One pass of exchanges in which the roomy pack gives back two sequences (for deep
    packs whose sums no single length matches, such as many copies of one length), over
    rows ``0..T-1``. Same returns as :func:`repair_pass`."""
    n_rows = T
    pstart, prows = _pair_index(arena, start, size, T, L, D, width)
    prefix, taken = _scratch(size, T, D)
    exchanges = 0
    for p in range(T):
        n = size[p]
        c = cnt[p]
        if n > D and c > 0:
            for i in range(n):
                prefix[i + 1] = prefix[i] + arena[start[p] + i]
        while n > D and c > 0:
            q, m = _pair_partner(n, D, L, prefix, taken, size, cnt, pstart, prows, 32)
            if q < 0:
                break
            m1, m2 = _pair_of(arena, start, size, q, m)
            arena, start, size, cnt, n_rows, top, c = _apply(arena, top, start, size, cnt, n_rows, p, q, taken, m1, m2, c)
            exchanges += 1
    return arena, start, size, cnt, n_rows, exchanges
