"""packlib.context_parallel (plan_cp_step, CPStep) and packlib.formats.megatron_cp
(DynamicCPScheduler), against the plain-Python checks of tests/naive_cp.py."""
import math
import sys
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packlib
from packlib.context_parallel import CPStep, allowed_sizes, lower_bounds, plan_cp_step
from packlib.formats.megatron_cp import DynamicCPScheduler, register
from tests import naive_cp

COST = (1.0, 1.0 / (12 * 4096), 0.05)


def _pairs(lengths):
    return list(enumerate(int(n) for n in lengths))


@st.composite
def steps(draw):
    G = draw(st.sampled_from([1, 2, 4, 6, 8, 12, 16, 24]))
    cap = draw(st.sampled_from([64, 100, 256]))
    n = draw(st.integers(1, 60))
    long_share = draw(st.sampled_from([0.0, 0.1, 0.5]))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    short = rng.integers(1, cap + 1, n)
    long = rng.integers(1, G * cap + 1, n)
    lengths = np.where(rng.random(n) < long_share, long, short)
    min_cp = draw(st.sampled_from(naive_cp.megatron_group_sizes(G)[:3]))
    depth = draw(st.sampled_from([None, None, 3]))
    return lengths, cap, G, min_cp, depth, seed


@settings(max_examples=40, deadline=None)
@given(steps())
def test_every_sequence_once_within_the_cap_on_aligned_groups(case):
    lengths, cap, G, min_cp, depth, seed = case
    step = plan_cp_step(lengths, cap, depth, world_size=G, min_cp_size=min_cp, cost=COST, seed=seed)
    groups = step.sample_id_groups()
    naive_cp.check_layout(groups, _pairs(lengths), cap, G, min_cp, depth)  # every id once, aligned, capped, none empty
    assert step.rank_tokens().max() <= cap * (1 + 1e-12)
    assert (step.cp >= min_cp).all()
    path = naive_cp.critical_path(groups, _pairs(lengths), COST)
    assert step.critical_path() == pytest.approx(path, rel=1e-9)
    assert step.critical_path() >= step.lower_bound * (1 - 1e-9) >= step.simple_bound * (1 - 1e-9)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**16), st.sampled_from([4, 8]), st.sampled_from([2, 3]))
def test_micro_batches_at_most_one_over_the_token_bound(seed, G, multiple):
    """Steps of many short sequences and a few long ones (the workloads the planner is for)."""
    rng = np.random.default_rng(seed)
    cap = 256
    lengths = np.concatenate([rng.integers(8, 96, 30 * G), rng.integers(cap, 4 * cap, 2)])
    step = plan_cp_step(lengths, cap, world_size=G, seed=seed)
    assert step.num_micro_batches <= naive_cp.micro_batch_bound(lengths, G, cap) + 1
    vpp = plan_cp_step(lengths, cap, world_size=G, micro_batch_multiple=multiple, seed=seed)
    assert vpp.num_micro_batches % multiple == 0
    naive_cp.check_layout(vpp.sample_id_groups(), _pairs(lengths), cap, G)


