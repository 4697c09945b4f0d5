"""packlib.balance and BalancedBatchSampler (issue 19)."""
import pickle
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packlib
from packlib.balancing import round_robin

from . import naive_balance as naive


def steps_of(s):
    """Per step, per rank, per micro-batch: lists of sample ids."""
    W, M, o, ix = s.world_size, s.micro_batches, s.packs.offsets, s.packs.indices
    return [[[ix[o[k]:o[k + 1]].tolist() for k in range((st * W + r) * M, (st * W + r + 1) * M)] for r in range(W)]
            for st in range(s.num_steps)]


def check_schedule(s, lengths, L, depth, W, M, drop_last):
    lengths = np.asarray(lengths)
    n = lengths.size
    assert s.packs.num_packs == s.num_steps * W * M, "every rank the same steps and micro-batches"
    assert s.cost.shape == (s.num_steps, W)
    ids = np.concatenate((s.packs.indices, s.dropped))
    assert np.array_equal(np.sort(ids), np.arange(n)), "every sample exactly once: scheduled or dropped"
    assert np.array_equal(s.packs.lengths, lengths[s.packs.indices])
    if s.num_steps:
        assert s.packs.pack_tokens.max() <= L
        if depth is not None:
            assert s.packs.pack_sizes.max() <= depth
    if drop_last:
        assert int(lengths[s.dropped].sum()) <= W * M * L, "at most one step's worth dropped"
    else:
        assert s.dropped.size == 0
    return steps_of(s)


def lengths_strategy():
    return st.tuples(st.integers(1, 64), st.lists(st.integers(1, 64), min_size=1, max_size=300)).map(
        lambda t: (t[0], [min(x, t[0]) for x in t[1]]))


@settings(max_examples=60, deadline=None)
@given(lengths_strategy(), st.integers(1, 4), st.integers(1, 3), st.sampled_from([None, 1, 3]),
       st.integers(1, 5), st.booleans(), st.floats(0, 0.5), st.integers(0, 3))
def test_schedule_properties(data, W, M, depth, window, drop_last, b, seed):
    L, lengths = data
    if drop_last and len(lengths) < W * M:
        with pytest.raises(ValueError, match="cannot fill one step"):
            packlib.balance(lengths, L, depth, world_size=W, micro_batches=M, drop_last=True)
        return
    try:
        s = packlib.balance(lengths, L, depth, world_size=W, micro_batches=M, cost=(1.0, b), window=window,
                            seed=seed, drop_last=drop_last)
    except ValueError as e:
        assert drop_last and "fill no whole step" in str(e)
        return
    steps = check_schedule(s, lengths, L, depth, W, M, drop_last)
    want = naive.rank_costs(steps, lengths, 1.0, b)
    assert np.allclose(s.cost, np.array(want).reshape(s.cost.shape), rtol=1e-9)
    assert s.balance == pytest.approx(naive.balance(want), rel=1e-9)
    assert s.efficiency == pytest.approx(naive.efficiency(steps, lengths, L), rel=1e-12)
    again = packlib.balance(lengths, L, depth, world_size=W, micro_batches=M, cost=(1.0, b), window=window,
                            seed=seed, drop_last=drop_last)
    assert np.array_equal(again.packs.indices, s.packs.indices) and np.array_equal(again.packs.offsets, s.packs.offsets)


def _workload(n=60_000, seed=0):
    rng = np.random.default_rng(seed)
    return np.clip(np.rint(rng.lognormal(np.log(600), 1.0, n)), 1, 8192).astype(np.int64)


def test_balanced_full_rows_and_the_order_kept_in_tenths():
    lengths = _workload()
    cost = packlib.transformer_cost(4096, causal=False)
    s = packlib.balance(lengths, 8192, world_size=8, micro_batches=4, cost=cost, seed=3)
    check_schedule(s, lengths, 8192, None, 8, 4, True)
    base = round_robin(lengths, 8192, world_size=8, micro_batches=4, cost=cost, seed=3)
    assert s.balance >= 0.99 and s.efficiency >= 0.99
    assert s.balance > base.balance
    tokens = s.step_tokens()
    assert tokens.min() >= 0.97 * 8 * 4 * 8192, "steps keep a near-constant number of tokens"
    # not sorted by length: every tenth of the epoch keeps the epoch's mean length
    order = s.packs.indices
    tenths = np.array_split(order, 10)
    mean = lengths[order].mean()
    assert max(abs(lengths[t].mean() / mean - 1) for t in tenths) < 0.03


