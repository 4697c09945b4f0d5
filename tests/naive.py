"""Slow, obvious reference implementations of packlib's packers (plain Python).

Each follows the algorithm's definition as literally as possible, with lists and dicts,
so the compiled kernels can be checked against them on small inputs.
"""
from __future__ import annotations

import itertools
from collections import Counter, defaultdict

import numpy as np


def histogram(lengths, L):
    h = [0] * L
    for x in lengths:
        h[x - 1] += 1
    return h


def plan_multiset(strategies, counts) -> Counter:
    """A plan as a multiset of packs: {sorted-descending tuple of lengths: number of packs}."""
    c = Counter()
    for s, k in zip(strategies, counts):
        key = tuple(sorted((int(x) for x in s if int(x) > 0), reverse=True))
        if k and key:
            c[key] += int(k)
    return c


def greedy_histogram_pack(h, L, depth, longest_first):
    """SPFHP (longest_first=False) and LPFHP (True) on groups of identical packs.

    Open groups live in LIFO stacks keyed by free space. Lengths go longest first.
    SPFHP: a length goes to the group with the most free space that fits (scanning free
    space from L downwards, never back up within a length). LPFHP: to the group with the
    least free space that fits (scanning from an exact fit upwards, restarting after each
    placement), adding as many copies at once as fit, the depth allows and the remaining
    count can fill evenly. What fits nowhere opens new packs (LPFHP: as many copies per
    new pack as fit).
    """
    depth = L if depth is None else depth
    stacks = defaultdict(list)  # free space -> [[count, pack], ...]
    done = []

    def add(pack, count, free):
        if len(pack) == depth or free == 0:
            done.append((count, pack))
        else:
            stacks[free].append([count, pack])

    for length in range(L, 0, -1):
        n = h[length - 1]
        offset = 0 if longest_first else L - length + 1
        while n > 0:
            key = length + offset
            placed = False
            if stacks.get(key):
                count, pack = stacks[key].pop()
                repeat = 1
                if longest_first:
                    repeat = min(1 + offset // length, depth - len(pack))
                    while n // repeat == 0:
                        repeat -= 1
                take = min(count, n // repeat)
                if count > take:
                    stacks[key].append([count - take, pack])
                n -= take * repeat
                add(pack + [length] * repeat, take, key - repeat * length)
                placed = True
                if longest_first:
                    offset = 0
            elif longest_first:
                offset += 1
            else:
                offset -= 1
            if not placed and (offset > L - length if longest_first else offset < 0):
                repeat = min(L // length, depth) if longest_first else 1
                while n // repeat == 0:
                    repeat -= 1
                take = n // repeat
                add([length] * repeat, take, L - repeat * length)
                n -= take * repeat
    for key in stacks:
        done.extend((c, p) for c, p in stacks[key])
    return [p for _, p in done], [c for c, _ in done]


def first_fit_decreasing(lengths, L, depth=None):
    """Items longest first (ties by index); each into the first pack with room."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    packs, free = [], []
    for i in order:
        for p in range(len(packs)):
            if free[p] >= lengths[i] and (depth is None or len(packs[p]) < depth):
                packs[p].append(i)
                free[p] -= lengths[i]
                break
        else:
            packs.append([i])
            free.append(L - lengths[i])
    return packs


def best_fit_decreasing_packs_count(lengths, L, depth=None):
    """Number of packs of best-fit decreasing (tightest pack with room; ties arbitrary,
    which does not change the count for a given free-space multiset)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    free, size = [], []
    for i in order:
        best = None
        for p in range(len(free)):
            if free[p] >= lengths[i] and (depth is None or size[p] < depth):
                if best is None or free[p] < free[best]:
                    best = p
        if best is None:
            free.append(L - lengths[i])
            size.append(1)
        else:
            free[best] -= lengths[i]
            size[best] += 1
    return len(free)


def exact_strategies(L, depth):
    """All multisets of at most ``depth`` lengths summing exactly to ``L`` (descending)."""
    out = []
    for k in range(1, min(depth, L) + 1):
        for combo in itertools.combinations_with_replacement(range(L, 0, -1), k):
            if sum(combo) == L:
                out.append(combo)
    return out


def weighted_nnls(A, b, w):
    """``min ||w * (A x - b)||, x >= 0`` with scipy's NNLS (the reference recipe's solver)."""
    from scipy.optimize import nnls

    x, _ = nnls(w[:, None] * A, w * b)
    return x


def min_packs_bruteforce(lengths, L, depth=None, size=sum):
    """Optimal number of packs by exhaustive search (tiny inputs only); a pack's ``size(pack)``
    (its tokens by default) must stay within ``L``."""
    items = sorted(lengths, reverse=True)
    best = [len(items)]

    def rec(i, packs):
        if len(packs) >= best[0]:
            return
        if i == len(items):
            best[0] = len(packs)
            return
        tried = set()
        for p in packs:
            key = (size(p), len(p))
            if key in tried:
                continue
            tried.add(key)
            p.append(items[i])
            if size(p) <= L and (depth is None or len(p) <= depth):
                rec(i + 1, packs)
            p.pop()
        packs.append([items[i]])
        rec(i + 1, packs)
        packs.pop()

    rec(0, [])
    return best[0]


def lengths_from_histogram(h, seed=0):
    rng = np.random.default_rng(seed)
    lengths = np.repeat(np.arange(1, len(h) + 1), h)
    rng.shuffle(lengths)
    return lengths
