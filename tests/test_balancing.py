"""packlib.balance and BalancedBatchSampler (issue 19)."""
import pickle
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packlib
from packlib._jit import python_callable
from packlib._kernels import spread
from packlib.balancing import round_robin

from . import balance_workloads as workloads
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


# (L, lengths), world_size, micro_batches, depth, window, drop_last, b, seed: a schedule's draws
SCHEDULE_DRAWS = (lengths_strategy(), st.integers(1, 4), st.integers(1, 3), st.sampled_from([None, 1, 3]),
                  st.integers(1, 5), st.booleans(), st.floats(0, 0.5), st.integers(0, 3))


@settings(max_examples=60, deadline=None)
@given(*SCHEDULE_DRAWS)
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
    assert s.micro_batch_balance == pytest.approx(naive.micro_batch_balance(steps, lengths, 1.0, b), rel=1e-9)
    assert s.micro_batch_balance <= s.balance + 1e-12
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


def _spearman(lengths, s):
    from scipy.stats import spearmanr

    step = np.repeat(np.arange(s.packs.num_packs) // (s.world_size * s.micro_batches), np.diff(s.packs.offsets))
    return spearmanr(step, lengths[s.packs.indices]).statistic


@pytest.mark.parametrize("lengths, L, W, M", [(_workload(60_000), 8192, 8, 4), (workloads.long_documents(40_000), 32768, 32, 2)],
                         ids=["chat-like", "long documents"])
def test_the_order_is_a_shuffle_s_at_the_scale_of_tenths(lengths, L, W, M):
    """Issue 29: every tenth of the epoch as close to the epoch's mean length as a shuffle's
    (the median over seeds within 1.5x the median of ten shuffles), no drift of long samples
    (|Spearman(step, length)| <= 0.01), and no pattern that every seed shares."""
    cost = packlib.transformer_cost(4096, causal=False)
    runs = [packlib.balance(lengths, L, world_size=W, micro_batches=M, cost=cost, seed=seed) for seed in range(6)]
    devs = np.array([workloads.tenth_deviations(lengths, s.packs.indices) for s in runs])
    order = runs[0].packs.indices
    shuffles = [np.abs(workloads.tenth_deviations(lengths, np.random.default_rng(k).permutation(order))).max() for k in range(10)]
    assert np.median(np.abs(devs).max(axis=1)) <= 1.5 * np.median(shuffles)
    assert all(abs(_spearman(lengths, s)) <= 0.01 for s in runs)
    corr = np.corrcoef(devs)[np.triu_indices(len(runs), 1)]
    assert corr.mean() < 0.3, "the tenths of different seeds deviate alike: a pattern of the planner's"
    assert min(s.balance for s in runs) >= 0.99 and min(s.micro_batch_balance for s in runs) >= 0.98


def test_no_step_holds_far_more_sequences_than_the_others():
    """Short sequences are spread over the rows: no step of the long-document epoch holds
    more than three times the mean count (packed by plain best-fit decreasing, rows of a
    hundred short documents made steps of four and a half times the mean)."""
    lengths = workloads.long_documents(30_000, seed=1)
    s = packlib.balance(lengths, 32768, world_size=32, micro_batches=2, cost=packlib.transformer_cost(4096), seed=2)
    per_step = np.diff(s.packs.offsets).reshape(s.num_steps, -1).sum(axis=1)
    assert per_step.max() <= 3 * per_step.mean()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 100), min_size=1, max_size=200), st.integers(100, 128), st.sampled_from([2, 3, 1000]),
       st.integers(0, 8), st.integers(0, 5), st.sampled_from([-1.0, 0.0, 0.3, 0.875, 1.0]), st.booleans())
def test_spread_packing_is_a_packing_and_needs_no_more_rows_than_asked(lengths, L, depth, extra, steps, guess, check):
    from packlib._kernels.spread import spread_bfd
    from packlib._kernels.binpack import bfd

    lens = np.array(lengths, np.int64)
    rows = -(-int(lens.sum()) // L) + extra
    (off, items), reserve, _ = spread_bfd(lens, L, depth, max(1, L // 8), rows, steps, guess, check)
    assert np.array_equal(np.sort(items), np.arange(lens.size)), "every sequence once"
    tokens = np.add.reduceat(lens[items], off[:-1])
    assert tokens.max() <= L and np.diff(off).max() <= depth and np.diff(off).min() >= 1
    assert off.size - 1 <= (rows if reserve > 0 else max(rows, bfd(lens, L, depth)[0].size - 1))
    assert reserve == -1.0 or 0.0 < reserve <= 1.0


# the spread's private kernels, reached from Python through a small kernel that calls each
# (made once: every example calls the same compiled callers)
_SPREAD_PARTS = (python_callable(spread._bfd_rounds), python_callable(spread._bitset_levels))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 300_000), min_size=1, max_size=300), st.integers(1, 300_000), st.sampled_from([1, 2, 7, 10**9]))
def test_the_spread_packing_s_bucket_bitset_packs_like_best_fit_decreasing(lengths, L, depth):
    """With no reserve and no short round, the spread's packing (buckets of rows in a
    hierarchical bitset, up to four levels here) is plain best-fit decreasing, row for row."""
    from packlib._kernels.binpack import bfd, decreasing_order

    _bfd_rounds, _bitset_levels = _SPREAD_PARTS

    lens = np.minimum(np.array(lengths, np.int64), L)
    n, depth = lens.size, min(depth, L)
    order = decreasing_order(lens, lens.max())
    off = _bitset_levels(L + 1)
    pack_of = np.empty(n, np.int64)
    scratch = [np.zeros(n, np.int64) for _ in range(3)]
    rows = _bfd_rounds(lens, order, L, depth, 1, 0, False, pack_of, scratch[0], scratch[1], np.empty(L + 1, np.int64),
                       scratch[2], np.zeros(off[-1], np.uint64), off, n)
    ref_off, ref_items = bfd(lens, L, depth)
    assert rows == ref_off.size - 1
    assert np.array_equal(np.repeat(np.arange(rows), np.diff(ref_off)), pack_of[np.argsort(order)][ref_items])