def test_known_small_answers():
    # one sequence per GPU: each on its own GPU, one micro-batch
    step = plan_cp_step([100, 100, 100, 100], 100, world_size=4, cost=COST)
    assert step.num_micro_batches == 1 and step.cp.tolist() == [1, 1, 1, 1]
    assert sorted(step.first_rank.tolist()) == [0, 1, 2, 3]
    assert step.efficiency == pytest.approx(1.0) and step.balance == pytest.approx(1.0)
    # a sequence of 4 caps needs all 4 GPUs; it is the whole step
    step = plan_cp_step([400], 100, world_size=4, cost=COST)
    assert step.cp.tolist() == [4] and step.sample_id_groups() == [[[0], [0], [0], [0]]]
    # one GPU: every sequence on it, cap-sized micro-batches
    step = plan_cp_step([60, 50, 40, 30, 20], 100, world_size=1)
    assert step.num_micro_batches == 2 and (step.cp == 1).all()
    assert sorted(step.rank_tokens().ravel().tolist()) == [100, 100]
    # min_cp_size = world_size: one group, split over every GPU
    step = plan_cp_step([10, 20, 30], 100, world_size=2, min_cp_size=2)
    assert step.cp.tolist() == [2, 2, 2] and step.num_micro_batches == 1
    # five sequences each over half of G * cap: no two share a micro-batch, five are needed
    # where the token count alone would allow four
    assert plan_cp_step([204] * 5, 100, world_size=4).num_micro_batches == 5
    # on 6 GPUs two fit a micro-batch (one group of all 6): three
    step = plan_cp_step([204] * 5, 100, world_size=6)
    assert step.num_micro_batches == 3 and (step.cp == 6).all()
    # an empty step
    empty = plan_cp_step([], 100, world_size=8)
    assert empty.num_micro_batches == 0 and empty.sample_id_groups() == [] and empty.critical_path() == 0.0


def test_lower_bounds_by_hand():
    sizes = allowed_sizes(4, 1)
    assert sizes.tolist() == [1, 2, 4] and allowed_sizes(6, 1).tolist() == [1, 2, 6]
    assert allowed_sizes(8, 4).tolist() == [4, 8]
    # attention only: sum l^2 / G, and the longest sequence alone on all GPUs
    simple, tight = lower_bounds(np.array([4, 2, 2]), 4, sizes, (0.0, 1.0, 0.0))
    assert simple == tight == pytest.approx((16 + 4 + 4) / 4)
    simple, _ = lower_bounds(np.array([16]), 4, sizes, (0.0, 1.0, 0.0))
    assert simple == pytest.approx(256 / 4)
    # with an exchange term a sequence that must widen to finish in time costs more GPU-time.
    # l = 8 takes 8 on one GPU, (8 + 4) / 2 = 6 on two, (8 + 12) / 4 = 5 on four; eight
    # 1-token sequences take 8 more. simple: max(16 / 4, 5) = 5. But finishing by T < 6
    # puts it on four GPUs: 20 + 8 = 28 GPU-time, 7 a GPU > T; by T = 6, two: (12 + 8) / 4 = 5.
    lengths = np.array([8, 1, 1, 1, 1, 1, 1, 1, 1])
    simple, tight = lower_bounds(lengths, 8, sizes, (1.0, 0.0, 0.5))
    assert simple == pytest.approx(5.0) and tight == pytest.approx(6.0)


def test_the_bound_is_a_bound_on_exhaustive_tiny_steps():
    """Every layout of 3 sequences over 2 GPUs in up to 3 micro-batches: none beats the bound."""
    import itertools

    lengths, cap, cost = np.array([6, 3, 2]), 4, (1.0, 0.1, 0.3)
    _, tight = lower_bounds(lengths, cap, allowed_sizes(2, 1), cost)
    best = math.inf
    choices = [(c, f) for c in (1, 2) for f in ((0, 1) if c == 1 else (0,))]
    for mbs in itertools.product(range(3), repeat=3):
        for placed in itertools.product(choices, repeat=3):
            cp = np.array([c for c, _ in placed])
            step = CPStep(lengths, cp, np.array(mbs), np.array([f for _, f in placed]), 3, 2, cap, None, cost, 0.0, 0.0)
            if step.rank_tokens().max() <= cap:
                best = min(best, step.critical_path())
    assert best >= tight * (1 - 1e-12)
    assert best == pytest.approx(plan_cp_step(lengths, cap, world_size=2, cost=cost).critical_path(), rel=0.05)


