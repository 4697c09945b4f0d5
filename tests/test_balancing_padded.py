"""packlib.balance(..., padded=True) and BalancedBatchSampler(..., padded=True): micro-batches
of unpacked, right-padded sequences (PaddedCollator), grouped by length and balanced across
ranks by their padded cost."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packlib
from packlib._kernels.padded import padded_count, padded_cut

from . import balance_workloads as workloads
from . import naive_balance as naive
from .test_balancing import SCHEDULE_DRAWS, steps_of


def micro_batches(s):
    o, ix = s.packs.offsets, s.packs.indices
    return [ix[o[k]:o[k + 1]] for k in range(s.packs.num_packs)]


def check_padded(s, lengths, L, depth, W, M, drop_last, b):
    lengths = np.asarray(lengths)
    assert s.padded and s.packs.num_packs == s.num_steps * W * M, "every rank the same steps and micro-batches"
    ids = np.concatenate((s.packs.indices, s.dropped))
    assert np.array_equal(np.sort(ids), np.arange(lengths.size)), "every sample exactly once: scheduled or dropped"
    laid_out = 0
    for mb in micro_batches(s):
        if mb.size:
            assert mb.size * lengths[mb].max() <= L, "sequences x longest within max_sequence_length"
            assert depth is None or mb.size <= depth
            laid_out += mb.size * int(lengths[mb].max())
    assert s.computed_tokens == laid_out >= s.packs.num_tokens
    steps = steps_of(s)
    want = naive.padded_rank_costs(steps, lengths.tolist(), 1.0, b)
    assert np.allclose(s.cost, np.array(want).reshape(s.cost.shape), rtol=1e-9)
    assert s.balance == pytest.approx(naive.balance(want), rel=1e-9)
    assert s.micro_batch_balance == pytest.approx(naive.padded_micro_batch_balance(steps, lengths.tolist(), 1.0, b),
                                                  rel=1e-9)
    if drop_last:  # whole micro-batches left out, fewer than a step's
        assert len(naive.padded_micro_batches(lengths[s.dropped].tolist(), L, depth)) < W * M
    else:
        assert s.dropped.size == 0
    return steps


@settings(max_examples=60, deadline=None)
@given(*SCHEDULE_DRAWS)
def test_padded_schedule_properties(data, W, M, depth, window, drop_last, b, seed):
    L, lengths = data
    if drop_last and len(lengths) < W * M:
        return  # refused before planning, as without padded (tests/test_balancing.py)
    kw = dict(world_size=W, micro_batches=M, cost=(1.0, b), window=window, seed=seed, drop_last=drop_last,
              padded=True)
    try:
        s = packlib.balance(lengths, L, depth, **kw)
    except ValueError as e:
        assert drop_last and "fill no whole step" in str(e)
        return
    check_padded(s, lengths, L, depth, W, M, drop_last, b)
    per_rank = [sum(len(step) for step in s.rank(r)) for r in range(W)]
    assert per_rank == [s.num_steps * M] * W, "every rank the same number of micro-batches"
    again = packlib.balance(lengths, L, depth, **kw)
    assert np.array_equal(again.packs.indices, s.packs.indices) and np.array_equal(again.packs.offsets, s.packs.offsets)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.lists(st.integers(1, 40), min_size=1, max_size=9), st.sampled_from([None, 1, 2, 3]))
def test_the_greedy_cut_is_the_reference_s_and_needs_the_fewest_micro_batches(L, lengths, depth):
    """The kernel cuts as tests/naive_balance.py does, and no partition needs fewer micro-batches
    (so one more sample adds at most one micro-batch, which the window search relies on)."""
    lengths = [min(x, L) for x in lengths]
    ordered = np.array(sorted(lengths, reverse=True), np.int64)
    D = L if depth is None else depth
    offsets = padded_cut(ordered, L, D)
    got = [ordered[offsets[k]:offsets[k + 1]].tolist() for k in range(offsets.size - 1)]
    assert got == naive.padded_micro_batches(lengths, L, depth)
    assert padded_count(ordered, L, D) == len(got) == naive.fewest_padded_micro_batches(lengths, L, depth)


def test_one_window_is_the_reference_cut_of_its_lengths():
    """A window holding the whole epoch: its micro-batches are the reference's cut of all lengths."""
    lengths = np.random.default_rng(3).integers(1, 200, 300)
    s = packlib.balance(lengths, 256, world_size=1, window=10_000, drop_last=False, padded=True)
    got = sorted(sorted(lengths[mb].tolist()) for mb in micro_batches(s) if mb.size)
    want = sorted(sorted(mb) for mb in naive.padded_micro_batches(lengths.tolist(), 256))
    assert got == want


def test_extra_costs_add_to_the_padded_costs():
    lengths = np.random.default_rng(5).integers(1, 100, 200)
    extra = np.random.default_rng(6).uniform(0, 50, 200)
    s = packlib.balance(lengths, 128, world_size=2, micro_batches=2, cost=(1.0, 0.01), extra_costs=extra, padded=True)
    padded = naive.padded_rank_costs(steps_of(s), lengths.tolist(), 1.0, 0.01)
    extras = [[sum(extra[i] for mb in rank for i in mb) for rank in step] for step in steps_of(s)]
    assert np.allclose(s.cost, np.add(padded, extras), rtol=1e-9)