def test_drop_last_false_schedules_everything_with_equal_counts():
    lengths = _workload(5000, seed=1)
    s = packlib.balance(lengths, 8192, world_size=3, micro_batches=2, drop_last=False)
    check_schedule(s, lengths, 8192, None, 3, 2, False)
    per_rank = [sum(1 for _ in s.rank(r)) for r in range(3)]
    assert per_rank == [s.num_steps] * 3


def test_determinism_across_processes():
    code = ("import numpy as np, packlib, hashlib\n"
            "x = np.clip(np.rint(np.random.default_rng(5).lognormal(6, 1, 20000)), 1, 4096).astype(np.int64)\n"
            "s = packlib.balance(x, 4096, 4, world_size=4, micro_batches=2, cost=packlib.transformer_cost(2048),"
            " seed=11, epoch=2)\n"
            "print(hashlib.sha256(s.packs.indices.tobytes() + s.packs.offsets.tobytes() + s.cost.tobytes()).hexdigest())")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": str(k), "PATH": ""}).stdout for k in (0, 1)}
    assert len(outs) == 1


def test_epochs_and_seeds_shuffle_differently():
    lengths = _workload(8000, seed=2)
    a = packlib.balance(lengths, 8192, world_size=2, micro_batches=2, epoch=0)
    b = packlib.balance(lengths, 8192, world_size=2, micro_batches=2, epoch=1)
    c = packlib.balance(lengths, 8192, world_size=2, micro_batches=2, seed=1)
    assert not np.array_equal(a.packs.indices, b.packs.indices)
    assert not np.array_equal(a.packs.indices, c.packs.indices)


def test_result_type():
    s = packlib.balance(_workload(4000), 8192, world_size=2, micro_batches=2, cost=packlib.transformer_cost(1024))
    assert "balance=" in repr(s) and "<table>" in s._repr_html_()
    d = s.to_dict()
    assert d["num_steps"] == s.num_steps and d["balance"] == s.balance
    with pytest.raises(ValueError):
        s.cost[0, 0] = 1.0
    with pytest.raises(ValueError):
        s.dropped[:] = 0
    assert pickle.loads(pickle.dumps(s)).balance == s.balance
    with pytest.raises(IndexError, match="rank 2 is out of range for world_size = 2"):
        next(s.rank(2))


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    lengths = _workload(20000)
    cost = packlib.transformer_cost(4096, causal=False)
    s = packlib.balance(lengths, 8192, world_size=8, micro_batches=2, cost=cost)
    axes = s.plot(baseline=round_robin(lengths, 8192, world_size=8, micro_batches=2, cost=cost))
    assert len(axes) == 2 and "balance" in axes[1].get_title()
    axes[0].figure.savefig(tmp_path / "balance.png")


def test_transformer_cost():
    assert packlib.transformer_cost(4096, causal=False) == (1.0, 1 / (6 * 4096))
    assert packlib.transformer_cost(4096)[1] == pytest.approx(1 / (12 * 4096))
    a, b = packlib.transformer_cost(1000, ffn_multiplier=8)
    assert b == pytest.approx(4 / ((8 + 32) * 1000) / 2)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(lengths=[1, 9], max_sequence_length=8), ValueError, r"lengths\[1\] = 9 exceeds max_sequence_length = 8"),
    (dict(world_size=0), ValueError, "world_size must be >= 1"),
    (dict(world_size=2.0), TypeError, "world_size must be a whole number"),
    (dict(micro_batches=0), ValueError, "micro_batches must be >= 1"),
    (dict(cost=(1.0, -1.0)), ValueError, "cost must be non-negative"),
    (dict(cost=(float("nan"), 0.0)), ValueError, "cost must be finite"),
    (dict(cost=(0, 0)), ValueError, r"cost is \(0, 0\)"),
    (dict(cost=3.0), TypeError, "cost must be a pair"),
    (dict(lengths=[3, 3], world_size=4), ValueError, "2 samples cannot fill one step of 4 ranks"),
    (dict(lengths=[]), ValueError, "lengths is empty"),
    (dict(lengths=[1, 0, 2]), ValueError, "lengths must be >= 1"),
    (dict(window=0), ValueError, "window must be >= 1"),
    (dict(epoch=-1), ValueError, "epoch must be >= 0"),
    (dict(drop_last="yes"), TypeError, "drop_last must be True or False"),
    (dict(lengths=[2**40] * 4, max_sequence_length=2**41), ValueError, "above what balance supports"),
    (dict(world_size=2**20, micro_batches=2**20), ValueError, "rows per window is above the supported"),
])