def test_the_checks_fail_on_wrong_layouts():
    lengths = [300, 50, 50]
    good = plan_cp_step(lengths, 100, world_size=4, cost=COST).sample_id_groups()
    naive_cp.check_layout(good, _pairs(lengths), 100, 4)
    over = [[[0, 1, 2], [0, 1, 2], [0, 1, 2], [0, 1, 2]]]     # 400 tokens on 4 GPUs: fine
    naive_cp.check_layout(over, _pairs(lengths), 100, 4)
    with pytest.raises(AssertionError, match="over 100"):   # GPU 2 holds 80 + 60 tokens
        naive_cp.check_layout([[[0], [0], [1, 2], [3]]], _pairs([150, 80, 60, 50]), 100, 4)
    with pytest.raises(AssertionError, match="aligned"):
        naive_cp.check_layout([[[1], [0], [0], [2]]], _pairs([150, 50, 50]), 100, 4)
    with pytest.raises(AssertionError, match="GPU 3 holds nothing"):
        naive_cp.check_layout([[[0], [1], [2], []]], _pairs([50, 50, 50]), 100, 4)
    with pytest.raises(AssertionError, match="id 0 appears twice"):
        naive_cp.check_layout([[[0], [1], [2], [0]]], _pairs([50, 50, 50]), 100, 4)
    with pytest.raises(AssertionError, match="missing"):
        naive_cp.check_layout([[[0], [1], [2], [2]]], _pairs([50, 50, 50, 50]), 100, 4)
    # the critical path counts waiting: GPU 1 waits for GPU 0 before their shared sequence
    wait = [[[0], [1], [2], [3]], [[4], [4], [5], [5]]]
    seqs = _pairs([10, 1, 1, 1, 8, 8])
    assert naive_cp.critical_path(wait, seqs, (1.0, 0.0, 0.0)) == pytest.approx(10 + 4)
    # and so does CPStep's: GPU 1 waits 9 for GPU 0 before micro-batch 1, then works 4 + 10
    step = CPStep(np.array([10, 1, 8, 1, 10]), np.array([1, 1, 2, 1, 1]), np.array([0, 0, 1, 2, 2]),
                  np.array([0, 1, 0, 0, 1]), 3, 2, 10, None, (1.0, 0.0, 0.0), 0.0, 0.0)
    assert step.critical_path() == pytest.approx(24.0) == naive_cp.critical_path(
        step.sample_id_groups(), _pairs(step.lengths), (1.0, 0.0, 0.0))


def test_bad_input_names_the_value():
    with pytest.raises(ValueError, match=r"lengths\[1\] = 900 exceeds world_size \* max_sequence_length"):
        plan_cp_step([10, 900], 100, world_size=8)
    with pytest.raises(ValueError, match="max_sequence_length must be >= 1, got 0"):
        plan_cp_step([10], 0, world_size=8)
    with pytest.raises(ValueError, match="world_size must be >= 1, got -2"):
        plan_cp_step([10], 100, world_size=-2)
    with pytest.raises(ValueError, match=r"whole numbers, got .*2\.5"):
        plan_cp_step([10, 2.5], 100, world_size=2)
    with pytest.raises(ValueError, match="lengths must be >= 1, got 0"):
        plan_cp_step([10, 0], 100, world_size=2)
    with pytest.raises(ValueError, match=r"min_cp_size = 3 is not a CP size Megatron builds at world_size = 8 "
                                         r"\(.*\[1, 2, 4, 8\]\)"):
        plan_cp_step([10], 100, world_size=8, min_cp_size=3)
    with pytest.raises(ValueError, match=r"min_cp_size = 4 is not a CP size Megatron builds at world_size = 6 .*\[1, 2, 6\]"):
        plan_cp_step([10], 100, world_size=6, min_cp_size=4)
    with pytest.raises(ValueError, match=r"min_cp_size = 16 > dp_size \* cp_size = 12.*\[1, 2, 4, 12\]"):
        DynamicCPScheduler(100, 3, 4, None, min_cp_size=16)
    with pytest.raises(ValueError, match=r"min_cp_size = 8 is not a CP size Megatron builds at dp_size \* cp_size = 12"):
        DynamicCPScheduler(100, 3, 4, None, min_cp_size=8)
    with pytest.raises(ValueError, match="micro_batches = 1 cannot hold"):
        plan_cp_step([100, 100, 100], 100, world_size=2, micro_batches=1)
    with pytest.raises(ValueError, match="cost"):
        plan_cp_step([10], 100, world_size=2, cost=(1.0, -1.0))
    with pytest.raises(ValueError, match="found no layout of the step's 2 sequences"):  # 3 micro-batches need 3
        plan_cp_step([10, 20], 100, world_size=4, micro_batch_multiple=3)
    with pytest.raises(TypeError, match="attention_balance must be True or False"):
        plan_cp_step([10], 100, world_size=2, attention_balance=1)
    with pytest.raises(ValueError, match="sample id 7 appears twice"):
        DynamicCPScheduler(100, 2, 2, None).get_groups_and_subsamples([(7, 10), (3, 20), (7, 30)])
    with pytest.raises(ValueError, match="sample 3 has length 500 > dp_size"):
        DynamicCPScheduler(100, 2, 2, None).get_groups_and_subsamples([(1, 10), (3, 500)])
    with pytest.raises(ValueError, match=r"whole numbers, got .*10\.5"):
        DynamicCPScheduler(100, 2, 2, None).get_groups_and_subsamples([(1, 10.5)])
    for bad in ({"cp_size": 0}, {"dp_size": -1}, {"max_seqlen_per_dp_cp_rank": 0}):
        args = {"max_seqlen_per_dp_cp_rank": 100, "cp_size": 2, "dp_size": 2, **bad}
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be >= 1"):
            DynamicCPScheduler(args["max_seqlen_per_dp_cp_rank"], args["cp_size"], args["dp_size"], None)


