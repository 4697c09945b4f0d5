"""The prefix tree (trie) of a set of token sequences, laid out depth-first.

Sequences sorted lexicographically, each shares its longest common prefix with the one
before it in that order (``lcp``): emitting every sequence's tokens from its ``lcp`` on, in
sorted order, lays out each distinct prefix once, in depth-first pre-order (children by
token id). A token's subtree is then the run of positions after it that are deeper than it.
"""
import numpy as np

from .._jit import jit


@jit
def sorted_lcp(tokens, offsets, order):
    """``lcp[r]``: the longest common prefix of sequences ``order[r - 1]`` and ``order[r]``
    (``lcp[0] = 0``); sequence ``s`` is ``tokens[offsets[s]:offsets[s + 1]]``."""
    n = order.size
    lcp = np.zeros(n, np.int64)
    for r in range(1, n):
        a = offsets[order[r - 1]]
        b = offsets[order[r]]
        m = min(offsets[order[r - 1] + 1] - a, offsets[order[r] + 1] - b)
        d = 0
        while d < m and tokens[a + d] == tokens[b + d]:
            d += 1
        lcp[r] = d
    return lcp


@jit
def trie_layout(tokens, offsets, order, lcp):
    """The trie of the sequences, in depth-first pre-order.

    Returns ``(ids, depth, parent, end, node_of)``: each trie token's id, depth (its
    position in every sequence through it), parent's row position (-1 at a root) and subtree
    end (exclusive: token ``j`` descends from ``i`` iff ``i <= j < end[i]``); and for every
    token of every sequence (``tokens``' order) the row position of its trie node."""
    n = order.size
    longest = np.int64(0)
    total = np.int64(0)
    for r in range(n):
        length = offsets[order[r] + 1] - offsets[order[r]]
        longest = max(longest, length)
        total += length - lcp[r]
    ids = np.empty(total, np.int64)
    depth = np.empty(total, np.int64)
    parent = np.empty(total, np.int64)
    end = np.empty(total, np.int64)
    node_of = np.empty(tokens.size, np.int64)
    path = np.empty(longest + 1, np.int64)  # the row positions of the current root-to-leaf path
    open_depth = np.int64(0)  # path[:open_depth] are the nodes whose subtree is still open
    pos = np.int64(0)
    for r in range(n):
        a = offsets[order[r]]
        length = offsets[order[r] + 1] - a
        first = lcp[r]
        if first < length:  # new nodes from depth `first` on: close the open subtrees at or below it
            while open_depth > first:
                open_depth -= 1
                end[path[open_depth]] = pos
        for d in range(first, length):
            ids[pos] = tokens[a + d]
            depth[pos] = d
            parent[pos] = path[d - 1] if d > 0 else -1
            path[d] = pos
            pos += 1
        if first < length:
            open_depth = length
        for d in range(length):
            node_of[a + d] = path[d]
    while open_depth > 0:
        open_depth -= 1
        end[path[open_depth]] = total
    return ids, depth, parent, end, node_of
