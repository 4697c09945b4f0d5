"""Tests of packlib.optimal: certified lower bounds and near-optimal histogram packing."""
import math
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packlib
from packlib import LowerBound, PackingPlan
from packlib._kernels.optimal import price, round_columns

from . import naive_certificate

WIKI = packlib.datasets.wikipedia_512()
DEPTHS = st.one_of(st.none(), st.integers(1, 6))


def check_plan(plan: PackingPlan, h, depth):
    h = np.asarray(h)
    L = len(h)
    assert np.array_equal(plan.histogram(), h), "every sequence exactly once"
    s = plan.strategies
    assert (s.sum(axis=1) <= L).all(), "no pack over the max length"
    if depth is not None:
        assert s.shape[1] <= depth, "no pack over the depth"
    assert (plan.counts > 0).all()
    assert plan.method == "optimal"
    assert plan.lower_bound is not None and plan.gap == plan.num_packs - plan.lower_bound >= 0
    assert plan.lower_bound == plan.info["bound"].bound == plan.bound.bound
    assert plan.status in (0, 1) and plan.success == (plan.status == 0) and plan.message
    assert plan.bound.certificate is None or plan.bound.certificate.bound == plan.bound.lp_bound


# ------------------------------------------------------------- plain-Python references


def patterns(h, depth, capped=True):
    """Every pattern (multiset of present lengths, at most depth items, at most L tokens;
    no more copies than h has if ``capped``), as tuples of lengths (descending)."""
    L = len(h)
    present = [l for l in range(L, 0, -1) if h[l - 1] > 0]
    out = []

    def rec(start, room, left, cur):
        if cur:
            out.append(tuple(cur))
        if left == 0:
            return
        for i in range(start, len(present)):
            l = present[i]
            if l <= room and (not capped or cur.count(l) < h[l - 1]):
                rec(i, room - l, left - 1, cur + [l])

    rec(0, L, L if depth is None else depth, [])
    return out


def exact_optimum(h, depth):
    """Fewest packs, by memoised search over the remaining multiset (tiny inputs only):
    some pack holds the longest remaining sequence, so try every pattern that contains it."""
    L = len(h)

    @lru_cache(maxsize=None)
    def best(state):
        if not any(state):
            return 0
        top = max(l for l in range(1, L + 1) if state[l - 1])
        res = math.inf
        for p in patterns(list(state), depth):
            if p[0] == top:
                nxt = list(state)
                for l in p:
                    nxt[l - 1] -= 1
                res = min(res, 1 + best(tuple(nxt)))
        return res

    return best(tuple(int(c) for c in h))


def exact_lp(h, depth):
    """The cutting-stock LP over all patterns of the present lengths (small inputs only)."""
    from scipy.optimize import linprog

    pats = patterns(h, depth, capped=False)
    present = [l for l in range(1, len(h) + 1) if h[l - 1]]
    if not present:
        return 0.0
    A = np.array([[p.count(l) for p in pats] for l in present], dtype=float)
    res = linprog(np.ones(len(pats)), A_ub=-A, b_ub=-np.array([h[l - 1] for l in present], float), method="highs")
    assert res.status == 0
    return res.fun


@st.composite
def tiny_histograms(draw):
    L = draw(st.integers(1, 12))
    n_items = draw(st.integers(0, 7))
    lengths = draw(st.lists(st.integers(1, L), min_size=n_items, max_size=n_items))
    return np.bincount(np.array(lengths, dtype=np.int64), minlength=L + 1)[1:].astype(np.int64)


@st.composite
def small_histograms(draw, max_len=40, max_count=30):
    L = draw(st.integers(1, max_len))
    counts = draw(st.lists(st.integers(0, max_count), min_size=L, max_size=L))
    return np.array(counts, dtype=np.int64)


@st.composite
def large_histograms(draw):
    """Lengths 1..L for L up to 1024, counts up to 10**7, a few dozen distinct lengths."""
    L = draw(st.integers(1, 1024))
    k = draw(st.integers(1, min(L, 40)))
    lengths = draw(st.lists(st.integers(1, L), min_size=k, max_size=k, unique=True))
    counts = draw(st.lists(st.integers(1, 10**7), min_size=k, max_size=k))
    h = np.zeros(L, dtype=np.int64)
    h[np.array(lengths) - 1] = counts
    return h


# ------------------------------------------------------------------------------ bounds


@given(tiny_histograms(), DEPTHS)
@settings(max_examples=40)
def test_bound_and_plan_bracket_the_exact_optimum(h, depth):
    opt = exact_optimum(h, depth)
    lb = packlib.lower_bound(h, max_sequences_per_pack=depth)
    plan = packlib.optimal_pack(h, max_sequences_per_pack=depth)
    check_plan(plan, h, depth)
    assert lb.bound <= opt <= plan.num_packs
    assert plan.lower_bound <= opt


@given(small_histograms(max_len=14, max_count=4), DEPTHS)
@settings(max_examples=25)
def test_lp_bound_is_the_ceiling_of_the_exact_lp(h, depth):
    lp = exact_lp(h, depth)
    lb = packlib.lower_bound(h, max_sequences_per_pack=depth)
    assert lb.lp_converged
    assert math.ceil(lp - 1e-6) <= lb.lp_bound <= math.ceil(lp + 1e-6)
    if lb.info["lp"] == "solved":
        assert abs(lb.lp_value - lp) <= 1e-6 * max(1.0, lp)
    else:  # stopped once the ceiling was proven: the last LP is above the optimum
        assert lb.info["lp"] == "ceiling proven" and lb.lp_value >= lp - 1e-6
    assert lb.bound == max(lb.lp_bound, lb.trivial_bound, lb.large_items_bound, lb.cardinality_bound)


