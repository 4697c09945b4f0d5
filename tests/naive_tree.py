"""Plain-Python references for prefix trees (no numpy, no packlib): a trie of nested dicts,
its depth-first layout, and the mask "each token sees its ancestors and itself"."""
from __future__ import annotations


def naive_trie(sequences):
    """``(ids, parent)`` of the trie of ``sequences`` laid out depth-first, children in token
    order, and for each sequence the row position of each of its tokens."""
    root = {}
    for seq in sequences:
        node = root
        for tok in seq:
            node = node.setdefault(tok, {})
    ids, parent, where = [], [], {}

    def walk(node, up, prefix):
        for tok in sorted(node):
            pos = len(ids)
            ids.append(tok)
            parent.append(up)
            where[prefix + (tok,)] = pos
            walk(node[tok], pos, prefix + (tok,))

    walk(root, -1, ())
    nodes = [[where[tuple(seq[:d + 1])] for d in range(len(seq))] for seq in sequences]
    return ids, parent, nodes


def naive_tree_mask(parent):
    """``mask[q][k]``: query ``q`` sees key ``k`` (``k`` is ``q`` or one of its ancestors)."""
    T = len(parent)
    mask = [[False] * T for _ in range(T)]
    for q in range(T):
        k = q
        while k != -1:
            mask[q][k] = True
            k = parent[k]
    return mask


def naive_depths(parent):
    depth = []
    for p in parent:
        depth.append(0 if p == -1 else depth[p] + 1)
    return depth
