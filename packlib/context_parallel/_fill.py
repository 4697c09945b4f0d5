"""The planner's later phases: the short sequences dealt around the groups (:func:`fill`),
then every GPU given work in every micro-batch (:func:`cover`)."""
from __future__ import annotations

import numpy as np



def fill(state, lengths, short, unit, scale, cp, mb, first) -> bool:
    """Deal the ``short`` sequences (longest first) on blocks of ``unit`` GPUs: each to the
    block with room in a free micro-batch that stays least loaded (into its fullest
    micro-batch with room); only where no block has room, to the open group with room
    that leaves the busiest GPU least busy, counting the extra time a group spends (its
    exchange) as raising every GPU's final level. False where one fits nowhere."""
    G, M, cap, depth = state.G, state.M, state.cap, state.depth
    U = G // unit
    free_from = state.block_max(state.next_free, unit)
    room = np.where(np.arange(M)[None, :] >= free_from[:, None], unit * cap, -1).astype(np.int64)
    count = np.zeros((U, M), np.int64)
    load = state.block_max(state.load, unit).copy()
    g_start = np.array(state.start, np.int64)
    g_size = np.array(state.size, np.int64)
    g_room = g_size * cap - np.array(state.tokens, np.int64)
    g_count = np.array(state.count, np.int64)
    group_load = np.array([state.load[s:s + c].max(axis=0) for s, c in zip(g_start, g_size)]).reshape(-1, 2)
    short = np.asarray(short, np.int64)
    unit_shares = scale(lengths[short], unit).reshape(-1, 2)
    best_room = room.max(axis=1)  # the most room in a micro-batch below the depth, per block
    # the mean load every GPU reaches if the rest goes on blocks of `unit` (a group costs more)
    level = (state.load.sum(axis=0) + unit_shares.sum(axis=0) * unit) / G
    for k, i in enumerate(short):
        length = int(lengths[i])
        fit = best_room >= length
        best_key, u, g = np.inf, -1, -1
        if fit.any():
            keys = np.where(fit, np.maximum(load[:, 0] + unit_shares[k, 0], load[:, 1] + unit_shares[k, 1]), np.inf)
            u = int(np.argmin(keys))
            best_key = max(keys[u], level.max())
        open_ = np.flatnonzero((g_room >= length) & (g_count < depth))
        if open_.size and u < 0:  # a group spends more GPU-time (the exchange): only for room
            shares = scale(length, g_size[open_])
            keys = (group_load[open_] + shares).max(axis=1)
            extra = (shares[:, 0] * g_size[open_] - unit_shares[k, 0] * unit) / G
            keys = np.maximum(keys, np.maximum(level[0] + extra, level[1]))
            j = int(np.argmin(keys))
            if keys[j] < best_key:
                g, best_key = int(open_[j]), keys[j]
                level[0] += extra[j]
        if best_key == np.inf:
            return False
        if g >= 0:
            s, c = int(g_start[g]), int(g_size[g])
            t = scale(length, c)
            g_room[g] -= length
            g_count[g] += 1
            load[s // unit:(s + c) // unit] += t
            cp[i], mb[i], first[i] = c, state.mb[g], s
        else:
            m = int(np.argmin(np.where(room[u] >= length, room[u], np.iinfo(np.int64).max)))  # best fit
            s, c = u * unit, unit
            t = unit_shares[k]
            room[u, m] -= length
            count[u, m] += 1
            if count[u, m] >= depth:
                room[u, m] = -1
            best_room[u] = room[u].max()
            load[u] += t
            cp[i], mb[i], first[i] = unit, m, s
        state.load[s:s + c] += t
        for j in np.flatnonzero((g_start < s + c) & (s < g_start + g_size)):
            group_load[j] = state.load[g_start[j]:g_start[j] + g_size[j]].max(axis=0)
    return True


def coverage(mb, first, cp, M, G) -> np.ndarray:
    """How many sequences each GPU holds in each micro-batch, int64 ``(M, G)``."""
    out = np.zeros((M, G + 1), np.int64)
    np.add.at(out, (mb, first), 1)
    np.add.at(out, (mb, first + cp), -1)
    return np.cumsum(out, axis=1)[:, :-1]


def cover(state, lengths, unit, sizes, cp, mb, first) -> bool:
    """Give every GPU a sequence in every micro-batch (Megatron's layout has no empty
    list): move a short sequence into an empty block from a micro-batch where its block
    holds two or more (its own block first), else widen the smallest group around the
    empty GPU that holds sequences into one group. False where that breaks the depth."""
    G, M = state.G, state.M
    blocks = (G // unit) * unit
    moved = True
    while moved:  # first moves alone (they keep every group as it is), then widening
        held = coverage(mb, first, cp, M, G)
        empty = [(int(m), int(r)) for m, r in np.argwhere(held[:, :blocks] == 0)]
        moved = any(_move_into(lengths, unit, r - r % unit, m, held, cp, mb, first) for m, r in empty[:1])
    while True:
        held = coverage(mb, first, cp, M, G)
        empty = np.argwhere(held == 0)
        if empty.size == 0:
            return True
        m, r = (int(v) for v in empty[0])
        if r < blocks and _move_into(lengths, unit, r - r % unit, m, held, cp, mb, first):
            continue
        if not _widen(state.depth, sizes, r, m, cp, mb, first) and not _lend(lengths, G, m, held, cp, mb, first):
            return False


def _move_into(lengths, unit, block, m, held, cp, mb, first) -> bool:
    """Move the shortest sequence of a ``unit`` block that holds two or more in its
    micro-batch into the empty block at ``(m, block)``: its own block's first."""
    movable = np.flatnonzero((cp == unit) & (held[mb, first] >= 2))
    if movable.size == 0:
        return False
    own = movable[first[movable] == block]
    pool = own if own.size else movable
    i = int(pool[np.argmin(lengths[pool])])
    mb[i], first[i] = m, block
    return True


def _lend(lengths, G, m, held, cp, mb, first) -> bool:
    """Give an empty micro-batch ``m`` the shortest sequence of a micro-batch where its GPUs
    hold two or more, alone on all ``G`` GPUs."""
    movable = np.flatnonzero(held[mb, first] >= 2)
    if movable.size == 0 or (held[m] > 0).any():
        return False
    i = int(movable[np.argmin(lengths[movable])])
    mb[i], first[i], cp[i] = m, 0, G
    return True


def _widen(depth, sizes, r, m, cp, mb, first) -> bool:
    """Merge everything micro-batch ``m`` holds in the smallest aligned block around GPU
    ``r`` that holds anything into one group on that block."""
    G = int(sizes[-1])
    for size in sizes[sizes > 1]:
        b = 0 if size == G else (r // size) * size
        if b + size > G:
            continue
        inside = np.flatnonzero((mb == m) & (first >= b) & (first + cp <= b + size))
        if inside.size:
            if inside.size > depth:
                return False
            cp[inside], first[inside] = size, b
            return True
    return False
