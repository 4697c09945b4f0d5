"""Per-sequence bin packing: first-fit and best-fit decreasing.

Both visit items longest first, ties in input order (a counting sort: lengths are bounded
integers, so no comparison sort is needed).
- FFD keeps a max-segment tree over the packs' free space (a pack that reached the depth
  limit has free space -1); the leftmost leaf with room is found in O(log packs).
- BFD keeps packs in LIFO buckets by free space (0..L) and a presence tree over the
  buckets, so the tightest bucket with room is found in O(log L).
"""
import numpy as np

from .._jit import jit
from .csr import csr_from_assignment


@jit
def decreasing_order(lengths, L):
    """Item ids sorted by length, longest first, ties by id (stable counting sort over
    ``1..L``; the caller passes the longest length as ``L`` so the counts stay small)."""
    counts = np.zeros(L + 2, np.int64)
    for i in range(lengths.size):
        counts[L - lengths[i] + 1] += 1
    for k in range(1, L + 2):
        counts[k] += counts[k - 1]
    order = np.empty(lengths.size, np.int64)
    for i in range(lengths.size):
        k = L - lengths[i]
        order[counts[k]] = i
        counts[k] += 1
    return order


@jit
def _pow2_at_least(n):
    size = 1
    while size < n:
        size *= 2
    return size


@jit
def ffd(lengths, L, depth):
    n = lengths.size
    order = decreasing_order(lengths, lengths.max() if n else 0)
    size = _pow2_at_least(max(n, 1))
    tree = np.full(2 * size, L, np.int32)  # unopened packs are empty packs: free = L
    fill = np.zeros(size, np.int32)  # sequences per pack
    pack_of = np.empty(n, np.int64)
    n_packs = np.int64(0)  # typed: a literal 0 would compile csr_from_assignment once more for it
    for k in range(n):
        l = lengths[order[k]]
        node = 1
        while node < size:  # leftmost leaf with free >= l
            node = 2 * node if tree[2 * node] >= l else 2 * node + 1
        p = node - size
        n_packs = max(n_packs, p + 1)
        pack_of[k] = p
        fill[p] += 1
        tree[node] = -1 if fill[p] == depth else tree[node] - l
        node //= 2
        while node >= 1:  # stop as soon as a subtree maximum is unchanged
            v = max(tree[2 * node], tree[2 * node + 1])
            if tree[node] == v:
                break
            tree[node] = v
            node //= 2
    offsets, indices = csr_from_assignment(order, pack_of, n_packs)
    return offsets, indices


@jit
def _first_present_at_or_above(present, size, i):
    """Smallest j >= i with present leaf j (presence tree of ``size`` leaves), or -1."""
    node = i + size
    if present[node]:
        return i
    while node > 1:
        if node % 2 == 0 and present[node + 1]:
            node += 1
            while node < size:
                node = 2 * node if present[2 * node] else 2 * node + 1
            return node - size
        node //= 2
    return -1


@jit
def _set_present(present, size, i, value):
    node = i + size
    present[node] = value
    node //= 2
    while node >= 1:
        v = present[2 * node] or present[2 * node + 1]
        if present[node] == v:
            break
        present[node] = v
        node //= 2


@jit
def bfd(lengths, L, depth):
    n = lengths.size
    order = decreasing_order(lengths, lengths.max() if n else 0)
    size = _pow2_at_least(L + 1)
    present = np.zeros(2 * size, np.bool_)
    head = np.full(L + 1, -1, np.int64)  # bucket of packs by free space, LIFO
    nxt = np.empty(max(n, 1), np.int64)
    free = np.empty(max(n, 1), np.int64)
    fill = np.empty(max(n, 1), np.int64)
    pack_of = np.empty(n, np.int64)
    n_packs = np.int64(0)  # typed: a literal 0 would compile csr_from_assignment once more for it
    for k in range(n):
        l = lengths[order[k]]
        r = _first_present_at_or_above(present, size, l)
        if r < 0 or r > L:
            p = n_packs
            n_packs += 1
            free[p] = L
            fill[p] = 0
        else:
            p = head[r]
            head[r] = nxt[p]
            if head[r] < 0:
                _set_present(present, size, r, False)
        pack_of[k] = p
        free[p] -= l
        fill[p] += 1
        if fill[p] < depth and free[p] > 0:
            f = free[p]
            nxt[p] = head[f]
            if head[f] < 0:
                _set_present(present, size, f, True)
            head[f] = p
    offsets, indices = csr_from_assignment(order, pack_of, n_packs)
    return offsets, indices
