"""Bad input at the core entry points (issue 15): a clear ValueError/TypeError, or a result
that passes the exactly-once checks. Never a crash, a wrap-around, or a silent rounding."""
import json
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packlib
from packlib import PackingPlan, Packs

from .fuzz import BAD_SCALARS, assert_clear_error_or, bad_int_array_cases, bad_int_arrays, bad_scalars, run_isolated

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
H = np.array([0, 2, 1, 1, 0, 2], dtype=np.int64)  # a small valid histogram, L = 6
LENGTHS = np.array([5, 3, 2, 4, 1, 6], dtype=np.int64)


def plan_is_exact(h, L=None, depth=...):
    h = np.asarray(h)

    def check(plan):
        assert isinstance(plan, PackingPlan)
        L_ = plan.max_sequence_length
        got = plan.histogram()
        want = np.zeros(L_, dtype=np.int64)
        want[: min(h.size, L_)] = h[: min(h.size, L_)]
        assert np.array_equal(got, want), "the plan does not hold every sequence exactly once"
        assert (plan.strategies.sum(axis=1) <= L_).all()
        if plan.max_sequences_per_pack is not None:
            assert plan.max_pack_size <= plan.max_sequences_per_pack
        assert plan.num_tokens >= 0 and plan.num_packs >= 0 and 0 <= plan.efficiency <= 1
        return True

    return check


def packs_are_exact(lengths, L):
    lengths = np.asarray(lengths)

    def check(packs):
        assert isinstance(packs, Packs)
        packs.validate(lengths.size)
        assert np.array_equal(packs.lengths, lengths[packs.indices])
        assert (packs.pack_tokens <= L).all()
        return True

    return check


HISTOGRAM_PACKERS = [packlib.spfhp_pack, packlib.lpfhp_pack, packlib.nnls_pack, packlib.optimal_pack, packlib.lower_bound]


# ------------------------------------------------------------------ fuzzed entry points