def _lognormal(n=20_000):
    return np.minimum(np.random.default_rng(0).lognormal(5.5, 0.9, n).astype(np.int64) + 2, 2048)


@pytest.mark.parametrize("L", [2048, 4096, 8192])
def test_padded_micro_batches_compute_little_padding_and_stay_balanced(L):
    """Grouped by length, the padded rows compute within 5 % of the tokens they hold, where
    the micro-batches planned for packing, padded, compute over 30 % more."""
    lengths = _lognormal()
    kw = dict(world_size=2, micro_batches=2, cost=packlib.transformer_cost(1024))
    padded = packlib.balance(lengths, L, padded=True, **kw)
    packed = packlib.balance(lengths, L, **kw)
    as_padded = sum(mb.size * int(lengths[mb].max()) for mb in micro_batches(packed) if mb.size)
    assert padded.computed_tokens / padded.packs.num_tokens <= 1.05
    assert as_padded / packed.packs.num_tokens >= 1.3
    assert padded.balance >= 0.99


def test_the_order_is_a_shuffle_s_at_the_scale_of_tenths():
    """Though each window is sorted by length, every tenth of the epoch is as close to the
    epoch's mean length as a shuffle's (the median over seeds within 1.5x the median of ten
    shuffles), as without padded (tests/test_balancing.py)."""
    lengths = _lognormal()
    runs = [packlib.balance(lengths, 4096, world_size=4, micro_batches=2, cost=packlib.transformer_cost(1024),
                            seed=seed, padded=True) for seed in range(6)]
    devs = [np.abs(workloads.tenth_deviations(lengths, s.packs.indices)).max() for s in runs]
    order = runs[0].packs.indices
    shuffles = [np.abs(workloads.tenth_deviations(lengths, np.random.default_rng(k).permutation(order))).max()
                for k in range(10)]
    assert np.median(devs) <= 1.5 * np.median(shuffles)


def test_result_type_and_the_figures_say_padded():
    s = packlib.balance(_lognormal(4000), 2048, world_size=2, micro_batches=2, padded=True)
    assert repr(s).endswith(", padded)") and "tokens computed (padded rows)" in s._repr_html_()
    d = s.to_dict()
    assert d["padded"] is True and d["computed_tokens"] == s.computed_tokens > s.packs.num_tokens
    plain = packlib.balance(_lognormal(4000), 2048, world_size=2, micro_batches=2)
    assert not plain.padded and plain.computed_tokens == plain.packs.num_tokens and "padded" not in repr(plain)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(lengths=[[3, 4], [5, 6]]), ValueError, "2-D lengths and shared_prompt_lengths .* not supported"),
    (dict(lengths=[[3, 4], [5, 6]], shared_prompt_lengths=[2, 2]), ValueError, "not supported with it"),
    (dict(padded="yes"), TypeError, "padded must be True or False"),
])
def test_bad_input(kwargs, error, match):
    args = dict(dict(lengths=[1, 2, 3, 4, 5, 6, 7, 8], world_size=1, padded=True), **kwargs)
    lengths = args.pop("lengths")
    with pytest.raises(error, match=match):
        packlib.balance(lengths, 16, **args)
    with pytest.raises(error, match=match):
        packlib.BalancedBatchSampler(lengths, 16, rank=0, **args)


# ------------------------------------------------------------------------------ the sampler
@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 3), st.integers(1, 2))
def test_the_padded_sampler_resumes_at_every_position(seed, W, M):
    lengths = np.random.default_rng(seed).integers(1, 64, 80)
    a = packlib.BalancedBatchSampler(lengths, 64, rank=W - 1, world_size=W, micro_batches=M, seed=seed, padded=True)
    a.set_epoch(1)
    full = list(a)
    assert full == [mb.tolist() for step in a.schedule.rank(W - 1) for mb in step]
    assert all(len(mb) * max(lengths[mb]) <= 64 for mb in full if mb)
    for position in range(0, len(full) + 1, M):
        b = packlib.BalancedBatchSampler(lengths, 64, rank=W - 1, world_size=W, micro_batches=M, seed=seed,
                                         padded=True)
        b.load_state_dict(dict(a.state_dict(), position=position, epoch=1))
        assert list(b) == full[position:]


def test_a_padded_state_is_not_an_unpadded_one():
    lengths = np.random.default_rng(0).integers(1, 64, 80)
    padded = packlib.BalancedBatchSampler(lengths, 64, rank=0, world_size=1, padded=True)
    plain = packlib.BalancedBatchSampler(lengths, 64, rank=0, world_size=1)
    assert "padded" in repr(padded) and "padded" not in repr(plain)
    for a, b in ((padded, plain), (plain, padded)):
        with pytest.raises(ValueError, match="other lengths or settings"):
            b.load_state_dict(a.state_dict())
    assert list(padded) != list(plain)