@given(small_histograms(), DEPTHS)
@settings(max_examples=20)
def test_simple_bounds(h, depth):
    lb = packlib.lower_bound(h, max_sequences_per_pack=depth)
    L = len(h)
    tokens = int((h * np.arange(1, L + 1)).sum())
    assert lb.trivial_bound == -(-tokens // L)
    assert lb.large_items_bound == int(h[(np.arange(1, L + 1) * 2) > L].sum())
    assert lb.cardinality_bound == (0 if depth is None else -(-int(h.sum()) // depth))
    assert lb.bound >= max(lb.trivial_bound, lb.large_items_bound, lb.cardinality_bound)


# ------------------------------------------------------------------------------- plans


@given(large_histograms(), DEPTHS)
@settings(max_examples=12)
def test_large_random_histograms(h, depth):
    plan = packlib.optimal_pack(h, max_sequences_per_pack=depth)
    check_plan(plan, h, depth)
    for pack in (packlib.spfhp_pack, packlib.lpfhp_pack):
        packs = pack(h, max_sequences_per_pack=depth).num_packs
        assert plan.lower_bound <= packs and plan.num_packs <= packs
    for name, packs in plan.info["heuristics"].items():
        assert plan.lower_bound <= packs and plan.num_packs <= packs, name


@given(small_histograms(max_len=64, max_count=200), DEPTHS)
@settings(max_examples=20)
def test_never_worse_than_the_heuristics(h, depth):
    plan = packlib.optimal_pack(h, max_sequences_per_pack=depth)
    check_plan(plan, h, depth)
    for pack in (packlib.spfhp_pack, packlib.lpfhp_pack, packlib.nnls_pack):
        other = pack(h, max_sequences_per_pack=depth)
        assert plan.lower_bound <= other.num_packs
        assert plan.num_packs <= other.num_packs, pack.__name__


def test_max_sequence_length_pads_the_histogram():
    h = [0, 0, 0, 4, 0, 3]
    a = packlib.optimal_pack(h, 10, 3)
    check_plan(a, np.array(h + [0] * 4), 3)
    assert a.max_sequence_length == 10
    assert packlib.lower_bound(h, max_sequence_length=10, max_sequences_per_pack=3).bound == a.lower_bound


def test_empty_histogram():
    plan = packlib.optimal_pack([0, 0, 0], max_sequences_per_pack=2)
    assert plan.num_packs == 0 and plan.lower_bound == 0 and plan.gap == 0
    lb = packlib.lower_bound([0, 0, 0], max_sequences_per_pack=None)
    assert lb.bound == lb.lp_bound == 0 and lb.lp_converged


def test_small_known_answer():
    # L = 10: three 6s, three 4s, three 3s -> (6,4) x3 and (3,3,3)+... depth 3: 4 packs
    h = np.zeros(10, np.int64)
    h[[5, 3, 2]] = 3
    assert exact_optimum(h, 3) == 4
    plan = packlib.optimal_pack(h, max_sequences_per_pack=3)
    assert plan.num_packs == 4 and plan.lower_bound == 4 and plan.gap == 0
    # depth 1: one pack per sequence
    assert packlib.optimal_pack(h, max_sequences_per_pack=1).num_packs == 9 == packlib.lower_bound(h, max_sequences_per_pack=1).bound


# ---------------------------------------------------------------------------- time limit


@pytest.mark.parametrize("bad", [0, -1, 0.0, float("nan"), True, "1", [1]])
def test_bad_time_limit(bad):
    with pytest.raises(ValueError, match="time_limit"):
        packlib.optimal_pack([1, 2, 3], max_sequences_per_pack=2, time_limit=bad)


def test_tiny_time_limit_still_returns_a_valid_plan():
    rng = np.random.default_rng(3)
    h = rng.integers(0, 1000, 256)
    plan = packlib.optimal_pack(h, max_sequences_per_pack=3, time_limit=1e-6)
    check_plan(plan, h, 3)
    full = packlib.lower_bound(h, max_sequences_per_pack=3)
    assert plan.lower_bound <= full.bound  # still a valid (maybe weaker) bound


@pytest.mark.parametrize("bad", [np.array([[1, 2]]), [-1, 2], [1.5, 2], []])
def test_bad_histogram(bad):
    with pytest.raises(ValueError):
        packlib.optimal_pack(bad, max_sequences_per_pack=2)
    with pytest.raises(ValueError):
        packlib.lower_bound(bad, max_sequences_per_pack=2)


def test_bad_depth_and_length():
    with pytest.raises(ValueError, match="max_sequences_per_pack"):
        packlib.lower_bound([1, 2], max_sequences_per_pack=0)
    with pytest.raises(ValueError, match="max_sequence_length"):
        packlib.optimal_pack([1, 2, 3], max_sequence_length=2, max_sequences_per_pack=2)


# ------------------------------------------------------------------------- result type


def test_lower_bound_result_type():
    h = np.zeros(10, np.int64)
    h[[5, 3, 2]] = 3
    lb = packlib.lower_bound(h, max_sequences_per_pack=3)
    assert isinstance(lb, LowerBound) and int(lb) == lb.bound == 4
    d = lb.to_dict()
    assert d["bound"] == 4 and d["max_sequence_length"] == 10 and d["max_sequences_per_pack"] == 3
    assert set(d) >= {"lp_bound", "lp_value", "trivial_bound", "large_items_bound", "cardinality_bound"}
    assert "LowerBound(4 packs" in repr(lb) and "LP 4" in repr(lb)
    with pytest.raises(Exception):
        lb.bound = 3
    import json

    json.dumps(d)


# ---------------------------------------------------------------------------- kernels


@given(small_histograms(max_len=14, max_count=3), DEPTHS, st.integers(0, 2**32 - 1))
@settings(max_examples=30)
def test_price_kernel_matches_enumeration(h, depth, seed):
    from packlib.optimal._lp import _caps, _kernel_depth, _max_items

    L = len(h)
    y = np.random.default_rng(seed).random(L)
    pats = patterns(h, depth, capped=False)
    if not pats:
        return
    caps = _caps(h, L, depth)
    fit = _max_items(caps, L)
    width = fit if depth is None else min(fit, depth)
    kd = _kernel_depth(h, L, depth)
    value = {p: sum(y[l - 1] for l in p) for p in pats}
    best_ref = max(value.values())
    best, values, rows = price(y, caps, L, kd, -1.0, width, True)
    best2, _, _ = price(y, caps, L, kd, -1.0, width, False)
    assert best == pytest.approx(best_ref) and best2 == pytest.approx(best_ref)
    # one row per present length: the best pattern whose longest length it is
    assert rows.shape[0] == int((h > 0).sum())
    for v, row in zip(values, rows):
        p = tuple(int(l) for l in row if l)
        assert p in value and v == pytest.approx(value[p])
        assert v == pytest.approx(max(val for q, val in value.items() if q[0] == p[0]))


@given(small_histograms(max_len=12, max_count=20), st.integers(1, 4), st.integers(0, 2**32 - 1))
@settings(max_examples=30)
def test_round_columns_covers_at_most_the_histogram(h, depth, seed):
    rng = np.random.default_rng(seed)
    pats = patterns(np.minimum(h, depth), depth)
    if not pats:
        return
    rows = np.zeros((len(pats), depth), np.int64)
    for i, p in enumerate(pats):
        rows[i, : len(p)] = p
    x = rng.random(len(pats)) * 3 * rng.integers(0, 2, len(pats))
    out, counts, residual = round_columns(rows, x, h)
    covered = np.zeros(len(h), np.int64)
    for r, c in zip(out, counts):
        for l in r[r > 0]:
            covered[l - 1] += c
    assert (residual >= 0).all() and np.array_equal(covered + residual, h)
    assert counts.sum() <= np.floor(x + 1e-9).sum()


# ------------------------------------------------------------------- known answers


def test_wikipedia_depth_3():
    plan = packlib.optimal_pack(WIKI, max_sequences_per_pack=3)
    check_plan(plan, WIKI, 3)
    assert plan.lower_bound == 8_143_829  # the arc-flow LP bound of the reference
    assert plan.num_packs <= 8_143_860
    assert plan.num_packs <= 8_144_341  # our NNLSHP
    lb = packlib.lower_bound(WIKI, max_sequences_per_pack=3)
    assert lb.lp_bound == 8_143_829 and lb.lp_value == pytest.approx(8_143_828.857, abs=1e-3)
    assert naive_certificate.check_fast(plan.bound.certificate, WIKI) == 8_143_829  # checked without packlib


def test_wikipedia_unlimited_and_depth_2():
    plan = packlib.optimal_pack(WIKI, max_sequences_per_pack=None)
    check_plan(plan, WIKI, None)
    assert plan.lower_bound == 8_135_727 and plan.num_packs <= 8_135_728
    assert naive_certificate.check_fast(plan.bound.certificate, WIKI) == 8_135_727
    plan2 = packlib.optimal_pack(WIKI, max_sequences_per_pack=2)
    check_plan(plan2, WIKI, 2)
    assert plan2.num_packs == 10_099_081 == plan2.lower_bound
    assert packlib.lower_bound(WIKI, max_sequences_per_pack=2).lp_bound == 10_099_081


def test_linprog_fallback_gives_the_same_bound(monkeypatch):
    """Without scipy's private HiGHS bindings, each round is a cold linprog solve."""
    import packlib.optimal

    rng = np.random.default_rng(7)
    h = rng.integers(0, 50, 40) * (rng.random(40) < 0.5)
    fast = packlib.lower_bound(h, max_sequences_per_pack=3)
    monkeypatch.setattr(packlib.optimal._tuning, "USE_HIGHS_BINDINGS", False)
    slow = packlib.lower_bound(h, max_sequences_per_pack=3)
    assert slow.lp_bound == fast.lp_bound and slow.lp_value == pytest.approx(fast.lp_value)
    assert abs(slow.lp_value - exact_lp(h, 3)) <= 1e-6 * max(1.0, slow.lp_value)
    plan = packlib.optimal_pack(h, max_sequences_per_pack=3)
    check_plan(plan, h, 3)


# ------------------------------------------------------------------------- certificate


@given(small_histograms(max_len=24, max_count=40), DEPTHS)
@settings(max_examples=30)
def test_certificate_is_checked_by_an_independent_dp(h, depth):
    lb = packlib.lower_bound(h, max_sequences_per_pack=depth)
    cert = lb.certificate
    if not h.any():
        assert cert is None and lb.bound == 0
        return
    assert cert.lengths.dtype == cert.prices.dtype == np.int64 and (cert.prices >= 0).all()
    assert 0 < cert.denominator <= 2**40 and isinstance(cert.denominator, int)
    assert np.array_equal(cert.lengths, np.flatnonzero(h) + 1) and np.array_equal(cert.counts, h[h > 0])
    assert cert.max_sequence_length == len(h)
    assert cert.max_sequences_per_pack == (None if depth is None or depth >= len(h) else depth)
    proven = naive_certificate.check(cert, h)
    assert proven == lb.lp_bound == lb.bound == cert.bound
    assert naive_certificate.check_fast(cert, h) == proven
    assert lb.status == 0 and lb.success and lb.message
    with pytest.raises(AssertionError, match="denominator"):
        naive_certificate.check(naive_certificate.broken(cert))
    with pytest.raises(AssertionError, match="denominator"):
        naive_certificate.check_fast(naive_certificate.broken(cert))


@given(st.integers(1, 30), DEPTHS, st.integers(0, 2**32 - 1))
@settings(max_examples=40)
def test_fast_checker_matches_the_plain_one(L, depth, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, L + 1))
    lengths = np.sort(rng.choice(np.arange(1, L + 1), n, replace=False))
    prices = rng.integers(0, 50, n) * (rng.random(n) < 0.8)
    plain = naive_certificate.best_pack_value(lengths.tolist(), prices.tolist(), L, depth)
    assert naive_certificate.best_pack_value_fast(lengths, prices, L, depth) == plain
    cert = {"lengths": lengths, "counts": np.ones(n, np.int64), "prices": prices, "denominator": max(plain, 1),
            "max_sequence_length": L, "max_sequences_per_pack": depth}
    assert naive_certificate.check(cert) == naive_certificate.check_fast(cert)
    if plain > 1:
        cert["denominator"] = plain - 1
        with pytest.raises(AssertionError):
            naive_certificate.check(cert)
        with pytest.raises(AssertionError):
            naive_certificate.check_fast(cert)


def test_broken_certificate_is_rejected():
    h = np.zeros(10, np.int64)
    h[[5, 3, 2]] = 3
    cert = packlib.lower_bound(h, max_sequences_per_pack=3).certificate
    assert naive_certificate.check(cert, h) == 4
    bad = cert.to_dict()
    bad["prices"][0] += cert.denominator  # the shortest length alone now exceeds the denominator
    with pytest.raises(AssertionError, match="denominator"):
        naive_certificate.check(bad)
    bad = cert.to_dict()
    bad["denominator"] = 0
    with pytest.raises(AssertionError, match="denominator"):
        naive_certificate.check(bad)
    with pytest.raises(AssertionError, match="histogram"):
        naive_certificate.check(cert, h + 1)


def test_plan_carries_its_bound_and_status():
    h = np.zeros(10, np.int64)
    h[[5, 3, 2]] = 3
    plan = packlib.optimal_pack(h, max_sequences_per_pack=3)
    assert plan.bound is plan.info["bound"] and plan.bound.bound == plan.lower_bound == 4
    assert plan.status == 0 and plan.success and "optimal" in plan.message
    assert naive_certificate.check(plan.bound.certificate, h) == plan.lower_bound


def test_time_limit_status():
    rng = np.random.default_rng(3)
    h = rng.integers(0, 1000, 256)
    plan = packlib.optimal_pack(h, max_sequences_per_pack=3, time_limit=1e-6)
    assert plan.gap == 0 or (plan.status == 1 and not plan.success and "time limit" in plan.message)
    assert naive_certificate.check(plan.bound.certificate, h) == plan.lower_bound




def test_nnls_runs_inside_optimal_only_in_its_exact_range():
    from packlib._nnls_limits import MAX_NNLS_LENGTH, nnls_fits

    assert nnls_fits(MAX_NNLS_LENGTH) and not nnls_fits(8192)


# ------------------------------------------------------------------- long context


@given(tiny_histograms(), DEPTHS)
@settings(max_examples=40)
def test_long_context_path_brackets_the_optimum(h, depth):
    """The long-context path (no LP: L2 certificate, exact-fill plan), forced on tiny inputs."""
    from unittest import mock

    import packlib.optimal

    with mock.patch.object(packlib.optimal._tuning, "LONG_CONTEXT", 0), mock.patch.object(packlib.optimal._tuning, "LP_LENGTHS", 0):
        plan = packlib.optimal_pack(h, max_sequences_per_pack=depth)
        lb = packlib.lower_bound(h, max_sequences_per_pack=depth)
    check_plan(plan, h, depth)
    opt = exact_optimum(h, depth)
    assert lb.bound <= opt <= plan.num_packs and plan.lower_bound == lb.bound
    if h.any():
        assert naive_certificate.check(lb.certificate, h) == lb.bound == lb.lp_bound
        assert lb.status == 0 and "long context" in lb.message


@given(small_histograms(max_len=60, max_count=50), st.integers(0, 8), st.integers(0, 5))
@settings(max_examples=60)
def test_exact_fill_packs_every_sequence_once(h, D, mode):
    from packlib._kernels.optimal import exact_fill

    L = len(h)
    items, offsets, counts = exact_fill(h, L, D, mode)
    covered = np.zeros(L, np.int64)
    for t in range(counts.size):
        pack = items[offsets[t] : offsets[t + 1]]
        assert 0 < pack.size and (D == 0 or pack.size <= D) and pack.sum() <= L
        assert (np.diff(pack) <= 0).all() and counts[t] > 0
        np.add.at(covered, pack - 1, counts[t])
    assert np.array_equal(covered, h)


@given(st.integers(1, 40), st.integers(0, 2**32 - 1))
@settings(max_examples=60)
def test_pack_value_kernels_match_the_plain_dp(L, seed):
    from packlib._kernels.optimal import max_pack_value, pack_value_at_most

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, L + 1))
    lens = np.sort(rng.choice(np.arange(1, L + 1), n, replace=False)).astype(np.int64)
    prices = (rng.integers(0, 60, n) * (rng.random(n) < 0.8)).astype(np.int64)
    for depth in (None, 1, 2, 3):
        plain = naive_certificate.best_pack_value(lens.tolist(), prices.tolist(), L, depth)
        assert max_pack_value(lens, prices, L, 0 if depth is None else depth) == plain
    plain = naive_certificate.best_pack_value(lens.tolist(), prices.tolist(), L, None)
    for den in (plain - 1, plain, plain + 1):
        if den <= 0:
            continue
        dear = prices * L > den * lens
        assert pack_value_at_most(lens, prices, dear, L, np.int64(den)) == (plain <= den)