def test_the_drop_in_returns_megatrons_layout():
    lengths = naive_cp.sft_mix_step(8, 2048, seed=3, max_length=16384)
    ids = [1000 + 3 * k for k in range(lengths.size)]  # any distinct ids, in any order
    sched = DynamicCPScheduler(2048, 2, 4, 2, max_num_seqs=12, cost=COST)
    groups = sched.get_groups_and_subsamples(list(zip(ids, lengths.tolist())))
    assert len(groups) % 2 == 0 and all(len(mb) == 8 for mb in groups)
    naive_cp.check_layout(groups, list(zip(ids, lengths.tolist())), 2048, 8, max_num_seqs=12)
    # the local CP size as Megatron's build_packed_microbatches reads it back
    step = sched.last_step
    for m, mb in enumerate(groups):
        for r, lst in enumerate(mb):
            local = len([1 for other in mb if lst[0] in other])
            i = ids.index(lst[0])
            assert local == step.cp[i] and step.micro_batch[i] == m
    assert sched.get_required_sample_keys()[:2] == ["tokens", "labels"] and sched.is_dynamic_cp


def test_run_is_megatrons_own(monkeypatch):
    calls = {}

    class FakeDpBalanced:
        def run(self, data_iterator, num_microbatches, *groups_dev_config):
            calls["groups"] = self.get_groups_and_subsamples([(0, 30), (1, 30)])
            return "iterator", len(calls["groups"]), 50.0, 1300.0

    fake = types.ModuleType("megatron.core.datasets.data_schedule")
    fake.DpBalancedScheduler = FakeDpBalanced
    fake.scheduler_map = {"default_dynamic_cp": object}
    for name in ("megatron", "megatron.core", "megatron.core.datasets"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "megatron.core.datasets.data_schedule", fake)
    monkeypatch.setattr(sys.modules["megatron.core.datasets"], "data_schedule", fake, raising=False)
    out = DynamicCPScheduler(64, 1, 2, None).run(None, 4, None, None, None, None, "cpu", None)
    assert out[0] == "iterator" and sorted(calls["groups"][0]) == [[0], [1]]
    assert register() is object and fake.scheduler_map["default_dynamic_cp"] is DynamicCPScheduler


