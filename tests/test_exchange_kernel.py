"""Direct tests of packlib._kernels.exchange (the depth repair by exchanges), against
plain-Python checks: the segment-tree search, the exact subsets, and the repair's
invariants (every sequence once, no pack over the limits, exchanges keep packs as full)."""
from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from packlib._jit import python_callable
from packlib._kernels import exchange as X
from packlib._kernels.optimal import exact_fill
from packlib.optimal._solver import depth_repair

from .test_optimal import small_histograms


# the kernel's private parts, reached from Python through a small kernel that calls them
_tree_set, _tree_first, _exact_subset = (python_callable(k) for k in (X._tree_set, X._tree_first, X._exact_subset))
_pack_arena, _repair_pass = X.pack_arena, X.repair_pass


def _csr(rows):
    """``[(pack, copies), ...]`` as the kernel's CSR ``(items, offsets, counts)``."""
    items = np.concatenate([np.sort(np.asarray(r, np.int64))[::-1] for r, _ in rows])
    offsets = np.concatenate([[0], np.cumsum([len(r) for r, _ in rows])]).astype(np.int64)
    return items, offsets, np.array([c for _, c in rows], np.int64)


def _sum_counts(packs, counts):
    """Copies of packs by token total."""
    out = Counter()
    for p, c in zip(packs, counts):
        out[int(p.sum())] += int(c)
    return out


@given(st.lists(st.integers(0, 9), min_size=1, max_size=40), st.data())
def test_tree_first_is_the_leftmost_leaf_at_least_t(values, data):
    P = 1
    while P < len(values):
        P *= 2
    tree = np.zeros(2 * P, np.int64)
    for i, v in enumerate(values):
        _tree_set(tree, P, i, v)
    lo = data.draw(st.integers(0, len(values) - 1))
    hi = data.draw(st.integers(-1, len(values) - 1))
    t = data.draw(st.integers(1, 10))
    want = next((i for i in range(lo, hi + 1) if values[i] >= t), -1)
    assert _tree_first(tree, P, lo, hi, t) == want


@given(st.lists(st.integers(1, 30), min_size=2, max_size=25), st.data())
def test_exact_subset_takes_j_items_adding_up_to_m(row, data):
    row = np.array(sorted(row, reverse=True), np.int64)
    n = row.size
    j = data.draw(st.integers(1, n))
    m = data.draw(st.integers(0, int(row.sum()) + 1))
    prefix = np.concatenate([[0], np.cumsum(row)]).astype(np.int64)
    taken = np.zeros(n, np.bool_)
    found = _exact_subset(row, n, j, m, prefix, taken)
    if found:
        assert taken.sum() == j and row[taken].sum() == m
    windows = {int(row[s : s + j].sum()) for s in range(n - j + 1)}
    if m in windows:  # a window always counts; more are found by one swap
        assert found


@given(small_histograms(max_len=60, max_count=80), st.integers(1, 6))
@settings(max_examples=60)
def test_exchanges_keep_packs_exactly_as_full(h, D):
    """One round (no refill): every pack the exchanges leave has the token total of a pack
    they were given, and what they dissolve is the rest, token for token."""
    L = len(h)
    items, offsets, counts = exact_fill(h, L, 0, 2)
    before = _sum_counts([items[offsets[t] : offsets[t + 1]] for t in range(counts.size)], counts)
    out_items, out_offsets, out_counts, residual = depth_repair(items, offsets, counts, L, D, 1)
    after = _sum_counts([out_items[out_offsets[t] : out_offsets[t + 1]] for t in range(out_counts.size)], out_counts)
    assert all(after[s] <= before[s] for s in after)
    dissolved = sum(s * (before[s] - after[s]) for s in before)
    assert dissolved == int((residual * np.arange(1, L + 1)).sum())
    for t in range(out_counts.size):
        pack = out_items[out_offsets[t] : out_offsets[t + 1]]
        assert 0 < pack.size <= D and pack.sum() <= L and (np.diff(pack) <= 0).all()


def test_a_deep_pack_of_one_length_exchanges_for_a_pair():
    """Six 2s at depth 4: no single sequence of 4 or 6 tokens is held anywhere, so only the
    pair (5, 3) of the roomy pack takes four of them."""
    items, offsets, counts = _csr([([2] * 6, 1), ([5, 3], 1)])
    arena, start, size, cnt = _pack_arena(items, offsets, counts)
    assert _repair_pass(arena, start, size, cnt, 2, offsets[-1], 12, 4)[-1] == 0  # no single partner
    out = depth_repair(items, offsets, counts, 12, 4)
    assert out[0].tolist() == [5, 3, 2, 2, 2, 2, 2, 2] and out[1].tolist() == [0, 4, 8]
    assert out[2].tolist() == [1, 1] and not out[3].any()


def test_a_partner_beyond_the_shortest_sequences():
    """The two shortest add up to 3, which nobody holds; 2 + 2 = 4 is a window further up,
    held by a pack with room: one exchange, nothing dissolved."""
    items, offsets, counts = _csr([([2, 2, 1, 1], 1), ([6, 4], 1)])
    out_items, out_offsets, out_counts, residual = depth_repair(items, offsets, counts, 10, 3)
    packs = sorted(tuple(out_items[out_offsets[t] : out_offsets[t + 1]]) for t in range(out_counts.size))
    assert packs == [(4, 1, 1), (6, 2, 2)] and not residual.any()


def test_groups_of_identical_packs_exchange_at_once():
    items, offsets, counts = _csr([([2, 2, 1, 1], 5), ([6, 4], 3)])
    out_items, out_offsets, out_counts, residual = depth_repair(items, offsets, counts, 10, 3, 1)
    got = Counter()
    for t in range(out_counts.size):
        got[tuple(out_items[out_offsets[t] : out_offsets[t + 1]])] += int(out_counts[t])
    assert got == Counter({(4, 1, 1): 3, (6, 2, 2): 3})  # two deep packs found no partner left
    assert residual.tolist() == [4, 4, 0, 0, 0, 0, 0, 0, 0, 0]
