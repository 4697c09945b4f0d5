"""One answer by either name: pack(method=...) and the method's own function agree on their
defaults; every histogram plan tells its gap; a depth limit that costs says so."""
import inspect
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packlib
from packlib import methods

from . import naive


@pytest.mark.parametrize("name", methods.names())
def test_each_methods_default_depth_is_its_functions(name):
    m = methods.get(name)
    assert inspect.signature(m.function).parameters["max_sequences_per_pack"].default == m.default_depth


@settings(max_examples=12, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=300), st.sampled_from(["spfhp", "lpfhp", "nnls", "optimal"]),
       st.integers(0, 2**32))
def test_pack_by_name_equals_the_function_with_its_defaults(lengths, name, seed):
    lengths = np.array(lengths)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        got = packlib.pack(lengths, 40, method=name, seed=seed)
    plan = methods.get(name).function(packlib.histogram(lengths, 40), 40)
    want = plan.assign(lengths, seed=seed)
    assert got.offsets.tolist() == want.offsets.tolist() and got.indices.tolist() == want.indices.tolist()
    assert got.max_sequences_per_pack == 3


def _long_context(n=20_000, L=2048):
    rng = np.random.default_rng(0)
    return np.clip(np.rint(rng.lognormal(np.log(L / 4), 0.9, n)), 1, L).astype(np.int64), L


def test_a_default_depth_that_costs_warns_naming_none_and_an_explicit_one_does_not():
    lengths, L = _long_context()
    with pytest.warns(UserWarning, match=r"max_sequences_per_pack=None"):
        packlib.pack(lengths, L, method="nnls")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        packlib.pack(lengths, L, 3, method="nnls")
        packlib.pack(lengths, L, method="bfd")          # unlimited: nothing to say
        packlib.pack(np.array([5, 3, 2, 4, 1]), 6, method="nnls")  # the depth costs nothing here


def test_the_report_says_where_the_depth_limit_costs():
    lengths, L = _long_context()
    h = packlib.histogram(lengths, L)
    limited, free = packlib.nnls_pack(h), packlib.nnls_pack(h, max_sequences_per_pack=None)
    assert free.efficiency - limited.efficiency > 0.05
    assert "depth limit" in repr(limited) and "max_sequences_per_pack=None" in limited.depth_note
    assert "depth limit" in limited._repr_html_()
    assert free.depth_note == "" and "depth limit" not in repr(free)
    wiki = packlib.datasets.wikipedia_512()
    assert packlib.nnls_pack(wiki).depth_note == ""    # 99.9 % full at depth 3: nothing to say
    table = packlib.compare(h, max_sequences_per_pack=[3, None], methods=["lpfhp", "nnls"])
    notes = [(row.method, row.depth, row.note) for row in table]
    assert [n for n in notes if "depth limit" in n[2]] == [notes[0]]   # once, on the depth's first row
    assert "up to 100.00 %" in notes[0][2]


def test_padding_share_in_the_note_is_the_plans_own():
    """The share the note gives, recomputed by hand from the plan's packs."""
    lengths, L = _long_context(5000)
    plan = packlib.lpfhp_pack(packlib.histogram(lengths, L), L, 2)
    share, unlimited = plan._depth_cost()
    packs = [(list(s), c) for s, c in plan.top_strategies(plan.num_strategies)]
    waste = sum(c * (L - sum(s)) for s, c in packs if len(s) == 2)
    assert share == pytest.approx(waste / (plan.num_packs * L))
    assert unlimited == pytest.approx(min(1.0, lengths.sum() / (L * max(-(-lengths.sum() // L), (lengths > L // 2).sum()))))


@pytest.mark.parametrize("name", ["spfhp", "lpfhp", "nnls"])
def test_every_histogram_plan_tells_its_gap_with_a_certificate(name):
    h = np.array([3, 5, 3, 4, 4, 0, 3, 2, 1, 2, 2, 2, 4, 4])
    plan = methods.get(name).function(h, 14, 3)
    assert plan.lower_bound is None and "lower bound" not in repr(plan)  # printing computes nothing
    bound = packlib.lower_bound(h, 14, 3)
    assert plan.gap == plan.num_packs - bound.bound >= 0
    assert plan.bound.bound == bound.bound == plan.lower_bound
    assert plan.bound.certificate.bound == bound.bound
    assert f"gap {plan.gap:,}" in repr(plan)
    assert naive.lengths_from_histogram(plan.histogram(), seed=0).size == h.sum()
