import pickle
import random
import sys
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packlib
from packlib.bucketing import Batches, BucketedReadaheadBatchIterator, bucket, pack_stream
from packlib._kernels.bucket import mt_shuffle, sort_desc

from .naive_bucket import naive_bucket, naive_bucket_lengths, naive_shard



def _ib():
    """``(infinibatch.iterators, its BucketedReadaheadBatchIterator, NativeCheckpointableIterator)``,
    or skip the calling test: only the comparisons with infinibatch need it."""
    ib = pytest.importorskip("infinibatch.iterators")
    return ib, ib.BucketedReadaheadBatchIterator, ib.NativeCheckpointableIterator


def _batch_size_fn(kind):
    return {
        "int1": 1,
        "int3": 3,
        "int8": 8,
        "budget": lambda x: max(1, 40 // _len(x)),
        "odd": lambda x: 1 + (_len(x) % 4),
    }[kind]


def _len(x):
    return x["n"] if isinstance(x, dict) else x


items_st = st.lists(st.integers(1, 30), max_size=120)
config_st = st.fixed_dictionaries(
    {
        "read_ahead": st.integers(1, 40),
        "bs": st.sampled_from(["int1", "int3", "int8", "budget", "odd"]),
        "boundary": st.booleans(),
        "shuffle": st.booleans(),
        "seed": st.integers(0, 2**40),
        "dicts": st.booleans(),
    }
)


def _make(lens, cfg):
    items = [{"n": v, "id": i} for i, v in enumerate(lens)] if cfg["dicts"] else list(lens)
    kw = dict(
        read_ahead=cfg["read_ahead"],
        key=_len,
        batch_size=_batch_size_fn(cfg["bs"]),
        boundary_key=(lambda x: _len(x) // 7) if cfg["boundary"] else None,
        shuffle=cfg["shuffle"],
        seed=cfg["seed"],
    )
    return items, kw


# ---------------------------------------------------------------- identical to infinibatch
@given(items_st, config_st)
def test_iterator_matches_infinibatch_and_naive(lens, cfg):
    ib, IB, Native = _ib()
    items, kw = _make(lens, cfg)
    ours = list(BucketedReadaheadBatchIterator(items, **kw))
    theirs = list(IB(Native(items), **kw))
    assert ours == theirs
    assert ours == naive_bucket(items, kw["read_ahead"], kw["key"], kw["batch_size"], kw["boundary_key"], kw["shuffle"], kw["seed"])
    # every item exactly once
    assert sorted(map(repr, (x for b in ours for x in b))) == sorted(map(repr, items))


@pytest.mark.parametrize("read_ahead", [1, 100, 1000, 3000])
@pytest.mark.parametrize("bs", [1, 7, 32, "budget"])
def test_iterator_matches_infinibatch_large(read_ahead, bs):
    ib, IB, Native = _ib()
    rng = np.random.default_rng(read_ahead)
    lens = np.clip(np.rint(rng.lognormal(3, 1, 6000)), 1, 300).astype(int).tolist()
    batch_size = (lambda x: 600 // x) if bs == "budget" else bs  # many batches: kernel shuffle path
    for seed in (0, 12345):
        ours = list(BucketedReadaheadBatchIterator(lens, read_ahead, key=lambda x: x, batch_size=batch_size, seed=seed))
        theirs = list(IB(Native(lens), read_ahead, key=lambda x: x, batch_size=batch_size, seed=seed))
        assert ours == theirs


@pytest.mark.parametrize("keyfn", [lambda x: float(x % 5) + 0.5, lambda x: (x % 3, -x), None, lambda x: x % 2 == 0])
def test_non_integer_and_absent_keys_match(keyfn):
    ib, IB, Native = _ib()
    items = list(range(97))
    for seed in (0, 1):
        ours = list(BucketedReadaheadBatchIterator(items, 20, key=keyfn, batch_size=3, seed=seed))
        assert ours == list(IB(Native(items), 20, key=keyfn, batch_size=3, seed=seed))


def test_sequence_items_are_kept_as_objects():
    ib, IB, Native = _ib()
    rng = np.random.default_rng(2)
    items = [list(range(int(n))) for n in rng.integers(1, 9, 200)] + [np.arange(int(n)) for n in rng.integers(1, 9, 50)]
    ours = list(BucketedReadaheadBatchIterator(items, 64, key=len, batch_size=3, seed=1))
    theirs = list(IB(Native(items), 64, key=len, batch_size=3, seed=1))
    assert [[id(x) for x in b] for b in ours] == [[id(x) for x in b] for b in theirs]


def test_wide_int_keys_take_merge_sort_path():
    ib, IB, Native = _ib()
    items = [(i * 7919) % 101 * 10**9 + i for i in range(500)] + [2**70, -5, -(2**63)]
    ours = list(BucketedReadaheadBatchIterator(items, 64, key=lambda x: x, batch_size=5, seed=3))
    assert ours == list(IB(Native(items), 64, key=lambda x: x, batch_size=5, seed=3))
    edge = [-(2**63), 5, 2**63 - 1, 3, 5] * 3  # int64 extremes: no overflow in the compiled sort
    assert list(BucketedReadaheadBatchIterator(edge, 4, key=lambda x: x, batch_size=2, seed=1)) == list(
        IB(Native(edge), 4, key=lambda x: x, batch_size=2, seed=1)
    )


def test_accepts_infinibatch_sources():
    ib, IB, Native = _ib()
    src = list(range(300))
    mk = lambda: ib.InfinitePermutationSourceIterator(src, seed=4)  # noqa: E731
    a = BucketedReadaheadBatchIterator(mk(), 50, key=lambda x: x % 17, batch_size=4, seed=9)
    b = IB(mk(), 50, key=lambda x: x % 17, batch_size=4, seed=9)
    for _ in range(200):
        assert next(a) == next(b)
    assert a.getstate()["source_state"] == b.getstate()["source_state"]
    # our iterator is accepted where infinibatch wants a CheckpointableIterator
    assert isinstance(a, ib.CheckpointableIterator)
    nested = ib.MapIterator(a, len)
    assert next(nested) >= 1


# ---------------------------------------------------------------- the array path
@given(
    st.lists(st.integers(1, 60), max_size=300),
    st.integers(1, 50),
    st.one_of(st.tuples(st.integers(1, 9), st.none()), st.tuples(st.none(), st.integers(60, 200))),
    st.booleans(),
    st.integers(0, 2**32),
)
def test_bucket_matches_naive_and_infinibatch(lens, read_ahead, sizes, shuffle, seed):
    ib, IB, Native = _ib()
    batch_size, max_tokens = sizes
    got = bucket(lens, read_ahead=read_ahead, batch_size=batch_size, max_tokens=max_tokens, shuffle=shuffle, seed=seed)
    want = naive_bucket_lengths(lens, read_ahead, batch_size, max_tokens, shuffle, seed)
    assert got.to_list() == want
    bs = batch_size if batch_size is not None else (lambda i: max_tokens // lens[i])
    assert want == list(IB(Native(list(range(len(lens)))), read_ahead, key=lens.__getitem__, batch_size=bs, shuffle=shuffle, seed=seed))
    assert np.array_equal(np.sort(got.indices), np.arange(len(lens)))
    assert np.array_equal(got.lengths, np.asarray(lens, dtype=np.int64)[got.indices])
    assert got.window_batches.sum() == got.num_batches
    if max_tokens is not None and got.num_batches:
        assert (got.batch_sizes * got.batch_max_lengths <= max_tokens).all()


def test_bucket_wide_lengths_use_merge_sort():
    rng = np.random.default_rng(3)
    lens = rng.integers(1, 10**12, 500)
    lens[::7] = lens[3]  # ties
    for kw in (dict(batch_size=4), dict(max_tokens=int(lens.max()) * 3)):
        got = bucket(lens, read_ahead=64, seed=5, **kw).to_list()
        assert got == naive_bucket_lengths(lens, 64, kw.get("batch_size"), kw.get("max_tokens"), True, 5)


def test_bucket_result_type_and_padding_golden():
    b = bucket([3, 1, 2, 5], read_ahead=4, batch_size=2, shuffle=False)
    assert isinstance(b, Batches)
    assert b.to_list() == [[3, 0], [2, 1]]
    assert b.batch_max_lengths.tolist() == [5, 2]
    assert b.padded_tokens == 2 * 5 + 2 * 2
    assert b.padding == pytest.approx(1 - 11 / 14)
    assert not b.indices.flags.writeable
    assert "2 batches" in repr(b)
    assert [x.tolist() for x in b] == b.to_list() and b[-1].tolist() == [2, 1]
    e = bucket([], read_ahead=5, batch_size=2)
    assert e.num_batches == 0 and e.padding == 0.0


def test_bucket_counting_and_merge_sort_agree():
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 50, 1000)
    a = sort_desc(keys, 0, 49, np.empty(51, np.int64))
    b = sort_desc(keys, 0, 49, np.empty(0, np.int64))
    assert np.array_equal(a, b)
    assert np.array_equal(a, np.argsort(-keys, kind="stable"))


@pytest.mark.parametrize("n", [0, 1, 2, 47, 48, 49, 700, 5000])
@pytest.mark.parametrize("seed", [0, 7, 2**33 + 1])
def test_mt_shuffle_is_cpython_shuffle(n, seed):
    r = random.Random(seed)
    r.random()  # start mid-stream
    st_ = r.getstate()
    mt = np.array(st_[1][:624], dtype=np.uint64)
    pos = np.array([st_[1][624]], dtype=np.int64)
    a = np.arange(n)
    mt_shuffle(a, mt, pos)
    x = list(range(n))
    r.shuffle(x)
    assert a.tolist() == x
    assert tuple(mt.tolist()) + (int(pos[0]),) == r.getstate()[1]


# ---------------------------------------------------------------- checkpointing
@settings(max_examples=25)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=40), config_st)
def test_resume_at_every_batch_position(lens, cfg):
    ib, IB, Native = _ib()
    items, kw = _make(lens, cfg)
    full = list(BucketedReadaheadBatchIterator(items, **kw))
    ref = IB(Native(items), **kw)
    it = BucketedReadaheadBatchIterator(items, **kw)
    for k in range(len(full) + 1):
        state = it.getstate()
        ref_state = ref.getstate()
        assert {k_: state[k_] for k_ in ("source_state", "random_state", "num_served")} == ref_state
        state = pickle.loads(pickle.dumps(state))
        fresh = BucketedReadaheadBatchIterator(items, **kw)
        fresh.setstate(state)
        assert list(fresh) == full[k:]
        # states move between the implementations
        other = IB(Native(items), **kw)
        other.setstate(state)
        assert list(other) == full[k:]
        mine = BucketedReadaheadBatchIterator(items, **kw)
        mine.setstate(ref_state)
        assert list(mine) == full[k:]
        if k < len(full):
            assert next(it) == full[k] == next(ref)
    it.setstate(None)
    assert list(it) == full


def test_one_shot_iterator_source():
    gen = (x for x in [5, 3, 9, 1, 2])
    it = BucketedReadaheadBatchIterator(gen, 3, key=lambda x: x, batch_size=2, shuffle=False)
    assert list(it) == [[9, 5], [3], [2, 1]]
    with pytest.raises(ValueError, match="one-shot iterator"):
        it.setstate(None)


def test_state_errors():
    items = list(range(50))
    it = BucketedReadaheadBatchIterator(items, 10, key=lambda x: x, batch_size=3, seed=1)
    next(it)
    st_ = it.getstate()
    other = BucketedReadaheadBatchIterator(items, 10, key=lambda x: x, batch_size=4, seed=1)
    with pytest.raises(ValueError, match="different configuration"):
        other.setstate(st_)
    with pytest.raises(ValueError, match="getstate"):
        other.setstate({"foo": 1})
    bad = dict(st_, num_served=99)
    fresh = BucketedReadaheadBatchIterator(items, 10, key=lambda x: x, batch_size=3, seed=1)
    fresh.setstate(bad)
    with pytest.raises(ValueError, match="only"):
        next(fresh)
    with pytest.raises(ValueError, match="only 50"):
        fresh.setstate(dict(st_, source_state={"num_items_yielded": 60}))
    with pytest.raises(ValueError, match="random.Random state"):
        fresh.setstate(dict(st_, random_state=("x",)))


# ---------------------------------------------------------------- sharding
@given(
    st.lists(st.integers(1, 40), max_size=200),
    st.integers(1, 30),
    st.integers(1, 5),
    st.sampled_from(["repeat", "drop"]),
    st.integers(0, 100),
)
def test_rank_sharding(lens, read_ahead, world_size, remainder, seed):
    bs = lambda x: max(1, 60 // x)  # noqa: E731  dynamic sizes: uneven batch counts per window
    per_rank = [
        list(BucketedReadaheadBatchIterator(lens, read_ahead, key=lambda x: x, batch_size=bs, seed=seed, rank=r, world_size=world_size, remainder=remainder))
        for r in range(world_size)
    ]
    assert len({len(g) for g in per_rank}) == 1  # equal batch counts on every rank
    # expected: each window's unsharded batches (naive reference), dealt out round-robin
    allb = iter(naive_bucket(list(lens), read_ahead, lambda x: x, bs, seed=seed))
    expected = [[] for _ in range(world_size)]
    for c in bucket(lens, read_ahead=read_ahead, max_tokens=60, seed=seed).window_batches.tolist():
        wb = [next(allb) for _ in range(c)]
        for r in range(world_size):
            expected[r].extend(naive_shard(wb, r, world_size, remainder))
    assert per_rank == expected
    for r in range(world_size):
        sh = bucket(lens, read_ahead=read_ahead, max_tokens=60, seed=seed, rank=r, world_size=world_size, remainder=remainder)
        assert [[lens[i] for i in b] for b in sh.to_list()] == per_rank[r]
        assert sh.window_batches.sum() == sh.num_batches
    served = sorted(x for g in per_rank for b in g for x in b)
    if remainder == "repeat":
        assert set(served) == set(lens)  # nothing lost
        assert len(served) >= len(lens)
    else:
        from collections import Counter

        assert not Counter(served) - Counter(lens)  # nothing served twice


def test_sharding_world_size_one_is_identity():
    lens = list(range(1, 80))
    a = list(BucketedReadaheadBatchIterator(lens, 13, key=lambda x: x, batch_size=4, seed=2))
    b = list(BucketedReadaheadBatchIterator(lens, 13, key=lambda x: x, batch_size=4, seed=2, rank=0, world_size=1, remainder="drop"))
    assert a == b


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(read_ahead=0), "read_ahead"),
        (dict(batch_size=0), "batch_size"),
        (dict(batch_size=2.5), "batch_size"),
        (dict(rank=2, world_size=2), "rank"),
        (dict(remainder="pad"), "remainder"),
        (dict(seed=-1), "seed"),
        (dict(key=3), "key"),
        (dict(read_ahead=2**70), "read_ahead"),
        (dict(batch_size=2**70), "batch_size"),
        (dict(shuffle="yes"), "shuffle"),
        (dict(rank=1.0), "rank"),
    ],
)
def test_iterator_bad_arguments(kwargs, match):
    kw = dict(read_ahead=4, key=len, batch_size=2)
    kw.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        BucketedReadaheadBatchIterator(["a", "bb"], **kw)