def test_drop_last_false_schedules_everything_with_equal_counts():
    lengths = _workload(5000, seed=1)
    s = packlib.balance(lengths, 8192, world_size=3, micro_batches=2, drop_last=False)
    check_schedule(s, lengths, 8192, None, 3, 2, False)
    per_rank = [sum(1 for _ in s.rank(r)) for r in range(3)]
    assert per_rank == [s.num_steps] * 3


@pytest.mark.parametrize("padded", [False, True])
def test_determinism_across_processes(padded):
    code = ("import numpy as np, packlib, hashlib\n"
            "x = np.clip(np.rint(np.random.default_rng(5).lognormal(6, 1, 20000)), 1, 4096).astype(np.int64)\n"
            "s = packlib.balance(x, 4096, 4, world_size=4, micro_batches=2, cost=packlib.transformer_cost(2048),"
            f" seed=11, epoch=2, padded={padded})\n"
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
    ax = s.plot(baseline=round_robin(lengths, 8192, world_size=8, micro_batches=2, cost=cost))
    assert "packlib.balance: balance" in ax.get_title()  # one Axes, the schedule's; the baseline's beside it
    assert "round-robin" in ax.figure.axes[0].get_title() and ax.figure.axes[1] is ax
    ax.figure.canvas.draw()
    for a in ax.figure.axes[:2]:  # ranks and steps are counted: whole-number ticks
        assert all(float(t).is_integer() for t in a.get_yticks()) and all(float(t).is_integer() for t in a.get_xticks())
    ax.figure.savefig(tmp_path / "balance.png")


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
        if k % M and k != len(full):  # inside a step: its first micro-batches were never applied
            with pytest.raises(ValueError, match="inside a step"):
                b.load_state_dict(state)
            continue
        b.load_state_dict(state)
        assert len(b) == len(full) - k
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
    with pytest.raises(ValueError, match="another version of the planner"):
        a.load_state_dict(dict(state, version=1))  # issue 29 changed the schedules of the same settings


def test_sampler_with_a_torch_dataloader():
    torch = pytest.importorskip("torch")
    lengths = _workload(2000)
    sampler = packlib.BalancedBatchSampler(lengths, 8192, rank=0, world_size=2, micro_batches=2)
    loader = torch.utils.data.DataLoader(list(range(lengths.size)), batch_sampler=sampler)
    assert [b.tolist() for b in loader] == list(sampler)


# ------------------------------------------------------------------------------ fit_cost


def _timed_rows(rng, n):
    """Rows of varied make-up: one long sequence, many short ones, mixtures."""
    rows = []
    for _ in range(n):
        k = int(rng.integers(1, 40))
        rows.append(rng.integers(1, 32768 // k + 1, k))
    return rows


@pytest.mark.parametrize("a, b", [(3e-7, 2e-11), (1e-6, 0.0), (0.0, 5e-11)])
def test_fit_cost_recovers_known_coefficients_from_noisy_times(a, b):
    rng = np.random.default_rng(0)
    rows = _timed_rows(rng, 60)
    exact = np.array([a * r.sum() + b * (r.astype(float) ** 2).sum() for r in rows])
    seconds = exact * (1 + 0.02 * rng.standard_normal(exact.size))  # 2 % timing noise
    got_a, got_b = packlib.fit_cost(rows, seconds)
    assert got_a >= 0 and got_b >= 0
    scale = exact.mean()
    assert abs(got_a - a) * 16384 <= 0.05 * scale and abs(got_b - b) * 16384**2 <= 0.05 * scale
    if a > 0 and b > 0:
        want = naive.least_squares_cost([r.tolist() for r in rows], seconds.tolist())
        assert got_a == pytest.approx(want[0], rel=1e-6) and got_b == pytest.approx(want[1], rel=1e-6)
        assert got_a == pytest.approx(a, rel=0.05) and got_b == pytest.approx(b, rel=0.05)


def test_fit_cost_feeds_balance():
    rows = [[8192], [1024] * 8, [4096, 2048, 2048], [512] * 16]
    seconds = [2e-6 * sum(r) + 3e-10 * sum(x * x for x in r) for r in rows]
    cost = packlib.fit_cost(rows, seconds)
    assert cost == pytest.approx((2e-6, 3e-10), rel=1e-9)
    s = packlib.balance(_workload(3000), 8192, world_size=2, micro_batches=2, cost=cost)
    assert s.cost_coefficients == cost


@pytest.mark.parametrize("a, b, c", [(3e-7, 2e-11, 4e-3), (3e-7, 2e-11, 0.0), (1e-6, 0.0, 1e-3)])
def test_fit_cost_with_a_per_row_constant_recovers_it(a, b, c):
    rng = np.random.default_rng(1)
    rows = _timed_rows(rng, 60)
    rows += [r[: max(1, r.size // 3)] for r in rows[:20]]  # rows well short of full: c shows
    exact = np.array([a * r.sum() + b * (r.astype(float) ** 2).sum() + c for r in rows])
    got = packlib.fit_cost(rows, exact, constant=True)
    assert len(got) == 3 and min(got) >= 0
    assert got == pytest.approx((a, b, c), rel=1e-6, abs=1e-15)
    seconds = exact * (1 + 0.02 * rng.standard_normal(exact.size))  # 2 % timing noise
    got = packlib.fit_cost(rows, seconds, constant=True)
    scale = exact.mean()
    assert abs(got[0] - a) * 16384 <= 0.05 * scale and abs(got[1] - b) * 16384**2 <= 0.05 * scale
    assert abs(got[2] - c) <= 0.05 * scale
    if min(a, b, c) > 0:
        want = naive.least_squares_cost_constant([r.tolist() for r in rows], seconds.tolist())
        assert got == pytest.approx(want, rel=1e-6)


def test_fit_cost_without_constant_is_unchanged_and_a_constant_fits_better():
    rows = [[8192], [1024] * 8, [4096, 2048, 2048], [512] * 16, [4096], [1024] * 2, [256] * 4]
    seconds = [2e-6 * sum(r) + 3e-10 * sum(x * x for x in r) + 5e-3 for r in rows]
    two = packlib.fit_cost(rows, seconds)
    assert two == packlib.fit_cost(rows, seconds, constant=False) and len(two) == 2
    three = packlib.fit_cost(rows, seconds, constant=True)
    assert three == pytest.approx((2e-6, 3e-10, 5e-3), rel=1e-9)
    feats = np.array([[sum(r), sum(x * x for x in r), 1] for r in rows], float)
    residual = [np.abs(feats[:, :len(c)] @ np.array(c) - seconds).max() for c in (two, three)]
    assert residual[1] < 1e-12 < residual[0]


@pytest.mark.parametrize("rows, seconds, match", [
    ([[4096], [2048] * 2, [1024] * 4], [1.0, 0.8, 0.7], "every row holds 4096 tokens"),
    ([[4096], [1024] * 2], [1.0, 0.8], "linearly dependent"),  # two rows, three unknowns
    ([[512], [512] * 2, [512] * 3], [1.0, 2.0, 3.0], "cannot determine both a and b"),
    ([[512], [1024, 8], [64] * 4], [2.0, 2.0, 2.0], "a = b = 0 and a fixed c = 2 s per row"),
])
def test_fit_cost_with_constant_refuses_what_cannot_separate_it(rows, seconds, match):
    with pytest.raises(ValueError, match=match):
        packlib.fit_cost(rows, seconds, constant=True)
    with pytest.raises(TypeError, match="constant must be"):
        packlib.fit_cost([[1], [2, 2]], [1.0, 2.0], constant="yes")


@pytest.mark.parametrize("rows, seconds, error, match", [
    ([[5], []], [1.0, 2.0], ValueError, r"rows\[1\] is empty"),
    ([[5], [6, 7]], [1.0, -2.0], ValueError, r"seconds\[1\] = -2.0 is negative: row 1"),
    ([[5], [6, 7]], [1.0, float("nan")], ValueError, r"seconds must be finite, got nan at index 1"),
    ([[5], [6, 7]], [1.0, float("inf")], ValueError, r"seconds must be finite, got inf at index 1"),
    ([[5], [6, 7], [8]], [1.0, 2.0], ValueError, "3 rows but 2 times"),
    ([[5], [0, 7]], [1.0, 2.0], ValueError, r"rows\[1\] must be >= 1"),
    ([[512], [512], [512]], [1.0, 1.1, 0.9], ValueError, "cannot determine both a and b"),
    ([[512], [512, 512], [512] * 4], [1.0, 2.0, 4.0], ValueError, "cannot determine both a and b"),
    ([[512], [1024, 8]], [0.0, 0.0], ValueError, "a = b = 0"),
    ([[5]], [], ValueError, "seconds is empty"),
    ("abc", [1.0], TypeError, "rows must be a sequence of rows"),
])
def test_fit_cost_bad_input(rows, seconds, error, match):
    with pytest.raises(error, match=match):
        packlib.fit_cost(rows, seconds)