def test_bad_input(kwargs, error, match):
    args = dict(lengths=[1, 2, 3, 4, 5, 6, 7, 8], max_sequence_length=8, world_size=2)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        packlib.balance(args.pop("lengths"), args.pop("max_sequence_length"), **args)


def test_many_ranks_and_micro_batches_stay_fast():
    """Dealing is O(M W log W) per step and the exchanges are capped: 65,536 ranks x 64."""
    s = packlib.balance([5] * 10, 8, world_size=2**16, micro_batches=64, drop_last=False)
    assert s.num_steps == 1 and s.packs.num_packs == 2**22 and s.num_samples == 10


# ------------------------------------------------------------------------------ the sampler


def test_sampler_yields_each_rank_s_micro_batches():
    lengths = _workload(6000, seed=4)
    W, M = 3, 2
    samplers = [packlib.BalancedBatchSampler(lengths, 8192, rank=r, world_size=W, micro_batches=M, seed=9)
                for r in range(W)]
    s = samplers[0].schedule
    assert all(len(x) == s.num_steps * M for x in samplers)
    for r, sampler in enumerate(samplers):
        got = list(sampler)
        want = [mb.tolist() for step in s.rank(r) for mb in step]
        assert got == want
        assert all(isinstance(i, int) for mb in got for i in mb)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 3), st.integers(1, 2))
def test_sampler_resumes_at_every_position(seed, W, M):
    lengths = np.random.default_rng(seed).integers(1, 64, 80)
    a = packlib.BalancedBatchSampler(lengths, 64, rank=W - 1, world_size=W, micro_batches=M, seed=seed)
    a.set_epoch(1)
    full = list(a)
    for k in range(len(full) + 1):
        it = iter(a)
        for _ in range(k):
            next(it)
        state = a.state_dict()
        b = packlib.BalancedBatchSampler(lengths, 64, rank=W - 1, world_size=W, micro_batches=M, seed=seed)
        b.load_state_dict(state)
        assert list(b) == full[k:]


def test_sampler_refuses_other_settings_and_bad_ranks():
    lengths = np.arange(1, 101)
    a = packlib.BalancedBatchSampler(lengths, 128, rank=0, world_size=2)
    state = a.state_dict()
    for other in (dict(lengths=np.arange(2, 102)), dict(seed=1), dict(world_size=4), dict(micro_batches=2),
                  dict(max_sequence_length=256), dict(window=3), dict(cost=(1.0, 1e-3))):
        args = dict(lengths=lengths, max_sequence_length=128, rank=0, world_size=2)
        args.update(other)
        b = packlib.BalancedBatchSampler(args.pop("lengths"), args.pop("max_sequence_length"), **args)
        with pytest.raises(ValueError, match="other lengths or settings"):
            b.load_state_dict(state)
    with pytest.raises(ValueError, match="rank 0's"):
        packlib.BalancedBatchSampler(lengths, 128, rank=1, world_size=2).load_state_dict(state)
    with pytest.raises(IndexError, match="rank 2 is out of range"):
        packlib.BalancedBatchSampler(lengths, 128, rank=2, world_size=2)
    with pytest.raises(ValueError, match="not a BalancedBatchSampler state"):
        a.load_state_dict({"epoch": 0})


def test_sampler_with_a_torch_dataloader():
    torch = pytest.importorskip("torch")
    lengths = _workload(2000)
    sampler = packlib.BalancedBatchSampler(lengths, 8192, rank=0, world_size=2, micro_batches=2)
    loader = torch.utils.data.DataLoader(list(range(lengths.size)), batch_sampler=sampler)
    assert [b.tolist() for b in loader] == list(sampler)