def test_bad_items():
    with pytest.raises(ValueError, match="None"):
        list(BucketedReadaheadBatchIterator([1, None, 3], 3, key=lambda x: x, batch_size=2))
    with pytest.raises(ValueError, match="comparable"):
        list(BucketedReadaheadBatchIterator([1, "a", 3], 3, key=lambda x: x, batch_size=2))
    with pytest.raises(ValueError, match="exceeds the batch budget"):
        list(BucketedReadaheadBatchIterator([1, 50, 3], 3, key=lambda x: x, batch_size=lambda x: 40 // x))
    with pytest.raises(TypeError, match="whole number"):
        list(BucketedReadaheadBatchIterator([1, 50, 3], 3, key=lambda x: x, batch_size=lambda x: 2.0))
    with pytest.raises(ValueError, match="boundary_key returned None"):
        list(BucketedReadaheadBatchIterator([1, 2], 3, key=lambda x: x, batch_size=2, boundary_key=lambda x: None))
    with pytest.raises(TypeError, match="iterable"):
        BucketedReadaheadBatchIterator(5, 3, key=lambda x: x, batch_size=2)


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        (([1, 2], 0), dict(batch_size=2), "read_ahead"),
        (([1, 2], 2), dict(), "exactly one"),
        (([1, 2], 2), dict(batch_size=2, max_tokens=4), "exactly one"),
        (([1, 9], 2), dict(max_tokens=4), r"lengths\[1\] = 9 exceeds max_tokens"),
        (([1, 0], 2), dict(batch_size=2), ">= 1"),
        (([1, 2], 2), dict(batch_size=0), "batch_size"),
        (([1.5], 2), dict(batch_size=1), "whole"),
        (([1, 2], 2), dict(batch_size=1, world_size=0), "world_size"),
        (([1, 2], 2**63 - 1), dict(batch_size=1), "read_ahead"),
        (([1, 2], 2**70), dict(batch_size=1), "read_ahead"),
        (([1, 2], 2), dict(batch_size=2**70), "batch_size"),
        (([1, 2], 2), dict(max_tokens=2**70), "max_tokens"),
        (([2**63 - 1, 1], 2), dict(batch_size=1), "2\\*\\*62"),
        (([1, 2], 2), dict(batch_size=1, shuffle=1), "shuffle"),
        (([True, False], 2), dict(batch_size=1), "booleans"),
    ],
)
def test_bucket_bad_input(args, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        bucket(args[0], read_ahead=args[1], **kwargs)


# ---------------------------------------------------------------- pack_stream
def _packers_ready():
    try:
        packlib.bfd_pack([1, 2], 4)
        packlib.ffd_pack([1, 2], 4)
        return True
    except (NotImplementedError, ImportError):
        return False


needs_packers = pytest.mark.skipif(not _packers_ready(), reason="ffd_pack/bfd_pack kernels not available yet")


@needs_packers
@settings(max_examples=30)
@given(
    st.lists(st.integers(1, 32), max_size=150),
    st.integers(1, 60),
    st.sampled_from(["bfd", "ffd"]),
    st.one_of(st.none(), st.integers(1, 4)),
    st.booleans(),
)
def test_pack_stream_properties(lens, read_ahead, method, depth, shuffle):
    items = [("x" * n, i) for i, n in enumerate(lens)]
    packs = list(pack_stream(items, 32, read_ahead=read_ahead, key=lambda t: len(t[0]), method=method, max_sequences_per_pack=depth, shuffle=shuffle))
    flat = [t for p in packs for t in p]
    assert sorted(flat, key=lambda t: t[1]) == items  # every item exactly once
    assert all(sum(len(t[0]) for t in p) <= 32 for p in packs)
    if depth is not None:
        assert all(len(p) <= depth for p in packs)
    # window by window the same packs as the packer itself
    packer = packlib.bfd_pack if method == "bfd" else packlib.ffd_pack
    expected = []
    for s in range(0, len(items) + 1, read_ahead):
        w = items[s : s + read_ahead]
        if w:
            pk = packer([len(t[0]) for t in w], 32, depth)
            expected.append(sorted(tuple(w[i][1] for i in p) for p in pk.to_list()))
    got, pos = [], 0
    for s in range(0, len(items) + 1, read_ahead):
        w = items[s : s + read_ahead]
        if w:
            n = len(packer([len(t[0]) for t in w], 32, depth))
            got.append(sorted(tuple(t[1] for t in p) for p in packs[pos : pos + n]))
            pos += n
    assert got == expected


@needs_packers
def test_pack_stream_resume_every_position_and_errors():
    rng = np.random.default_rng(5)
    items = [int(v) for v in rng.integers(1, 20, 70)]
    ps = lambda src=items, **kw: pack_stream(src, 24, read_ahead=16, key=lambda x: x, seed=3, **kw)  # noqa: E731
    full = list(ps())
    assert [sorted(p) for p in full] != [sorted(p) for p in ps(shuffle=False)] or len(full) < 3
    it = ps()
    for k in range(len(full) + 1):
        fresh = ps()
        fresh.setstate(pickle.loads(pickle.dumps(it.getstate())))
        assert list(fresh) == full[k:]
        if k < len(full):
            assert next(it) == full[k]
    with pytest.raises(ValueError, match="different configuration"):
        pack_stream(items, 25, read_ahead=16, key=lambda x: x).setstate(it.getstate())
    with pytest.raises(ValueError, match="item 16 of the stream"):
        list(pack_stream([1] * 16 + [30], 24, read_ahead=16, key=lambda x: x))
    with pytest.raises(ValueError, match="unknown sequence method 'nf'"):
        pack_stream(items, 24, read_ahead=16, method="nf")
    with pytest.raises(ValueError, match="unknown sequence method 'spfhp'"):
        pack_stream(items, 24, read_ahead=16, method="spfhp")
    with pytest.raises(ValueError, match="read_ahead"):
        pack_stream(items, 24, read_ahead=0)


def test_pack_stream_argument_errors_without_packers():
    with pytest.raises(ValueError, match="max_sequence_length"):
        pack_stream([1], 0, read_ahead=4)
    with pytest.raises(TypeError, match="key"):
        pack_stream([1], 4, read_ahead=4, key=None)
    with pytest.raises(TypeError, match="read_ahead"):
        pack_stream([1], 4)
    with pytest.raises(TypeError, match="method"):
        pack_stream([1], 4, read_ahead=4, method=3)
    with pytest.raises(ValueError, match="read_ahead"):
        pack_stream([1], 4, read_ahead=2**70)


def test_deprecated_positional_arguments_still_work():
    with pytest.warns(DeprecationWarning, match="pass read_ahead=...,"):
        old = list(pack_stream([3, 1, 2, 4], 5, 2, lambda x: x, "ffd", None, 0))
    assert old == list(pack_stream([3, 1, 2, 4], 5, read_ahead=2, key=lambda x: x, method="ffd"))
    with pytest.warns(DeprecationWarning, match="read_ahead, batch_size, max_tokens, shuffle"):
        b = bucket([3, 1, 2, 5], 4, 2, None, False)
    assert b.to_list() == bucket([3, 1, 2, 5], read_ahead=4, batch_size=2, shuffle=False).to_list()
    with pytest.warns(DeprecationWarning, match="pass read_ahead=... by keyword"):
        assert bucket([3, 1, 2, 5], 4, batch_size=2, shuffle=False).to_list() == b.to_list()
    with pytest.raises(TypeError, match="read_ahead"):
        bucket([3, 1, 2, 5], batch_size=2)
    with pytest.raises(TypeError, match="multiple values"):
        bucket([3, 1], 4, 2, batch_size=2)
    with pytest.raises(TypeError, match="at most"):
        bucket([3, 1], 4, 2, None, True, 0, 5, 6)


def test_pack_stream_setstate_validates():
    items = list(range(1, 40))
    ps = pack_stream(items, 40, read_ahead=8, key=lambda x: x, seed=1)
    for _ in range(6):
        next(ps)
    good = ps.getstate()
    assert good["window"] >= 1
    for bad, exc, match in [
        (dict(good, window=-3), ValueError, "window"),
        (dict(good, window=good["window"] + 1), ValueError, "inconsistent"),
        (dict(good, window=1.0), TypeError, "window"),
        (dict(good, num_served=-1), ValueError, "num_served"),
        (dict(good, num_served="2"), TypeError, "num_served"),
        ({k: v for k, v in good.items() if k != "window"}, ValueError, "lacks 'window'"),
        ([1, 2], TypeError, "must be a dict"),
        ("state", TypeError, "must be a dict"),
        (dict(good, packlib_config=3), TypeError, "packlib_config"),
        (dict(good, source_state=7), TypeError, "source_state"),
        (dict(good, source_state={"num_items_yielded": -8}), ValueError, "-8"),
    ]:
        fresh = pack_stream(items, 40, read_ahead=8, key=lambda x: x, seed=1)
        with pytest.raises(exc, match=match):
            fresh.setstate(bad)
    fresh = pack_stream(items, 40, read_ahead=8, key=lambda x: x, seed=1)
    fresh.setstate(good)
    assert list(fresh) == list(ps)


def test_iterator_setstate_wrong_types():
    it = BucketedReadaheadBatchIterator(list(range(30)), 10, key=lambda x: x, batch_size=3, seed=1)
    next(it)
    good = it.getstate()
    with pytest.raises(TypeError, match="must be a dict"):
        it.setstate(5)
    with pytest.raises(ValueError, match="lacks 'num_served'"):
        it.setstate({"source_state": None})
    with pytest.raises(TypeError, match="num_served"):
        it.setstate(dict(good, num_served=None))
    with pytest.raises(ValueError, match="random.Random state"):
        it.setstate(dict(good, random_state=(3, (1, 2), None)))


# ---------------------------------------------------------------- torch adapter
def _forget_packlib_torch(monkeypatch):
    """Drop packlib.torch and its modules, so that the next import sees the torch now in place."""
    for name in [m for m in sys.modules if m == "packlib.torch" or m.startswith("packlib.torch.")]:
        monkeypatch.delitem(sys.modules, name)


def _fake_torch(monkeypatch, worker_info=None):
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch.utils")
    data = types.ModuleType("torch.utils.data")

    class IterableDataset:
        pass

    data.IterableDataset = IterableDataset
    data.get_worker_info = lambda: worker_info
    torch.utils, utils.data = utils, data
    for name, mod in (("torch", torch), ("torch.utils", utils), ("torch.utils.data", data)):
        monkeypatch.setitem(sys.modules, name, mod)
    _forget_packlib_torch(monkeypatch)
    return data


def test_torch_adapter_with_stub(monkeypatch):
    data = _fake_torch(monkeypatch)
    from packlib.torch import CheckpointableDataset

    items = list(range(1, 60))
    make = lambda: BucketedReadaheadBatchIterator(items, 10, key=lambda x: x, batch_size=3, seed=1)  # noqa: E731
    full = list(make())
    ds = CheckpointableDataset(make())
    assert isinstance(ds, data.IterableDataset)
    it = iter(ds)
    head = [next(it) for _ in range(5)]
    sd = ds.state_dict()
    ds2 = CheckpointableDataset(make())
    ds2.load_state_dict(pickle.loads(pickle.dumps(sd)))
    assert head + list(ds2) == full
    with pytest.raises(ValueError, match="state_dict"):
        ds2.load_state_dict({"nope": 1})
    with pytest.raises(TypeError, match="getstate"):
        CheckpointableDataset([1, 2, 3])
    with pytest.raises(TypeError, match="must be a dict"):
        ds2.load_state_dict([1])


def test_torch_adapter_refuses_multiple_workers(monkeypatch):
    _fake_torch(monkeypatch, worker_info=types.SimpleNamespace(num_workers=2, id=0))
    from packlib.torch import CheckpointableDataset

    ds = CheckpointableDataset(BucketedReadaheadBatchIterator([1, 2], 2, key=None, batch_size=1))
    with pytest.raises(ValueError, match="num_workers"):
        next(iter(ds))


def test_torch_adapter_real_torch():
    pytest.importorskip("torch")
    from packlib.torch import CheckpointableDataset

    ds = CheckpointableDataset(BucketedReadaheadBatchIterator(list(range(1, 30)), 8, key=lambda x: x, batch_size=2))
    assert len(list(ds)) == 15


def test_torch_adapter_without_torch(monkeypatch):
    if "torch" in sys.modules and not isinstance(sys.modules["torch"], types.ModuleType):
        pytest.skip("unusual torch module")
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    _forget_packlib_torch(monkeypatch)
    import packlib.torch as pt

    with pytest.raises(ImportError, match="pip install"):
        pt.CheckpointableDataset([])


@pytest.mark.parametrize("remainder", ["repeat", "drop"])
def test_sharded_resume_at_every_position(remainder):
    lens = [int(v) for v in np.random.default_rng(8).integers(1, 30, 90)]
    mk = lambda: BucketedReadaheadBatchIterator(lens, 20, key=lambda x: x, batch_size=lambda x: 60 // x, seed=4, rank=1, world_size=3, remainder=remainder)  # noqa: E731
    full = list(mk())
    it = mk()
    for k in range(len(full) + 1):
        fresh = mk()
        fresh.setstate(it.getstate())
        assert list(fresh) == full[k:]
        if k < len(full):
            assert next(it) == full[k]
    other_rank = BucketedReadaheadBatchIterator(lens, 20, key=lambda x: x, batch_size=lambda x: 60 // x, seed=4, rank=0, world_size=3, remainder=remainder)
    with pytest.raises(ValueError, match="rank"):
        other_rank.setstate(it.getstate())