def test_a_seeded_step_is_near_its_bound_and_deterministic():
    lengths = naive_cp.long_tail_step(16, 8192, seed=1)
    a = plan_cp_step(lengths, 8192, world_size=16, cost=COST, seed=5)
    b = plan_cp_step(lengths, 8192, world_size=16, cost=COST, seed=5)
    assert a.sample_id_groups() == b.sample_id_groups()
    assert a.efficiency > 0.9 and a.balance > 0.9
    assert a.num_micro_batches <= naive_cp.micro_batch_bound(lengths, 16, 8192) + 1
    d = a.to_dict()
    assert d["num_sequences"] == lengths.size and "CPStep(" in repr(a) and "<table>" in a._repr_html_()
    assert packlib.plan_cp_step is plan_cp_step and packlib.CPStep is CPStep


def test_one_cost_or_both():
    """A step where one document holds most of Σ l²: balancing attention too spreads it over
    every GPU (balance up, the exchange it costs shows in efficiency); cost only, the reverse."""
    rng = np.random.default_rng(0)
    lengths = np.concatenate([rng.integers(1_000, 6_000, 400), [120_000, 40_000, 30_000, 20_000]])
    both = plan_cp_step(lengths, 16_384, world_size=32, cost=COST)
    cost_only = plan_cp_step(lengths, 16_384, world_size=32, cost=COST, attention_balance=False)
    assert both.cp[-4] == 32 and cost_only.cp[-4] == 8
    assert both.balance > 0.9 > 0.5 > cost_only.balance
    assert cost_only.efficiency > 0.97 and cost_only.critical_path() < both.critical_path()


def test_layout_matches_the_installed_megatron_core():
    """The same nesting as the layout megatron-core's own hybrid-CP scheduler returns (and
    its HybridCPDataLoaderWrapper reroutes): micro-batches of dp×cp lists of int ids."""
    hybrid = pytest.importorskip("megatron.core.pipeline_parallel.hybrid_cp_schedule",
                                 reason="megatron-core is not installed")

    class Group:
        def size(self):
            return 8

    lengths = naive_cp.long_tail_step(8, 4096, seed=2, max_length=32768)
    pairs = _pairs(lengths)
    _, theirs = hybrid.BalancedCPScheduler(4096, Group()).get_groups_and_subsamples(pairs, None)
    ours = DynamicCPScheduler(4096, 2, 4, None).get_groups_and_subsamples(pairs)

    def shape(groups):
        return {(type(groups).__name__, type(mb).__name__, len(mb), type(lst).__name__, type(i).__name__)
                for mb in groups for lst in mb for i in lst}

    assert shape(ours) == shape(theirs)
    def ids(groups):
        return sorted(set(i for mb in groups for lst in mb for i in lst))

    assert ids(ours) == ids(theirs) == list(range(lengths.size))


def test_the_group_sizes_are_megatrons():
    """packlib's CP sizes are exactly the groups Megatron-LM builds (its rule replayed in
    tests/naive_cp.py from its source), for every dp × cp and every min_cp_size it accepts."""
    for G in range(1, 130):
        for min_cp in naive_cp.megatron_group_sizes(G):
            assert allowed_sizes(G, min_cp).tolist() == naive_cp.megatron_group_sizes(G, min_cp), (G, min_cp)
    assert naive_cp.megatron_group_sizes(12) == [1, 2, 4, 12] and naive_cp.megatron_group_sizes(48) == [1, 2, 4, 8, 16, 48]