@pytest.mark.parametrize("packer", HISTOGRAM_PACKERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("label, value", bad_int_array_cases(good=H), ids=lambda x: x if isinstance(x, str) else "")
def test_histogram_packers_on_bad_histograms(packer, label, value):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        outcome, result = assert_clear_error_or(
            lambda: packer(value, max_sequences_per_pack=2),
            None,
        )
    if outcome == "ok" and isinstance(result, PackingPlan):
        plan_is_exact(packlib._validate.as_histogram(value))(result)


@pytest.mark.parametrize("packer", HISTOGRAM_PACKERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("label, value", BAD_SCALARS, ids=lambda x: x if isinstance(x, str) else "")
def test_histogram_packers_on_bad_depths_and_capacities(packer, label, value):
    for kwargs in ({"max_sequences_per_pack": value}, {"max_sequence_length": value}):
        outcome, result = assert_clear_error_or(lambda: packer(H, **kwargs), None)
        if outcome == "ok" and isinstance(result, PackingPlan):
            plan_is_exact(H)(result)


@pytest.mark.parametrize("packer", [packlib.ffd_pack, packlib.bfd_pack], ids=lambda f: f.__name__)
@FUZZ
@given(lengths=bad_int_arrays(good=LENGTHS), L=st.one_of(st.sampled_from([6, 7, 2**40, 2**62]), bad_scalars()),
       depth=st.one_of(st.sampled_from([None, 1, 2, 2**70]), bad_scalars()))
def test_per_sequence_packers_fuzzed(packer, lengths, L, depth):
    outcome, result = assert_clear_error_or(lambda: packer(lengths, L, depth), None)
    if outcome == "ok":
        packs_are_exact(packlib._validate.as_int_array(lengths, "lengths"), L)(result)


@pytest.mark.parametrize("method", packlib.methods.names())
@FUZZ
@given(lengths=bad_int_arrays(good=LENGTHS), seed=st.one_of(st.integers(0, 2**64 - 1), bad_scalars()))
def test_pack_fuzzed(method, lengths, seed):
    outcome, result = assert_clear_error_or(lambda: packlib.pack(lengths, 64, None, method=method, seed=seed), None)
    if outcome == "ok":
        packs_are_exact(packlib._validate.as_int_array(lengths, "lengths"), 64)(result)


@FUZZ
@given(lengths=bad_int_arrays(good=LENGTHS), L=st.one_of(st.just(6), bad_scalars()))
def test_histogram_fuzzed(lengths, L):
    outcome, result = assert_clear_error_or(lambda: packlib.histogram(lengths, L), None)
    if outcome == "ok":
        lens = packlib._validate.as_int_array(lengths, "lengths")
        assert result.sum() == lens.size and (result * np.arange(1, result.size + 1)).sum() == lens.sum()


@FUZZ
@given(order=bad_int_arrays(good=[2, 0, 1]))
def test_packs_take_fuzzed(order):
    packs = packlib.ffd_pack([4, 3, 2, 2, 1], 5)
    try:
        result = packs.take(order)
    except (ValueError, TypeError, IndexError) as exc:
        assert str(exc)
        return
    ids = packlib._validate.as_int_array(order, "order")
    assert result.to_list() == [packs.to_list()[i] for i in ids]


@pytest.mark.parametrize("label, value", BAD_SCALARS, ids=lambda x: x if isinstance(x, str) else "")
def test_packs_index_and_seed_fuzzed(label, value):
    packs = packlib.ffd_pack([4, 3, 2, 2, 1], 5)
    try:
        got = packs[value]
    except (TypeError, IndexError) as exc:
        assert str(exc)
    else:
        assert got.tolist() == packs.to_list()[int(value)]
    outcome, result = assert_clear_error_or(lambda: packs.shuffled(value), None)
    if outcome == "ok":
        result.validate(5)


@FUZZ
@given(strategies=st.one_of(bad_int_arrays(good=[3, 2]), st.lists(bad_int_arrays(good=[3, 2]), max_size=3)),
       counts=bad_int_arrays(good=[2]), L=st.one_of(st.just(6), bad_scalars()))
def test_plan_constructor_fuzzed(strategies, counts, L):
    def build():
        rows = strategies if isinstance(strategies, list) else [strategies]
        return PackingPlan(packlib._plan._pad_rows(rows), counts, L, None)

    outcome, plan = assert_clear_error_or(build, None)
    if outcome == "ok":
        assert plan.num_packs >= 0 and plan.num_tokens >= 0 and plan.num_tokens <= plan.num_packs * plan.max_sequence_length


# ------------------------------------------------------------- the cases of issue 15


def test_huge_counts_are_refused_not_wrapped():
    with pytest.raises(ValueError, match="number of tokens"):
        packlib.spfhp_pack([0, 2**62], max_sequences_per_pack=1)
    with pytest.raises(ValueError, match="number of sequences"):
        packlib.lpfhp_pack([2**62] * 4, max_sequences_per_pack=2)
    with pytest.raises(ValueError, match="number of packs"):
        PackingPlan([[1], [1]], [2**62, 2**62], 5)
    with pytest.raises(ValueError, match="number of sequences"):
        packlib.compare([2**62] * 4, max_sequences_per_pack=2)
    # the largest accepted figures are exact
    plan = packlib.spfhp_pack([2**61], max_sequences_per_pack=1)
    assert plan.num_tokens == 2**61 and plan.num_packs == 2**61 and plan.efficiency == 1.0


def test_floats_and_bools_are_never_rounded():
    packs = packlib.ffd_pack([4, 3, 2, 2, 1], 5)
    with pytest.raises(ValueError, match="whole numbers"):
        packs.take([0.7, 1.2])
    with pytest.raises(TypeError, match="booleans"):
        packs.take([True, False])
    with pytest.raises(TypeError, match="int or a slice"):
        packs[1.5]
    with pytest.raises(TypeError, match="int or a slice"):
        packs[True]
    with pytest.raises(ValueError, match="whole numbers"):
        PackingPlan([[2.5, 2.5]], [1.9], 5)
    with pytest.raises(ValueError, match="whole numbers"):
        PackingPlan([[2, 2]], [1.9], 5)
    d = packlib.lpfhp_pack(H).to_dict()
    with pytest.raises(ValueError, match=">= 0"):
        PackingPlan.from_dict({**d, "strategies": [[3, -2]], "repeat_counts": [1]})
    with pytest.raises(ValueError, match="whole numbers"):
        PackingPlan.from_dict({**d, "strategies": [[2.5, 2]], "repeat_counts": [1]})
    with pytest.raises(TypeError, match="whole number"):
        PackingPlan.from_dict({**d, "max_sequence_length": 6.5})
    with pytest.raises(ValueError, match="whole numbers"):
        Packs.from_lists([[0.5]], [1, 2], 5)
    with pytest.raises(TypeError, match="whole number"):
        packlib.nnls_pack(H, short_length_cutoff=2.5)
    with pytest.raises(ValueError, match="short_length_cutoff must be >= 0"):
        packlib.nnls_pack(H, max_sequences_per_pack=3, short_length_cutoff=-5)
    with pytest.raises(TypeError, match="repair"):
        packlib.nnls_pack(H, repair="yes")


def test_packs_constructor_checks_offsets():
    with pytest.raises(ValueError, match="non-decreasing"):
        Packs([0, 3, 1, 3], [0, 1, 2], [1, 1, 1], 10)
    with pytest.raises(ValueError, match="start at 0"):
        Packs([1, 3], [0, 1, 2], [1, 1, 1], 10)
    with pytest.raises(ValueError, match="sample ids >= 0"):
        Packs([0, 1], [-1], [1], 10)
    with pytest.raises(ValueError, match=">= 1"):
        Packs([0, 1], [0], [0], 10)


def test_too_large_integers_are_refused_before_any_kernel():
    for kwargs in ({"max_sequences_per_pack": 2**70}, {"max_sequence_length": 2**70}):
        with pytest.raises(ValueError, match="too large"):
            packlib.lpfhp_pack(H, **kwargs)
    code = """
    import packlib
    for bad in (2**70, 2**64, 2**63 - 1):
        for call in (lambda: packlib.lpfhp_pack([1, 2, 3], max_sequences_per_pack=bad),
                     lambda: packlib.bfd_pack([1, 2], 3, bad), lambda: packlib.ffd_pack([1, 2], bad)):
            try:
                call()
            except (ValueError, TypeError) as exc:
                assert str(exc)
    print("ok")
    """
    assert "ok" in run_isolated(code).stdout  # a fresh process: the first call compiles


def test_capacity_far_above_the_data_packs_exactly():
    packs = packlib.ffd_pack([1, 2], 2**40)
    assert packs.to_list() == [[1, 0]] and packs.max_sequence_length == 2**40
    assert packlib.bfd_pack([1, 2, 3], 2**40, 2).to_list() == packlib.bfd_pack([1, 2, 3], 6, 2).to_list()
    with pytest.raises(ValueError, match="use ffd_pack"):
        packlib.bfd_pack([2**40, 2**40], 2**41)


def test_nnls_packs_long_context():
    h = np.zeros(65_536, dtype=np.int64)
    h[[99, 65_535]] = 3
    for pack in (packlib.nnls_pack, packlib.lpfhp_pack):
        plan = pack(h, max_sequences_per_pack=None)
        assert plan_is_exact(h)(plan) and plan.num_packs == 4


def test_compare_spellings():
    with pytest.raises(ValueError, match="unknown histogram method 's'") as exc:
        packlib.compare(H, methods="s")
    assert "choose from spfhp" in str(exc.value)
    assert [r.method for r in packlib.compare(H, methods="spfhp", max_sequences_per_pack=3)] == ["spfhp"]
    with pytest.raises(TypeError, match="methods"):
        packlib.compare(H, methods=3)


def test_old_positional_depth_still_works_with_a_warning():
    with pytest.warns(DeprecationWarning, match="max_sequences_per_pack=3"):
        old = packlib.lpfhp_pack(H, 3)
    assert old.max_sequences_per_pack == 3 and old.max_sequence_length == H.size
    with pytest.warns(DeprecationWarning):
        assert packlib.nnls_pack(H, None).max_sequences_per_pack is None
    with pytest.warns(DeprecationWarning):
        assert packlib.spfhp_pack(H, 2, max_sequence_length=8).max_sequence_length == 8
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = packlib.lpfhp_pack(H, 8, 3)  # the house order: capacity second, depth third
    assert new.max_sequence_length == 8 and new.max_sequences_per_pack == 3
    with pytest.warns(DeprecationWarning, match="max_pack_size"):
        assert new.depth == new.max_pack_size


def test_plan_json_round_trip_keeps_registry_names():
    plan = packlib.nnls_pack(H)
    again = PackingPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again.method == "nnls"
    assert PackingPlan.from_dict({**plan.to_dict(), "method": "nnlshp"}).method == "nnls"
    with pytest.raises(TypeError, match="dict"):
        PackingPlan.from_dict([1, 2])
    with pytest.raises(ValueError, match="lacks repeat_counts"):
        PackingPlan.from_dict({"max_sequence_length": 4, "strategies": [[1]]})


def test_compare_old_positional_methods_warn():
    with pytest.warns(DeprecationWarning, match="compare\\(histogram, methods="):
        table = packlib.compare(H, ["spfhp", "lpfhp"], (3,))
    assert [r.method for r in table] == ["spfhp", "lpfhp"] and [r.depth for r in table] == [3, 3]
    with pytest.warns(DeprecationWarning):
        assert [r.method for r in packlib.compare(H, "spfhp", 3)] == ["spfhp"]
    with pytest.raises(TypeError, match="methods twice"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        packlib.compare(H, ["spfhp"], methods=["lpfhp"])
