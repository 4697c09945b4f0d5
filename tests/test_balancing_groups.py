"""packlib.balance, round_robin and BalancedBatchSampler on 2-D lengths: preference pairs and
groups of completions planned whole (sample ids are group ids), each group's tokens and cost
those of its sequences, less the shared prompt's repeats with ``shared_prompt_lengths``."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packlib
from packlib.balancing import round_robin


def naive_group(row, prompt, a, b):
    """Tokens laid out and cost of one group, from its sequence lengths alone."""
    present = [int(x) for x in row if x > 0]
    tokens = sum(present)
    cost = sum(a * x + b * x * x for x in present)
    if prompt is not None:
        tokens -= (len(present) - 1) * prompt
        cost -= (len(present) - 1) * (a * prompt + b * prompt * prompt)
    return tokens, cost


def check_groups(s, groups, prompts, L, depth, W, M, cost):
    n = len(groups)
    naive = [naive_group(groups[i], None if prompts is None else prompts[i], *cost) for i in range(n)]
    ids = np.concatenate((s.packs.indices, s.dropped))
    assert np.array_equal(np.sort(ids), np.arange(n)), "every group exactly once: scheduled or dropped"
    assert s.packs.lengths.tolist() == [naive[i][0] for i in s.packs.indices], "a group's tokens as laid out"
    o, ix = s.packs.offsets, s.packs.indices
    rank_cost = np.zeros((s.num_steps, W))
    for k in range(s.packs.num_packs):
        row = ix[o[k]:o[k + 1]].tolist()
        assert sum(naive[i][0] for i in row) <= L, "every micro-batch within capacity, its groups whole"
        if depth is not None:
            assert len(row) <= depth
        rank_cost[k // (W * M), (k // M) % W] += sum(naive[i][1] for i in row)
    assert np.allclose(s.cost, rank_cost, rtol=1e-9, atol=1e-9), "a rank's cost: its groups' summed costs"


@st.composite
def groups_strategy(draw):
    k = draw(st.integers(1, 4))
    n = draw(st.integers(1, 80))
    share = draw(st.booleans())
    prompts = [draw(st.integers(1, 20)) for _ in range(n)] if share else None
    rows = []
    for i in range(n):
        low = prompts[i] + 1 if share else 1
        row = [draw(st.one_of(st.just(0), st.integers(low, low + 40))) for _ in range(k)]
        if not any(row):
            row[draw(st.integers(0, k - 1))] = low
        rows.append(row)
    return np.array(rows), None if prompts is None else np.array(prompts)


@settings(max_examples=40, deadline=None)
@given(groups_strategy(), st.integers(1, 3), st.integers(1, 3), st.sampled_from([None, 2]), st.booleans(),
       st.floats(0, 0.05), st.integers(0, 3))
def test_every_group_exactly_once_never_split_within_capacity(data, W, M, depth, drop_last, b, seed):
    groups, prompts = data
    tokens = [naive_group(groups[i], None if prompts is None else prompts[i], 1, 0)[0] for i in range(len(groups))]
    L = max(tokens) + 30
    kw = dict(world_size=W, micro_batches=M, cost=(1.0, b), seed=seed, shared_prompt_lengths=prompts)
    try:
        s = packlib.balance(groups, L, depth, drop_last=drop_last, **kw)
    except ValueError as e:  # too few groups for one whole step
        assert drop_last and ("cannot fill one step" in str(e) or "fill no whole step" in str(e))
        return
    check_groups(s, groups, prompts, L, depth, W, M, (1.0, b))
    if drop_last:
        r = round_robin(groups, L, depth, world_size=W, micro_batches=M, cost=(1.0, b), seed=seed,
                        shared_prompt_lengths=prompts)
        check_groups(r, groups, prompts, L, depth, W, M, (1.0, b))
    ranks = [packlib.BalancedBatchSampler(groups, L, depth, rank=r, drop_last=drop_last, **kw) for r in range(W)]
    seen = sorted(i for sampler in ranks for mb in sampler for i in mb)
    assert seen == sorted(s.packs.indices.tolist()), "the samplers yield the schedule's groups, each once"


def test_groups_of_one_plan_as_the_1d_lengths_do():
    lengths = np.random.default_rng(0).integers(1, 700, 3000)
    cost = packlib.transformer_cost(1024)
    one = packlib.balance(lengths, 2048, world_size=4, micro_batches=2, cost=cost, seed=3)
    two = packlib.balance(lengths[:, None], 2048, world_size=4, micro_batches=2, cost=cost, seed=3)
    assert np.array_equal(one.packs.offsets, two.packs.offsets) and np.array_equal(one.packs.indices, two.packs.indices)
    assert np.array_equal(one.cost, two.cost) and one.micro_batch_balance == pytest.approx(two.micro_batch_balance)


def test_pairs_balance_as_sequences_do():
    rng = np.random.default_rng(1)
    p = np.clip(rng.lognormal(4.8, 0.7, 6000), 2, 1024).astype(int)
    pairs = np.stack([p + np.clip(rng.lognormal(5.5, 0.7, 6000), 1, 1500).astype(int) for _ in range(2)], 1)
    cost = packlib.transformer_cost(1024)
    plans = [packlib.balance(pairs, 4096, world_size=8, micro_batches=2, cost=cost, shared_prompt_lengths=shared)
             for shared in (None, p)]
    for s in plans:
        assert s.balance >= 0.99 and s.micro_batch_balance >= 0.98 and s.efficiency >= 0.98
    assert plans[1].num_steps < 0.9 * plans[0].num_steps, "the prompt once: fewer tokens, fewer steps"


def test_the_sampler_state_tells_2d_lengths_apart():
    pairs = np.random.default_rng(2).integers(1, 100, (200, 2))
    a = packlib.BalancedBatchSampler(pairs, 256, rank=0, world_size=2)
    b = packlib.BalancedBatchSampler(pairs[:, ::-1], 256, rank=0, world_size=2)  # same totals, other make-up
    with pytest.raises(ValueError, match="other lengths or settings"):
        b.load_state_dict(a.state_dict())


@pytest.mark.parametrize("lengths, kw, match", [
    ([[3, 4], [5, -1]], {}, r"lengths\[1, 1\] = -1 is negative: group 1"),
    ([[3, 4], [0, 0], [1, 1]], {}, r"lengths\[1\] is all zeros: group 1 has no sequence"),
    ([[3, 4], [60, 50]], {}, r"group 1 lays out 110 tokens .* over max_sequence_length = 100"),
    ([[30, 40], [60, 50]], {"shared_prompt_lengths": [5, 2]}, r"group 1 lays out 108 tokens"),
    ([[3, 4], [6, 5]], {"shared_prompt_lengths": [2]}, "1 values for 2 groups"),
    ([[3, 4], [6, 5]], {"shared_prompt_lengths": [2, 5]}, r"lengths\[1, 1\] = 5 is not longer than "
                                                            r"shared_prompt_lengths\[1\] = 5"),
    ([3, 4], {"shared_prompt_lengths": [2, 2]}, "shared_prompt_lengths needs 2-D lengths"),
    (np.zeros((0, 2), int), {}, "empty"),
])
def test_bad_2d_lengths_are_refused_naming_the_group(lengths, kw, match):
    with pytest.raises(ValueError, match=match):
        packlib.balance(lengths, 100, world_size=1, drop_last=False, **kw)
    with pytest.raises(ValueError, match=match):
        packlib.BalancedBatchSampler(lengths, 100, rank=0, world_size=1, drop_last=False, **kw)


def test_2d_lengths_of_floats_or_bools_are_refused():
    with pytest.raises(ValueError, match="whole numbers"):
        packlib.balance([[1.5, 2]], 100, world_size=1, drop_last=False)
    with pytest.raises(TypeError, match="numbers"):
        packlib.balance([[True, False]], 100, world_size=1, drop_last=False)
