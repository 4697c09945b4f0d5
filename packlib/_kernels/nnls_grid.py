"""NNLSHP at long context: the plan of a length-class histogram, turned back into lengths.

Above a few thousand tokens the recipe runs on ``G = L // q`` length classes: class ``c``
holds the lengths in ``((c - 1) q, c q]`` (the last one every length above ``(G - 1) q``),
a pack holds at most ``G`` class units, so any sequences of the classes of a planned pack
fit in ``L`` tokens (a sequence of class ``G`` has a pack to itself). :func:`classes_to_lengths`
hands each class's sequences, longest first, to the slots of that class, pack group by pack
group; a group is split where a slot's run of equal lengths ends.
"""
import numpy as np

from .._jit import jit


@jit
def _next_run(h, q, c, pos, rem):
    """Move class ``c``'s cursor to its next length that still has sequences."""
    while rem[c] == 0 and pos[c] > (c - 1) * q + 1:
        pos[c] -= 1
        rem[c] = h[pos[c] - 1]


@jit
def classes_to_lengths(rows, counts, h, q, n_classes):
    """Rows of lengths (descending, zero-padded) and their counts for the plan ``rows`` /
    ``counts`` of class numbers ``1..n_classes``, drawing each class's sequences from ``h``
    (lengths ``1..h.size``) longest first. The plan must use exactly the class counts of ``h``."""
    L = h.size
    width = 0  # the widest planned pack (rows may be padded far wider)
    for g in range(counts.size):
        n = 0
        while n < rows.shape[1] and rows[g, n] > 0:
            n += 1
        width = max(width, n)
    pos = np.empty(n_classes + 1, np.int64)  # the length each class's cursor is at
    rem = np.zeros(n_classes + 1, np.int64)  # sequences left at that length
    present = 0
    for c in range(1, n_classes + 1):
        pos[c] = L if c == n_classes else c * q
        rem[c] = h[pos[c] - 1]
        _next_run(h, q, c, pos, rem)
    for l in range(L):
        if h[l] > 0:
            present += 1
    # a group emitted finishes a plan group, or leaves a run fewer sequences than the slots
    # of its class in one pack; the next (a single pack) then exhausts that run
    cap = counts.size + 2 * present + 1
    out = np.zeros((cap, width), np.int64)
    out_counts = np.zeros(cap, np.int64)
    n_out = 0
    for g in range(counts.size):
        left = counts[g]
        while left > 0:
            k = left
            j = 0
            while j < width and rows[g, j] > 0:  # runs of one class are adjacent (rows descend)
                c = rows[g, j]
                m = 0
                while j < width and rows[g, j] == c:
                    m += 1
                    j += 1
                k = min(k, rem[c] // m)
            if k == 0:  # some class's run is shorter than one pack's slots of it: one pack alone
                k = 1
                for j in range(width):
                    c = rows[g, j]
                    if c == 0:
                        break
                    out[n_out, j] = pos[c]
                    rem[c] -= 1
                    _next_run(h, q, c, pos, rem)
            else:
                for j in range(width):
                    c = rows[g, j]
                    if c == 0:
                        break
                    out[n_out, j] = pos[c]
                for j in range(width):
                    c = rows[g, j]
                    if c == 0:
                        break
                    rem[c] -= k
                    _next_run(h, q, c, pos, rem)
            out_counts[n_out] = k
            n_out += 1
            left -= k
    return out[:n_out].copy(), out_counts[:n_out].copy()
