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


def refill_slots(packs, L, D, lpfhp):
    """Pack by pack: the packs of fewer than ``D`` sequences keep their longest and give up
    the rest, the packs of ``D`` sequences filled to at most ``L/2`` give up everything; the
    kept packs, longest first sequence first, each take the shortest given-up sequences that
    fit (one at a time, up to ``D`` in all); ``lpfhp(histogram, L, D) -> (packs, counts)`` packs
    what is left. Returns the new packs as a Counter, or the old ones when that is not fewer.
    ``packs``: a list of length tuples, one per pack."""
    opened = [p for p in packs if len(p) < D]
    donors = [p for p in packs if len(p) == D and 2 * sum(p) <= L]
    if D >= L or not opened or not donors:
        return Counter(tuple(sorted(p, reverse=True)) for p in packs)
    pool = sorted([x for p in opened for x in sorted(p, reverse=True)[1:]] + [x for p in donors for x in p])
    out = Counter(tuple(sorted(p, reverse=True)) for p in packs if len(p) > D or (len(p) == D and 2 * sum(p) > L))
    for first in sorted((max(p) for p in opened), reverse=True):
        pack, room = [first], L - first
        while len(pack) < D and pool and pool[0] <= room:
            room -= pool[0]
            pack.append(pool.pop(0))
        out[tuple(sorted(pack, reverse=True))] += 1
    h = [0] * L
    for x in pool:
        h[x - 1] += 1
    rest, counts = lpfhp(h, L, D)
    if sum(counts) >= len(donors):
        return Counter(tuple(sorted(p, reverse=True)) for p in packs)
    for p, k in zip(rest, counts):
        out[tuple(sorted((x for x in p if x), reverse=True))] += int(k)
    return out