def test_long_context_lognormal():
    """A small but representative long-context input: L = 4096, 200 k lognormal lengths."""
    L = 4096
    x = np.random.default_rng(1).lognormal(np.log(L) - 1.2, 0.8, 200_000)
    h = np.bincount(np.clip(np.rint(x), 1, L).astype(np.int64), minlength=L + 1)[1:]
    plan = packlib.optimal_pack(h, max_sequences_per_pack=None)
    check_plan(plan, h, None)
    assert plan.gap <= 1e-4 * plan.lower_bound
    assert plan.lower_bound > -(-int((h * np.arange(1, L + 1)).sum()) // L)  # the L2 bound beats tokens / L
    assert naive_certificate.check_fast(plan.bound.certificate, h) == plan.lower_bound
    with pytest.raises(AssertionError):
        naive_certificate.check_fast(naive_certificate.broken(plan.bound.certificate))
    deep = packlib.optimal_pack(h, max_sequences_per_pack=8)
    check_plan(deep, h, 8)
    assert naive_certificate.check_fast(deep.bound.certificate, h) == deep.lower_bound


@given(small_histograms(max_len=60, max_count=80), st.integers(1, 6))
@settings(max_examples=60)
def test_depth_repair_keeps_every_sequence_and_the_limit(h, D):
    from packlib.optimal._solver import depth_repair
    from packlib._kernels.optimal import exact_fill

    L = len(h)
    items, offsets, counts = exact_fill(h, L, 0, 2)
    items, offsets, cnt, residual = depth_repair(items, offsets, counts, L, D)
    assert (residual >= 0).all() and (cnt > 0).all() and offsets[-1] == items.size
    covered = residual.copy()
    for t, c in enumerate(cnt):
        pack = items[offsets[t] : offsets[t + 1]]
        assert 0 < pack.size <= D and pack.sum() <= L and (np.diff(pack) <= 0).all() and (pack > 0).all()
        np.add.at(covered, pack - 1, c)
    assert np.array_equal(covered, h)


@pytest.mark.parametrize("depth", [None, 3])
def test_long_context_few_lengths_solves_the_lp(depth):
    """Few distinct lengths at L = 8192: the L2 bound is weak there, and the LP is cheap."""
    L = 8192
    h = np.zeros(L, np.int64)
    h[[2730, 3000, 3999, 5499, 1999, 6999]] = [90_000, 50_000, 30_000, 20_000, 70_000, 10_000]
    lb = packlib.lower_bound(h, max_sequences_per_pack=depth)
    assert lb.lp_converged and lb.status == 0
    assert abs(lb.lp_value - exact_lp(h, depth)) <= 1e-6 * lb.lp_value
    plan = packlib.optimal_pack(h, max_sequences_per_pack=depth)
    check_plan(plan, h, depth)
    assert plan.gap <= 1e-4 * plan.lower_bound and plan.lower_bound == lb.bound
    assert naive_certificate.check_fast(plan.bound.certificate, h) == plan.lower_bound


@pytest.mark.parametrize("depth", [10**6, 2**62])
def test_huge_depth_is_unlimited(depth):
    h = np.array([3, 5, 3, 4, 4, 0, 3, 2, 1, 2, 2, 2, 4, 4], dtype=np.int64)
    plan = packlib.optimal_pack(h, max_sequences_per_pack=depth)
    check_plan(plan, h, depth)
    assert plan.max_sequences_per_pack == depth
    free = packlib.optimal_pack(h, max_sequences_per_pack=None)
    assert plan.lower_bound == free.lower_bound and plan.num_packs == free.num_packs
    lb = packlib.lower_bound(h, max_sequences_per_pack=depth)
    assert lb.max_sequences_per_pack == depth and naive_certificate.check(lb.certificate, h) == lb.bound
    with mock_long_context():
        check_plan(packlib.optimal_pack(h, max_sequences_per_pack=depth), h, depth)


def mock_long_context():
    from contextlib import ExitStack
    from unittest import mock

    import packlib.optimal

    stack = ExitStack()
    stack.enter_context(mock.patch.object(packlib.optimal._tuning, "LONG_CONTEXT", 0))
    stack.enter_context(mock.patch.object(packlib.optimal._tuning, "LP_LENGTHS", 0))
    return stack


# ------------------------------------------- long context with a depth limit (grids)


def _forced_long(grids=(3, 5, 8)):
    """Patches that send tiny inputs down the long-context route, with tiny grids."""
    from unittest import mock

    import packlib.optimal

    return [mock.patch.object(packlib.optimal._tuning, "LONG_CONTEXT", 0),
            mock.patch.object(packlib.optimal._tuning, "LP_LENGTHS", 0),
            mock.patch.object(packlib.optimal._tuning, "GRIDS", grids)]


@given(tiny_histograms(), st.integers(1, 6))
@settings(max_examples=40, deadline=None)
def test_grid_route_brackets_the_optimum(h, depth):
    """Long context with a depth limit on tiny inputs, grids coarser than L: the plan is
    valid, the bound proven (checked on its grid and, independently, over tokens)."""
    from contextlib import ExitStack

    with ExitStack() as stack:
        for p in _forced_long():
            stack.enter_context(p)
        plan = packlib.optimal_pack(h, max_sequences_per_pack=depth)
        lb = packlib.lower_bound(h, max_sequences_per_pack=depth)
    check_plan(plan, h, depth)
    assert lb.bound <= exact_optimum(h, depth) <= plan.num_packs and plan.lower_bound == lb.bound
    if h.any():
        cert = lb.certificate
        assert naive_certificate.check(cert, h) == lb.bound
        tokens = {**cert.to_dict(), "grid": None}  # the same prices, claimed over tokens
        assert naive_certificate.check(tokens, h) == lb.bound


@given(small_histograms(max_len=40, max_count=30), st.integers(1, 6), st.integers(1, 40), st.booleans())
@settings(max_examples=60, deadline=None)
def test_grid_certificate_holds_over_tokens_and_breaks(h, depth, K, up):
    """Every grid certificate is valid on its grid and over tokens (the rounding lemma);
    raising a unit's price past the best pack is rejected by both checkers."""
    from packlib.optimal import _relaxed

    L = len(h)
    K = min(K, L)
    cert, _ = _relaxed.grid_certificate(h, L, depth, K, None)
    if cert is None:
        assert not h[(np.arange(1, L + 1) * K // L) > 0].any()
        return
    assert cert.grid == K and cert.bound <= exact_lp_ceiling(h, depth)
    proven = naive_certificate.check(cert, h)
    assert proven == cert.bound == naive_certificate.check_fast(cert, h)
    assert naive_certificate.check({**cert.to_dict(), "grid": None}, h) == proven
    bad = naive_certificate.broken(cert)
    for checker in (naive_certificate.check, naive_certificate.check_fast):
        with pytest.raises(AssertionError):
            checker(bad)


@given(small_histograms(max_len=40, max_count=30), st.integers(1, 6), st.integers(1, 40))
@settings(max_examples=60, deadline=None)
def test_interpolated_certificate_holds_over_tokens_and_breaks(h, depth, K):
    """The grid certificate's prices drawn as a line between units: a claim over tokens
    that both checkers accept, below the LP; a price raised past the best pack is
    rejected."""
    from packlib.optimal import _relaxed

    L = len(h)
    K = min(K, L - 1) or 1
    cert, _ = _relaxed.grid_certificate(h, L, depth, K, None)
    line = _relaxed.interpolated_certificate(h, L, depth, cert)
    if line is None:
        assert cert is None or cert.grid is None
        return
    assert line.grid is None and line.bound <= exact_lp_ceiling(h, depth)
    assert naive_certificate.check(line, h) == line.bound == naive_certificate.check_fast(line, h)
    bad = naive_certificate.broken(line)
    for checker in (naive_certificate.check, naive_certificate.check_fast):
        with pytest.raises(AssertionError):
            checker(bad)


def test_interpolated_certificate_known_answer():
    """Lengths 1 (x5), 2 (x19) and 12 (x19), L = 22, depth 2, a grid of 5 units: the grid
    proves 10 packs; drawn as a line, the same prices prove 19 (the LP: 21.5)."""
    from packlib.optimal import _relaxed

    h = np.zeros(22, np.int64)
    h[[0, 1, 11]] = [5, 19, 19]
    cert, _ = _relaxed.grid_certificate(h, 22, 2, 5, None)
    line = _relaxed.interpolated_certificate(h, 22, 2, cert)
    assert (cert.bound, line.bound, exact_lp(h, 2)) == (10, 19, 21.5)
    assert naive_certificate.check(line, h) == 19


def test_interpolated_certificate_skips_a_costly_dp():
    """The line's DP over tokens runs only when its work (rising prices x (depth + 1) x L)
    is small: with a zero work allowance no certificate is made."""
    from unittest import mock

    from packlib.optimal import _relaxed, _tuning

    h = np.zeros(22, np.int64)
    h[[0, 1, 11]] = [5, 19, 19]
    cert, _ = _relaxed.grid_certificate(h, 22, 2, 5, None)
    with mock.patch.object(_tuning, "INTERPOLATION_WORK", 0.0):
        assert _relaxed.interpolated_certificate(h, 22, 2, cert) is None


def exact_lp_ceiling(h, depth):
    return math.ceil(exact_lp(h, depth) - 1e-7) if len(h) <= 12 or h.sum() == 0 else math.inf


def test_grid_checker_rejects_prices_that_are_not_a_function_of_the_unit():
    from packlib.optimal import _relaxed

    h = np.zeros(40, np.int64)
    h[[4, 5, 20, 33]] = [7, 3, 5, 2]
    cert, _ = _relaxed.grid_certificate(h, 40, 3, 8, None)
    d = cert.to_dict()
    i = d["lengths"].index(5)  # lengths 5 and 6 share unit 1 of 8
    d["prices"][i] += 1
    for checker in (naive_certificate.check, naive_certificate.check_fast):
        with pytest.raises(AssertionError, match="different prices"):
            checker(d)
    assert _relaxed.verified_grid(packlib.Certificate(**{**{k: np.asarray(v) if isinstance(v, list) else v
                                                              for k, v in d.items()}})) is None


@given(small_histograms(max_len=60, max_count=40), st.integers(1, 8), st.integers(1, 60))
@settings(max_examples=60, deadline=None)
def test_grid_plan_holds_every_sequence_once(h, depth, K):
    from packlib.optimal import _relaxed, _tuning

    L = len(h)
    plan, _, _ = _relaxed.grid_plan(h, L, depth, min(K, L), None)
    if plan is None:
        assert not h.any()
        return
    p = PackingPlan.from_ragged(*plan, L, depth)
    assert np.array_equal(p.histogram(), h)
    assert (p.strategy_tokens() <= L).all() and np.diff(p.strategy_offsets).max() <= depth
    assert p.num_packs >= packlib.lower_bound(h, max_sequences_per_pack=depth).bound
    from unittest import mock

    with mock.patch.object(_tuning, "ROUNDINGS", 0):  # one rounding, the rest by the fill
        once, _, _ = _relaxed.grid_plan(h, L, depth, min(K, L), None)
    assert p.num_packs <= once[2].sum()  # solving the rest's LP again never costs packs


def test_expand_bucket_packs_runs_and_mixed_packs():
    """Each unit hands out its longest lengths first; identical packs come out as one row
    with a count, and a pack whose slots of one unit need different lengths is one row."""
    from packlib._kernels.relaxed import expand_bucket_packs

    L, K = 12, 4  # unit b holds lengths 3b-2..3b
    h = np.zeros(L, np.int64)
    h[[5, 4, 2, 1]] = [3, 2, 4, 1]  # lengths 6 (x3), 5 (x2), 3 (x4), 2 (x1)
    rows = np.array([[2, 2], [1, 0]], np.int64)  # twice two of unit 2; three times one of unit 1
    counts = np.array([2, 3], np.int64)
    b = np.arange(K + 1)
    packs, pc, rest = expand_bucket_packs(rows, counts, h, (b - 1) * L // K + 1, b * L // K)
    got = [(tuple(sorted(int(x) for x in r if x)), int(c)) for r, c in zip(packs, pc)]
    assert got == [((6, 6), 1), ((5, 6), 1), ((3,), 3)]
    assert rest.tolist() == [0, 1, 1, 0, 1] + [0] * 7  # one each of 2, 3 and 5 left


def test_slot_bound_known_answer():
    """Three sequences of length L fill a pack each; eight of length 1 need two packs of 4:
    5 packs, which neither tokens (4) nor sequences / depth (3) prove."""
    h = np.zeros(10, np.int64)
    h[[9, 0]] = [3, 8]
    from packlib.optimal import _relaxed

    cert = _relaxed.slot_certificate(h, 10, 4)
    assert cert.bound == 5 == naive_certificate.check(cert, h)
    lb = packlib.lower_bound(h, max_sequences_per_pack=4)
    assert lb.bound == 5


def test_large_slot_bound_known_answer():
    """Depth 4, L = 10: three sequences of 9 leave room for one sequence of 1 each, so the
    twelve of length 1 need three more packs: 6 packs. The large-slot bound proves it
    (each 9 priced 4 - 1 = 3, each 1 priced 1, over 4: (9 + 12) / 4); tokens prove 4,
    sequences / depth 4, the slot bound 5."""
    from packlib.optimal import _relaxed

    h = np.zeros(10, np.int64)
    h[[8, 0]] = [3, 12]
    cert = _relaxed.large_slot_certificate(h, 10, 4)
    assert cert.bound == 6 == naive_certificate.check(cert, h)
    assert _relaxed.slot_certificate(h, 10, 4).bound == 5
    assert _relaxed.large_slot_certificate(h, 10, None) is None
    h[8] = 0  # no long sequence: nothing to add
    assert _relaxed.large_slot_certificate(h, 10, 4) is None


@given(small_histograms(max_len=40, max_count=30), st.integers(1, 8))
@settings(max_examples=40, deadline=None)
def test_large_slot_bound_holds(h, depth):
    """The large-slot certificate is checked by the independent plain DP and never
    exceeds the exact optimum's bracket (the best plan of optimal_pack)."""
    from packlib.optimal import _relaxed

    cert = _relaxed.large_slot_certificate(h, len(h), depth)
    if cert is not None:
        bound = naive_certificate.check(cert, h)
        assert bound <= packlib.optimal_pack(h, max_sequences_per_pack=depth).num_packs


def test_tiny_beside_huge_is_packed_optimally():
    """L = 4096, depth 32: 200 k tiny sequences (1-16 tokens) beside 6 k huge ones (more
    than L / 2). A huge one with less room than 31 tiny ones leaves slots empty, which
    only the large-slot bound sees; the exact fill that starts each pack with the longest
    sequence and then takes the shortest ones where they no longer fit in every slot
    (mode 5) reaches it: optimal. The other fills are above it."""
    from packlib._kernels.optimal import exact_fill

    L = 4096
    rng = np.random.default_rng(5)
    lengths = np.concatenate([rng.integers(1, 17, 200_000), rng.integers(L // 2, L + 1, 6_000)])
    h = np.bincount(lengths, minlength=L + 1)[1:]
    plan = packlib.optimal_pack(h, max_sequences_per_pack=32)
    check_plan(plan, h, 32)
    assert plan.gap == 0 and plan.info["fill"] == "fill 5", plan.message
    assert plan.lower_bound > -(-lengths.size // 32)
    assert naive_certificate.check_fast(plan.bound.certificate, h) == plan.lower_bound
    assert min(int(exact_fill(h, L, 32, mode)[2].sum()) for mode in (3, 2, 0, 4)) > plan.num_packs


def test_long_context_depth_limit_closes_the_gap():
    """L = 4096, depth 4, 300 k lengths of which 70 % short: the cardinality bound is 5 %
    below the optimum; the grid LPs close plan and bound to within 0.05 %."""
    L = 4096
    rng = np.random.default_rng(3)
    n = 300_000
    short = rng.lognormal(np.log(400), 0.9, int(0.7 * n))
    long = rng.lognormal(np.log(L) - 1.0, 0.6, n - short.size)
    h = np.bincount(np.clip(np.rint(np.concatenate([short, long])), 1, L).astype(np.int64), minlength=L + 1)[1:]
    plan = packlib.optimal_pack(h, max_sequences_per_pack=4)
    check_plan(plan, h, 4)
    assert plan.lower_bound > -(-n // 4) * 1.04
    assert plan.gap <= 5e-4 * plan.lower_bound, plan.message
    assert plan.bound.info["grids"] and plan.info["source"] == "grid"
    assert naive_certificate.check_fast(plan.bound.certificate, h) == plan.lower_bound
    with pytest.raises(AssertionError):
        naive_certificate.check_fast(naive_certificate.broken(plan.bound.certificate))
    assert packlib.lower_bound(h, max_sequences_per_pack=4).bound == plan.lower_bound


def test_long_context_exchanges_reach_the_token_bound():
    """L = 4096, depth 8, 200 k lengths of which 80 % short: the depth does not bind, but
    the unlimited fill piles the short sequences into packs far too deep. The exchanges
    make its exactly-full packs respect the limit: optimal (= ceil(tokens / L)), no grid
    LP needed, where the depth-aware fill alone is 0.8 % above."""
    L = 4096
    rng = np.random.default_rng(1)
    n = 200_000
    short = rng.lognormal(np.log(600), 0.9, rng.binomial(n, 0.8))
    long = rng.lognormal(np.log(L) - 1.0, 0.6, n - short.size)
    h = np.bincount(np.clip(np.rint(np.concatenate([short, long])), 1, L).astype(np.int64), minlength=L + 1)[1:]
    plan = packlib.optimal_pack(h, max_sequences_per_pack=8)
    check_plan(plan, h, 8)
    tokens = int((h * np.arange(1, L + 1)).sum())
    assert plan.num_packs == plan.lower_bound == -(-tokens // L), plan.message
    assert plan.info["fill"] == "fill 2 + exchanges" and not plan.bound.info["grids"]
    from packlib._kernels.optimal import exact_fill

    assert min(int(exact_fill(h, L, 8, mode)[2].sum()) for mode in (3, 2, 0, 4)) > 1.005 * plan.num_packs


@given(small_histograms(max_len=40, max_count=30), st.integers(1, 6), st.integers(2, 40), st.booleans())
@settings(max_examples=30, deadline=None)
def test_interior_point_first_solve_gives_the_same_lp(h, depth, K, up):
    """A big grid LP of deep patterns is first solved by interior point (then by primal
    simplex from its crossover basis): forced on every grid LP, the bounds equal the
    simplex ones and hold, and the plans hold every sequence once."""
    from contextlib import ExitStack
    from unittest import mock

    import packlib.optimal
    from packlib.optimal import _lp, _relaxed

    L, K = len(h), min(K, len(h))
    solve, first_by_ipm = _lp._Master.solve, []

    def spy(master, deadline=None):
        first_by_ipm.append(master.deep and master.solves == 0)
        return solve(master, deadline)

    def run(threshold):
        with ExitStack() as stack:
            for name in ("IPM_COLUMNS", "IPM_DEPTH"):
                stack.enter_context(mock.patch.object(packlib.optimal._tuning, name, threshold))
            stack.enter_context(mock.patch.object(_lp._Master, "solve", spy))
            if up:
                return _relaxed.grid_plan(h, L, depth, K, None)[0]
            return _relaxed.grid_certificate(h, L, depth, K, None)[0]

    simplex, ipm = run(10**9), run(0)
    if not up:
        assert (simplex is None) == (ipm is None)
        if ipm is not None:
            assert any(first_by_ipm) and ipm.bound == simplex.bound
            assert naive_certificate.check(ipm, h) == ipm.bound <= exact_lp_ceiling(h, depth)
    elif ipm is not None:
        p = PackingPlan.from_ragged(*ipm, L, depth)
        assert np.array_equal(p.histogram(), h) and any(first_by_ipm)
        assert (p.strategy_tokens() <= L).all() and np.diff(p.strategy_offsets).max() <= depth


def test_grid_lps_leave_a_margin_of_the_time_limit():
    """The grid LPs stop 5 % of the time left before the deadline, so that what follows a
    stopped LP (its rounding, the fill of its rest, the certificates) fits in the limit."""
    import time
    from contextlib import ExitStack
    from unittest import mock

    from packlib.optimal import _relaxed

    seen = []
    real = _relaxed.grid_certificate

    def spy(h, L, depth, K, deadline, *args):
        seen.append(deadline)
        return real(h, L, depth, K, deadline, *args)

    h = np.zeros(24, np.int64)
    h[[0, 3, 15, 19, 23]] = [28, 50, 19, 20, 27]  # the grids run here (the greedy plans are not close)
    with ExitStack() as stack:
        for p in _forced_long():
            stack.enter_context(p)
        stack.enter_context(mock.patch.object(_relaxed, "grid_certificate", spy))
        t0 = time.perf_counter()
        plan = packlib.optimal_pack(h, max_sequences_per_pack=3, time_limit=100.0)
    check_plan(plan, h, 3)
    assert seen and all(t0 + 90 < d < t0 + 96 for d in seen)  # (t0 + 100 without the margin)


def test_exchanges_skipped_at_long_context_when_the_depth_nearly_binds():
    """Lengths 3 (x24), 8 (x7), 13 (x3), L = 21, depth 4: the unlimited fill's packs have
    slots for 34 / 0.944 sequences. Below long context the exchanges still run; at long
    context they run only up to 88 % of those slots (``_tuning.REPAIR_SLOTS``)."""
    from unittest import mock

    from packlib.optimal import _solver, _tuning

    h = np.zeros(21, np.int64)
    h[[2, 7, 12]] = [24, 7, 3]
    for long_context, runs in ((1024, True), (0, False), (0, True)):
        slots = 0.95 if runs and long_context == 0 else _tuning.REPAIR_SLOTS
        with mock.patch.object(_tuning, "LONG_CONTEXT", long_context), \
                mock.patch.object(_tuning, "REPAIR_SLOTS", slots), \
                mock.patch.object(_solver, "_repaired", wraps=_solver._repaired) as repaired:
            items, offsets, counts, _ = _solver._fill_plan(h, 21, 4)
        assert repaired.called == runs
        p = PackingPlan.from_ragged(items, offsets, counts, 21, 4)
        assert np.array_equal(p.histogram(), h) and (p.strategy_tokens() <= 21).all()
        assert np.diff(p.strategy_offsets).max() <= 4


def test_grid_schedule():
    """Which grids are affordable grows with L (the time goals do) and shrinks with depth;
    a grid of L units is one LP, not two; the coarsest grid runs, then the bound side on a
    grid half as fine as the plan side's finest (steps: (K, bound side, plan side))."""
    from packlib.optimal import _relaxed

    assert _relaxed.grid_affordable(1024, 10**6, 8192)  # the coarsest grid always runs
    assert _relaxed.grid_schedule(8192, 8) == [(1024, True, True), (8192, True, True)]  # 8192 = L: one LP
    assert _relaxed.grid_schedule(32768, 8) == [(1024, True, True), (4096, True, False), (8192, False, True)]
    assert _relaxed.grid_schedule(32768, 16) == _relaxed.grid_schedule(131072, 8) == _relaxed.grid_schedule(32768, 8)
    assert _relaxed.grid_schedule(8192, 16) == [(1024, True, True), (2048, True, False), (4096, False, True)]
    assert _relaxed.grid_schedule(4096, 64) == [(1024, True, True), (2048, True, True)]  # nothing between
    assert _relaxed.grid_schedule(2048, 3) == [(1024, True, True), (2048, True, True)]
    assert _relaxed.grid_schedule(1000, 3) == [(1000, True, True)]
    assert _relaxed.grid_affordable(4096, 16, 32768) and not _relaxed.grid_affordable(4096, 32, 32768)
    assert _relaxed.grid_affordable(8192, 8, 131072) and not _relaxed.grid_affordable(8192, 16, 131072)
    assert _relaxed.grid_affordable(2048, 64, 131072) and not _relaxed.grid_affordable(4096, 64, 131072)
    assert _relaxed.plan_work(8192, 16, 32768) == _relaxed.plan_work(8192, 8, 32768) == _relaxed.grid_work(8192, 8, 32768, 1)
    assert _relaxed.grid_work(8192, 8, 8192) * 2 == _relaxed.grid_work(8192, 8, 16384) / 2 ** 0.25


_ROUTE_SIGNATURES = """
import importlib, json, pkgutil
import numpy as np
from numba.core.registry import CPUDispatcher
import packlib, packlib._kernels
from packlib._warmup import warm_histogram_methods

def signatures():
    out = {}
    for info in pkgutil.iter_modules(packlib._kernels.__path__):
        mod = importlib.import_module("packlib._kernels." + info.name)
        for name, obj in vars(mod).items():
            if isinstance(obj, CPUDispatcher):
                out[info.name + "." + name] = sorted(map(str, obj.signatures))
    return out

warm_histogram_methods()
before = signatures()
rng = np.random.default_rng(0)
L = 2048
short = rng.lognormal(np.log(200), 0.9, 60_000)
long = rng.lognormal(np.log(L) - 1.0, 0.6, 15_000)
h = np.bincount(np.clip(np.rint(np.concatenate([short, long])), 1, L).astype(np.int64), minlength=L + 1)[1:]
tiny = np.bincount(np.concatenate([rng.integers(1, 9, 40_000), rng.integers(L // 2, L + 1, 2_000)]), minlength=L + 1)[1:]
for hist, depth in ((h, 3), (h, 8), (tiny, 16)):  # depth binding (grid LPs), not binding (exchanges), tiny beside huge
    plan = packlib.optimal_pack(hist, max_sequences_per_pack=depth)
    packlib.lower_bound(hist, max_sequences_per_pack=depth)
after = signatures()
print(json.dumps({k: v for k, v in after.items() if v != before.get(k)}))
"""


def test_warmup_covers_the_depth_limited_long_context_route():
    """In a fresh interpreter, after the warm-up of the histogram methods (which
    ``packlib.warmup()`` and the demo run), the long-context route with a depth limit
    (grid LPs, exchanges, fills, certificates) compiles no kernel signature of its own:
    the first real call does not pay numba's compile."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _ROUTE_SIGNATURES], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    new = json.loads(out.stdout.strip().splitlines()[-1])
    assert not new, f"kernels compiled by the depth-limited route after the warm-up: {new}"


def test_lp_stopped_by_the_clock_keeps_its_solution_beside_its_patterns(monkeypatch):
    """Column generation stopped by the clock after adding a round's patterns: the LP
    solution covers the patterns it was solved over, padded with zeros for the new ones,
    so rounding it (the grid plan, the LP rounding) stays aligned (it indexed past its
    end before)."""
    import time

    from packlib.optimal import _lp, _relaxed
    from packlib.optimal._solver import _Solver

    class Late:  # the clock column generation reads: always past the deadline
        perf_counter = staticmethod(lambda: float("inf"))

    monkeypatch.setattr(_lp, "time", Late)
    solve = _lp._Master.solve  # HiGHS itself is not stopped here (see the test below)
    monkeypatch.setattr(_lp._Master, "solve", lambda master, deadline=None: solve(master, None))
    rng = np.random.default_rng(0)
    L = 200
    x = np.clip(np.rint(rng.lognormal(np.log(L) - 1.2, 0.8, 200_000)), 1, L).astype(np.int64)
    h = np.bincount(x, minlength=L + 1)[1:] * 5
    solver = _Solver(h, L, 3, time.perf_counter() + 1e6, nnls=False)  # as the grid LPs: no NNLSHP seed
    solver.run_heuristics(("lpfhp", "spfhp"))
    lb = solver.bound()
    assert not lb.lp_converged and solver.x.size == solver.master.rows.shape[0] > 0
    found = solver.round_and_repair(lb.bound, min(p.num_packs for p in solver.heuristics.values()))
    if found is not None:
        strategies, counts = np.asarray(found[1]), found[2]
        assert np.array_equal(np.bincount(strategies.ravel(), weights=np.repeat(counts, strategies.shape[1]),
                                          minlength=L + 1)[1:].astype(np.int64), h)
    (items, offsets, counts), _, _ = _relaxed.grid_plan(h, L, 3, 100, time.perf_counter() + 1e6)
    rows = np.repeat(np.arange(counts.size), np.diff(offsets))
    assert np.array_equal(np.bincount(items, weights=counts[rows], minlength=L + 1)[1:].astype(np.int64), h)


class _StoppedHighs:
    """A HiGHS model whose runs after the first ``optimal_runs`` stop at the time limit,
    with a feasible point (``feasible``) or without one; everything else is the real model's."""

    def __init__(self, inner, optimal_runs, feasible):
        self._inner, self._left, self._feasible = inner, optimal_runs, feasible

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def run(self):
        self._left -= 1
        return self._inner.run()

    def getModelStatus(self):
        status = self._inner.getModelStatus()
        return status if self._left >= 0 else type(status).kTimeLimit

    def getInfo(self):
        from types import SimpleNamespace

        return SimpleNamespace(primal_solution_status=2 if self._feasible or self._left >= 0 else 0)


@pytest.mark.parametrize("feasible", [False, True])
def test_lp_stopped_inside_highs_keeps_a_feasible_solution_and_a_proven_bound(feasible):
    """HiGHS stopped at the deadline in the middle of a solve (its time limit is set from
    the deadline): column generation stops; a point that is not feasible is never used
    (the last round's solution stays), and the bound from the prices seen is proven."""
    from packlib.optimal import _lp
    from packlib.optimal._solver import _Solver

    rng = np.random.default_rng(1)
    L = 64
    h = np.bincount(np.clip(rng.lognormal(3.0, 0.7, 5_000).astype(np.int64), 1, L), minlength=L + 1)[1:]
    solver = _Solver(h, L, 3, None, nnls=False)
    pool = _lp._ColumnPool(solver.width)
    pool.add(_lp._initial_patterns(h, L, 3, solver.caps, solver.width, []))
    master = _lp._Master(h, L, primal=True)
    if master.highs is None:
        pytest.skip("scipy's HiGHS bindings are not available")
    master.add(pool.rows)
    first_columns = master.n_cols
    master.highs = _StoppedHighs(master.highs, optimal_runs=1, feasible=feasible)
    x, value, y, converged, rounds, center, proven = _lp._column_generation(h, L, 3, pool, master, None)
    assert not converged and not proven and rounds == 2 and master.n_cols > first_columns
    if feasible:  # the stopped solve's point covers every column, and the histogram
        assert x.size == master.n_cols and value >= 0
    else:  # the first round's solution, over the columns it was solved with
        assert x.size == first_columns and math.isfinite(value)
    cover = np.zeros(L)
    for row, xi in zip(master.rows[: x.size], x):
        np.add.at(cover, row[row > 0] - 1, xi)
    # a solution of the LP: with the exchange columns moving cover to shorter lengths, the
    # packs cover every "this length or longer" at least as often as the histogram has it
    assert (np.cumsum(cover[::-1]) >= np.cumsum(h[::-1]) - 1e-6).all()
    from packlib.optimal._certificates import _certify

    for prices in (y, center):
        cert = _certify(prices, h, L, 3)
        assert cert is None or naive_certificate.check(cert, h) <= exact_lp_ceiling(h, 3)
