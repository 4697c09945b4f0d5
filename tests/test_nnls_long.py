"""nnls_pack above L = 768 (the recipe on length classes), exact=True (on the lengths, up to
2048), and compare() with refusals."""
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packlib
from packlib._nnls_limits import FAST_NNLS_LENGTH, MAX_NNLS_LENGTH, length_classes
from packlib._nnls_recipe import refill_slots

from . import naive, naive_nnls_long


def lognormal_histogram(L, n, seed=0):
    x = np.random.default_rng(seed).lognormal(np.log(L / 4), 0.9, n)
    return packlib.histogram(np.clip(np.rint(x), 1, L).astype(np.int64), L)


def check_plan(plan, h, depth):
    assert np.array_equal(plan.histogram(), h), "every sequence exactly once"
    assert (plan.strategies.sum(axis=1) <= h.size).all(), "no pack over the max length"
    assert depth is None or plan.strategies.shape[1] <= depth


def test_length_classes():
    assert length_classes(FAST_NNLS_LENGTH) == (1, FAST_NNLS_LENGTH) and length_classes(769) == (2, 384)
    assert length_classes(1024) == (2, 512) and length_classes(1800) == (3, 600)
    assert length_classes(MAX_NNLS_LENGTH, exact=True) == (1, MAX_NNLS_LENGTH)
    # the width from ceil(L / 768) to twice it losing the fewest tokens: (L mod q) + (q - 1) / 2
    assert length_classes(MAX_NNLS_LENGTH) == (4, 512) and length_classes(MAX_NNLS_LENGTH + 1) == (3, 683)
    assert length_classes(131072) == (172, 762) and length_classes(4097) == (8, 512)
    for L in range(769, 20000, 7):
        q, G = length_classes(L)
        q0 = -(-L // 768)
        assert G == L // q <= 768 and q0 <= q <= 2 * q0
        assert all(2 * (L % q) + q <= 2 * (L % w) + w for w in range(q0, 2 * q0 + 1))


def test_plan_info_says_which_ran():
    assert packlib.nnls_pack(lognormal_histogram(64, 300)).info == {"iterations": 1, "length_class": 1, "exact": True}
    h = lognormal_histogram(1000, 400, seed=2)
    fast, exact = packlib.nnls_pack(h), packlib.nnls_pack(h, exact=True)
    assert (fast.info["length_class"], fast.info["exact"]) == (2, False)
    assert (exact.info["length_class"], exact.info["exact"]) == (1, True)
    check_plan(fast, h, 3), check_plan(exact, h, 3)


def test_up_to_768_the_default_is_the_exact_recipe():
    h = lognormal_histogram(FAST_NNLS_LENGTH, 2000, seed=5)
    for depth in (2, None):
        fast, exact = (packlib.nnls_pack(h, max_sequences_per_pack=depth, exact=e) for e in (False, True))
        assert fast.info["exact"] and naive.plan_multiset(fast.strategies, fast.counts) == naive.plan_multiset(
            exact.strategies, exact.counts)


def test_exact_is_refused_above_its_range():
    with pytest.raises(ValueError, match="exact=True runs the recipe on the lengths themselves only up to "
                                         "max_sequence_length = 2,048 .* got 2,049; leave exact=False"):
        packlib.nnls_pack([1, 2, 3], 2049, exact=True)
    with pytest.raises(TypeError, match="exact must be True or False"):
        packlib.nnls_pack([1, 2, 3], exact=1)


def test_compare_runs_the_fast_path():
    h = lognormal_histogram(1024, 300, seed=4)
    table = packlib.compare(h, max_sequences_per_pack=3, methods=["nnls"], progress=False)
    assert table[0].packs == packlib.nnls_pack(h).num_packs


def test_lengths_on_the_class_grid_give_the_exact_plan_scaled():
    """Sequences whose lengths are multiples of q at L = q G: the class plan is the exact
    plan of the histogram divided by q, every length times q."""
    G, q = 700, 3
    small = lognormal_histogram(G, 400, seed=3)
    h = np.zeros(q * G, np.int64)
    h[q - 1 :: q] = small
    for depth in (2, 3, None):
        long = packlib.nnls_pack(h, max_sequences_per_pack=depth)
        exact = packlib.nnls_pack(small, max_sequences_per_pack=depth)
        assert long.info["length_class"] == q and long.info["iterations"] == exact.info["iterations"]
        rows, counts = q * exact.strategies, exact.counts
        if depth is not None:  # the lengths' own repair refills the slots (the exact range does not)
            rows, counts = refill_slots(rows, counts, q * G, depth)
        assert naive.plan_multiset(long.strategies, long.counts) == naive.plan_multiset(rows, counts)


def _packs(rows, counts):
    return [tuple(int(x) for x in r if x) for r, k in zip(rows, counts) for _ in range(int(k))]


def _lpfhp(h, L, D):
    packs, counts = naive.greedy_histogram_pack(np.array(h, np.int64), L, D, True)
    return packs, counts


@given(st.integers(8, 60), st.integers(2, 4), st.sampled_from([1, 1, 2, 3]), st.data())
@settings(max_examples=80, deadline=None)
def test_refill_slots_matches_naive(L, D, q, data):
    """Any plan of depth D: the grouped refill equals the pack-by-pack reference (what is left
    packed by LPFHP on the lengths; on classes of q tokens, any valid packing), keeps every
    sequence, and never takes more packs."""
    small = st.integers(1, max(1, L // (2 * D)))
    pack = st.one_of(st.lists(small, min_size=D, max_size=D),  # D short ones: a donor
                     st.tuples(st.integers(1, L), st.lists(small, max_size=D - 1)).map(lambda t: [t[0], *t[1]]))
    groups = data.draw(st.lists(st.tuples(pack, st.integers(1, 4)), min_size=1, max_size=12))
    rows = np.zeros((len(groups), D), np.int64)
    counts = np.zeros(len(groups), np.int64)
    for g, (pack, k) in enumerate(groups):
        while sum(pack) > L:
            pack = pack[1:]
        pack = sorted(pack or [1], reverse=True)
        rows[g, : len(pack)], counts[g] = pack, k
    got_rows, got_counts = refill_slots(rows, counts, L, D, q)
    if q == 1:
        assert naive.plan_multiset(got_rows, got_counts) == naive_nnls_long.refill_slots(_packs(rows, counts), L, D, _lpfhp)
    assert naive.plan_multiset(got_rows, got_counts).total() <= int(counts.sum())
    assert (got_rows.sum(axis=1) <= L).all() and (np.count_nonzero(got_rows, axis=1) <= D).all()
    assert sorted(x for p in _packs(got_rows, got_counts) for x in p) == sorted(x for p in _packs(rows, counts) for x in p)


def test_refill_slots_known_answer():
    """Three packs of (1000, 24) each hold one slot free; two of (12, 12, 12) are nearly empty:
    the long ones take two 12s each, the three 24s share a pack: 4 packs instead of 5."""
    rows = np.array([[1000, 24, 0], [12, 12, 12]], np.int64)
    got_rows, got_counts = refill_slots(rows, np.array([3, 2], np.int64), 1024, 3)
    assert naive.plan_multiset(got_rows, got_counts) == {(1000, 12, 12): 3, (24, 24, 24): 1}
    unchanged = refill_slots(rows, np.array([3, 2], np.int64), 1024, 4)  # depth 4: no (12, 12, 12) pack is full
    assert naive.plan_multiset(*unchanged) == {(1000, 24): 3, (12, 12, 12): 2}


def test_held_out_depth_limited_plans_within_the_exact_recipe():
    """A bimodal histogram (four fifths short, a fifth from L/2 to L) at depth 3: the class
    plan, refilled on the lengths, is no worse than the exact recipe on the lengths."""
    rng = np.random.default_rng(1)
    L = 1024
    x = np.concatenate([rng.lognormal(np.log(L / 16), 0.7, 4000), rng.uniform(L / 2, L, 1000)])
    h = packlib.histogram(np.clip(np.rint(x), 1, L).astype(np.int64), L)
    fast, exact = packlib.nnls_pack(h, L, 3), packlib.nnls_pack(h, L, 3, exact=True)
    check_plan(fast, h, 3)
    assert fast.num_packs <= exact.num_packs


@pytest.mark.parametrize(("L", "depth"), [(4097, 1), (4097, 2), (4097, None), (131072, 3)])
def test_long_context_plans_are_valid(L, depth):
    h = lognormal_histogram(L, 300, seed=L)
    plan = packlib.nnls_pack(h, max_sequences_per_pack=depth)
    check_plan(plan, h, depth)
    assert plan.info["length_class"] == length_classes(L)[0]
    if depth != 1:
        assert plan.num_packs < packlib.nnls_pack(h, max_sequences_per_pack=1).num_packs


@given(st.integers(1, 6), st.integers(6, 40), st.data())
@settings(max_examples=15, deadline=None)
def test_classes_to_lengths_matches_naive(q, n_classes, data):
    from packlib._kernels.nnls_grid import classes_to_lengths

    L = q * n_classes + data.draw(st.integers(0, q - 1))
    h = np.array(data.draw(st.lists(st.integers(0, 4), min_size=L, max_size=L)), np.int64)
    hc = np.add.reduceat(h, np.arange(n_classes) * q)
    # any plan of classes that uses each class's count exactly: random packs of 1-3 slots
    slots = [c for c in range(1, n_classes + 1) for _ in range(int(hc[c - 1]))]
    order = data.draw(st.permutations(slots)) if slots else []
    rows, i = [], 0
    while i < len(order):
        k = data.draw(st.integers(1, 3))
        rows.append(sorted(order[i : i + k], reverse=True) + [0] * (3 - len(order[i : i + k])))
        i += k
    groups = Counter(map(tuple, rows))  # identical packs as one group: runs split groups
    rows, counts = list(groups), list(groups.values())
    rows = np.array(rows or np.zeros((0, 3)), np.int64).reshape(-1, 3)
    got_rows, got_counts = classes_to_lengths(rows, np.array(counts, np.int64), h, q, n_classes)
    assert naive.plan_multiset(got_rows, got_counts) == naive_nnls_long.classes_to_lengths(rows, counts, h, q, n_classes)
    assert all((r[:-1] >= r[1:]).all() for r in got_rows), "rows descend"


def test_bad_histogram_still_refused_at_long_context():
    with pytest.raises(ValueError):
        packlib.nnls_pack(np.array([1, -1]), 8192)


# --------------------------------------------------------------------------- compare()

SMALL = np.bincount(np.random.default_rng(0).integers(1, 65, 3000), minlength=65)[1:]


def refusing(monkeypatch):
    """Make nnls refuse every input (the optimal packer keeps the real one: imported first)."""
    import packlib.optimal._solver  # noqa: F401

    def refuse(h, L, depth, **kw):
        raise ValueError("no plan for this input")

    monkeypatch.setattr(packlib.packing, "_nnls", refuse)


def test_compare_defaults_tabulate_a_refusal(monkeypatch):
    refusing(monkeypatch)
    table = packlib.compare(SMALL, max_sequences_per_pack=3, warmup=False, progress=False)
    rows = {r.method: r for r in table}
    assert list(rows) == list(packlib.methods.names("histogram"))
    assert rows["nnls"].packs is None and "nnls refused: no plan for this input" in rows["nnls"].note
    assert rows["lpfhp"].packs > 0 and table.best().method != "nnls"
    md = table.to_markdown().splitlines()
    assert md[0].rstrip("| ").endswith("note") and "refused" in md[2 + list(rows).index("nnls")]
    assert "nnls refused" in table._repr_html_()


def test_compare_named_method_still_raises(monkeypatch):
    refusing(monkeypatch)
    with pytest.raises(ValueError, match="no plan for this input"):
        packlib.compare(SMALL, max_sequences_per_pack=3, methods=["lpfhp", "nnls"], warmup=False)


def test_compare_progress_names_what_runs(capsys):
    pytest.importorskip("tqdm")
    packlib.compare(SMALL, max_sequences_per_pack=(2, 3), methods=["spfhp", "nnls"], progress=True)
    err = capsys.readouterr().err
    assert "compare" in err


def test_compare_at_long_context_has_every_row():
    h = lognormal_histogram(8192, 200, seed=1)
    table = packlib.compare(h, max_sequences_per_pack=3, methods=["lpfhp", "nnls"], progress=False)  # warms classes too
    assert [r.packs is not None for r in table] == [True, True]
