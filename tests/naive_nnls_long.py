"""Plain-Python reference for NNLSHP at long context: a plan of length classes turned into
lengths, pack by pack (no runs, no groups)."""
from __future__ import annotations

from collections import Counter


def classes_to_lengths(rows, counts, h, q, n_classes):
    """Class ``c`` (``1..n_classes``) holds lengths ``(c-1)q+1 .. cq`` (the last class: up to
    ``len(h)``); every slot of class ``c``, pack after pack in plan order, takes the longest
    sequence of that class still unused. Returns the packs as a Counter of length tuples."""
    L = len(h)
    queue = {}
    for c in range(1, n_classes + 1):
        top = L if c == n_classes else c * q
        queue[c] = [l for l in range(top, (c - 1) * q, -1) for _ in range(int(h[l - 1]))]
    packs = Counter()
    for row, k in zip(rows, counts):
        for _ in range(int(k)):
            pack = tuple(queue[int(c)].pop(0) for c in row if int(c) > 0)
            packs[tuple(sorted(pack, reverse=True))] += 1
    return packs
