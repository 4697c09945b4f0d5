"""The kernels' own sorts (packlib._kernels.sorting, csr.by_size) against numpy's sorts."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from packlib._kernels.csr import by_size
from packlib._kernels.sorting import sort_ints

_ints = st.lists(st.integers(-(2**62), 2**62), max_size=200)


@settings(max_examples=200, deadline=None)
@given(_ints, st.integers(0, 5))
def test_sort_ints_is_numpys_sort(values, small):
    for a in (np.array(values, np.int64), np.array([v % (small + 1) for v in values], np.int64)):  # ties too
        got = a.copy()
        sort_ints(got)
        assert got.tolist() == np.sort(a).tolist()


def test_sort_ints_sorts_a_view_in_place_and_nothing_else():
    a = np.array([9, 5, 7, 1, 3, 8, 2], np.int64)
    sort_ints(a[2:6])
    assert a.tolist() == [9, 5, 1, 3, 7, 8, 2]
    rng = np.random.default_rng(0)
    big = rng.integers(0, 1000, 100_000).astype(np.int64)
    want = np.sort(big)
    sort_ints(big)
    assert (big == want).all()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=80), st.integers(0, 90), st.integers(0, 15))
def test_by_size_is_a_stable_argsort_of_the_small_ones(sizes, n, limit):
    size = np.array(sizes + [0, 99], np.int64)  # entries past n are never read
    n = min(n, len(sizes))
    want = [t for t in np.argsort(size[:n], kind="stable") if size[t] < limit]
    assert by_size(size, n, limit).tolist() == want