@pytest.mark.parametrize("dp, cp", [(3, 2), (6, 2), (3, 8), (12, 4)])  # G = 6, 12, 24, 48
def test_every_size_is_one_megatron_builds(dp, cp):
    """Steps whose long sequences a power of two between 2**floor(log2 G) / 2 and G would
    hold (4 at G = 6, 8 at 12, 16 at 24, 32 at 48) go on sizes Megatron has groups for."""
    G, cap = dp * cp, 1024
    top = 1 << (G.bit_length() - 1)
    rng = np.random.default_rng(G)
    lengths = np.concatenate([rng.integers(100, 1000, 6 * G), rng.integers(top // 2 * cap + 1, top * cap, 3)])
    pairs = list(enumerate(lengths.tolist()))
    sched = DynamicCPScheduler(cap, cp, dp, None, max_num_seqs=6, cost=COST)
    groups = sched.get_groups_and_subsamples(pairs)
    cps, _, _ = naive_cp.check_layout(groups, pairs, cap, G, max_num_seqs=6, padding_sequence=True)
    assert set(cps.values()) <= set(naive_cp.megatron_group_sizes(G)) and G in cps.values()
    assert sched.last_step.efficiency > 0.85


def test_max_num_seqs_counts_megatrons_padding_sequence():
    lengths = np.concatenate([np.random.default_rng(4).integers(50, 400, 120), [20_000, 9_000]])
    pairs = _pairs(lengths)
    counts = {}
    for padding in (True, False):
        sched = DynamicCPScheduler(4096, 2, 4, None, max_num_seqs=3, padding_sequence=padding, cost=COST)
        groups = sched.get_groups_and_subsamples(pairs)
        naive_cp.check_layout(groups, pairs, 4096, 8, max_num_seqs=3, padding_sequence=padding)
        counts[padding] = max(len(lst) for mb in groups for lst in mb)
    assert counts == {True: 2, False: 3}  # the limit binds either way
    with pytest.raises(ValueError, match="max_num_seqs = 1 leaves no room for a real sequence beside the padding"):
        DynamicCPScheduler(4096, 2, 4, None, max_num_seqs=1).get_groups_and_subsamples(pairs)
    assert DynamicCPScheduler(4096, 2, 4, None, max_num_seqs=None).get_groups_and_subsamples(pairs)


def _fake_data_schedule(monkeypatch, **names):
    fake = types.ModuleType("megatron.core.datasets.data_schedule")
    for key, value in names.items():
        setattr(fake, key, value)
    for name in ("megatron", "megatron.core", "megatron.core.datasets"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "megatron.core.datasets.data_schedule", fake)
    monkeypatch.setattr(sys.modules["megatron.core.datasets"], "data_schedule", fake, raising=False)
    return fake


@pytest.mark.parametrize("config, padding", [(None, True), (types.SimpleNamespace(pad_packed_seq_alignment=None), False),
                                             (types.SimpleNamespace(pad_packed_seq_alignment=64), True),
                                             (types.SimpleNamespace(pad_packed_seq_alignment=64,
                                                                    thd_tail_padding_policy="extend_last"), False)])
def test_run_reads_the_padding_sequence_from_megatrons_config(monkeypatch, config, padding):
    class FakeDpBalanced:
        def run(self, *args):
            return self.get_groups_and_subsamples([(k, 10) for k in range(12)])

    _fake_data_schedule(monkeypatch, DpBalancedScheduler=FakeDpBalanced)
    groups = DynamicCPScheduler(64, 1, 2, None, max_num_seqs=3).run(None, 4, None, None, None, None, "cpu", config)
    assert max(len(lst) for mb in groups for lst in mb) == 3 - padding


def test_register_refuses_a_megatron_without_dynamic_cp(monkeypatch):
    """megatron-core 0.16 has data_schedule but no scheduler_map; Megatron-LM's main branch
    one keyed by an enum, without dynamic CP: both refused, naming the Megatron-LM needed."""
    for names in ({}, {"scheduler_map": {"DP_BALANCED": object}}):
        _fake_data_schedule(monkeypatch, **names)
        with pytest.raises(ImportError, match="dev branch from commit 2d6e946b"):
            register()


def test_register_refuses_the_installed_megatron_core_wheel():
    pytest.importorskip("torch", reason="megatron-core needs torch")
    schedule = pytest.importorskip("megatron.core.datasets.data_schedule", reason="megatron-core is not installed")
    if "default_dynamic_cp" in getattr(schedule, "scheduler_map", {}):
        pytest.skip("the installed Megatron has dynamic CP")
    with pytest.raises(ImportError, match=r"megatron.core \(.*\) has no scheduler_map: install Megatron-LM's dev"):
        register()
