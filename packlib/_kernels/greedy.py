"""SPFHP and LPFHP (Krell et al., 2021), reproducing the reference plans exactly.

Both work on groups of identical packs ("count x pack"), kept in one LIFO stack per amount
of free space, so their cost depends on the histogram's length, not on the number of
sequences. A pack's contents are a path in a tree of nodes (parent, length): extending a
group by one length adds one node instead of copying a list.
"""
import numpy as np

from .._jit import jit
from .growable import grow1


@jit
def _new_node(parent, length, node_parent, node_len, node_depth, n_nodes):
    node_parent[n_nodes] = parent
    node_len[n_nodes] = length
    node_depth[n_nodes] = 1 if parent < 0 else node_depth[parent] + 1


@jit
def _rows(node_parent, node_len, node_depth, out_node, n_out):
    """Expand groups' leaf nodes into rows of lengths, descending, zero-padded."""
    width = 0
    for g in range(n_out):
        width = max(width, node_depth[out_node[g]])
    rows = np.zeros((n_out, width), dtype=np.int64)
    for g in range(n_out):
        node = out_node[g]
        j = node_depth[node] - 1
        while node >= 0:  # leaf -> root visits lengths shortest first
            rows[g, j] = node_len[node]
            j -= 1
            node = node_parent[node]
    return rows


@jit
def _chain(node, length, repeat, node_parent, node_len, node_depth, n_nodes):
    """Extend the pack ending at ``node`` (-1: a new pack) by ``repeat`` sequences of
    ``length``, as nodes ``n_nodes ..``; returns the last one."""
    for _ in range(repeat):
        _new_node(node, length, node_parent, node_len, node_depth, n_nodes)
        node = n_nodes
        n_nodes += 1
    return node


@jit
def _greedy(h, L, depth, longest_first):
    """SPFHP (``longest_first=False``: each length joins the open group with the most free
    space) or LPFHP (the least free space that fits, several copies at once).

    Before the lengths of one value are placed, every array gets room for all they can
    create, so that no array variable is reassigned inside the hot loop (see ``grow1``):
    each node places >= 1 sequence (<= n nodes); each group that exists now, or is split
    off (<= depth times) or opened (<= 2 times) in this step, takes <= m copies."""
    cap = 64
    node_parent = np.empty(cap, np.int64)
    node_len = np.empty(cap, np.int64)
    node_depth = np.empty(cap, np.int64)
    ent_count = np.empty(cap, np.int64)
    ent_node = np.empty(cap, np.int64)
    ent_next = np.empty(cap, np.int64)
    head = np.full(L + 1, -1, np.int64)  # open groups by free space (1..L-1)
    out_node = np.empty(cap, np.int64)
    out_count = np.empty(cap, np.int64)
    n_nodes = n_ent = n_out = n_open = np.int64(0)  # a literal 0 would compile the callees twice
    for i in range(L):
        length = L - i
        n = h[length - 1]
        offset = 0 if longest_first else i + 1
        if n == 0:
            continue
        # reserve room for everything this length can create (see the docstring)
        m = min(depth, L // length)
        lineages = n_open + min(depth, n) + 2
        node_parent = grow1(node_parent, n_nodes + min(n, lineages * m), n_nodes)
        node_len = grow1(node_len, n_nodes + min(n, lineages * m), n_nodes)
        node_depth = grow1(node_depth, n_nodes + min(n, lineages * m), n_nodes)
        groups = min(n, lineages * m) + 2
        ent_count = grow1(ent_count, n_ent + groups, n_ent)
        ent_node = grow1(ent_node, n_ent + groups, n_ent)
        ent_next = grow1(ent_next, n_ent + groups, n_ent)
        out_node = grow1(out_node, n_out + groups, n_out)
        out_count = grow1(out_count, n_out + groups, n_out)
        while n > 0:
            key = length + offset
            placed_node = -1
            placed_count = 0
            placed_free = 0
            if key < L and head[key] >= 0:
                e = head[key]
                cnt = ent_count[e]
                node = ent_node[e]
                repeat = 1
                if longest_first:  # LPFHP "distributes": as many copies as fit at once
                    repeat = min(1 + offset // length, depth - node_depth[node])
                    while n // repeat == 0:
                        repeat -= 1
                take = min(cnt, n // repeat)
                if cnt > take:
                    ent_count[e] = cnt - take  # the reduced group stays on top
                else:
                    head[key] = ent_next[e]
                    n_open -= 1
                n -= take * repeat
                node = _chain(node, length, repeat, node_parent, node_len, node_depth, n_nodes)
                n_nodes += repeat
                placed_node = node
                placed_count = take
                placed_free = key - repeat * length
                if longest_first:
                    offset = 0  # the best fit may have changed
            elif longest_first:
                offset += 1
            else:
                offset -= 1
            if placed_node < 0 and (offset >= L - length + 1 if longest_first else offset < 0):
                # fits nowhere: open new packs
                repeat = 1
                if longest_first:
                    repeat = min(L // length, depth)
                    while n // repeat == 0:
                        repeat -= 1
                node = -1  # a literal on purpose: _chain compiled for a new pack is faster
                node = _chain(node, length, repeat, node_parent, node_len, node_depth, n_nodes)
                n_nodes += repeat
                placed_node = node
                placed_count = n // repeat
                placed_free = L - repeat * length
                n -= placed_count * repeat
            if placed_node >= 0:
                if node_depth[placed_node] == depth or placed_free == 0:
                    out_node[n_out] = placed_node
                    out_count[n_out] = placed_count
                    n_out += 1
                else:
                    ent_count[n_ent] = placed_count
                    ent_node[n_ent] = placed_node
                    ent_next[n_ent] = head[placed_free]
                    head[placed_free] = n_ent
                    n_ent += 1
                    n_open += 1
    # groups still open are final too
    out_node = grow1(out_node, n_out + n_open, n_out)
    out_count = grow1(out_count, n_out + n_open, n_out)
    for key in range(L + 1):
        e = head[key]
        while e >= 0:
            out_node[n_out] = ent_node[e]
            out_count[n_out] = ent_count[e]
            n_out += 1
            e = ent_next[e]
    return _rows(node_parent, node_len, node_depth, out_node, n_out), out_count[:n_out].copy()


@jit
def spfhp(h, L, depth):
    """Shortest-pack-first: each length joins the open group with the most free space."""
    return _greedy(h, L, depth, False)  # a literal: compiled apart from LPFHP, its branches folded


@jit
def lpfhp(h, L, depth):
    """Longest-pack-first: each length joins the open group with the least free space that
    fits, as many copies at once as fit (the reference's ``distribute=True``)."""
    return _greedy(h, L, depth, True)
