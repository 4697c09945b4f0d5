"""Tests of packlib.blending: Megatron parity, the smooth quota property, shuffled slices."""
import glob
import os
import importlib.util

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import packlib
from packlib import BlendedIndex
from packlib._kernels import blend as K

from . import naive_blend as nb

METHODS = ["megatron", "smooth", "shuffled"]


def weight_vectors(rng, k):
    """The weight families of the issue: lognormal, equal, near-equal, tiny, exact ties."""
    return {
        "lognormal": rng.lognormal(0, 1.5, k),
        "equal": np.ones(k),
        "near_equal": 1 + rng.random(k) * 1e-12,
        "tiny": np.r_[1.0, np.full(k - 1, 1e-7)] if k > 1 else np.ones(1),
        "ties": rng.integers(1, 4, k).astype(float),
        "skewed": rng.random(k) ** 8 + 1e-9,
    }


weights_st = st.lists(
    st.one_of(
        st.floats(1e-6, 1e3, allow_nan=False, allow_infinity=False),
        st.sampled_from([1.0, 2.0, 0.5, 1.0 / 3.0]),
    ),
    min_size=1,
    max_size=12,
)

# --------------------------------------------------------------------------- megatron


def test_megatron_known_answer():
    idx = packlib.blend([0.5, 0.3, 0.2], 10)
    assert idx.dataset_index.tolist() == [0, 1, 2, 0, 1, 0, 2, 0, 1, 0]
    assert idx.dataset_sample_index.tolist() == [0, 0, 0, 1, 1, 2, 1, 3, 2, 4]
    assert idx.dataset_index.dtype == np.int16 and idx.dataset_sample_index.dtype == np.int64


@pytest.mark.parametrize("k", [1, 2, 3, 7, 40, 300])
def test_megatron_parity_families(k):
    rng = np.random.default_rng(k)
    for name, w in weight_vectors(rng, k).items():
        for n in (0, 1, 2, 3, 257, 1500):
            idx = packlib.blend(w, n)
            d, s = nb.megatron_loop(nb.megatron_normalise(w), n)
            assert np.array_equal(idx.dataset_index, d), (name, n)
            assert np.array_equal(idx.dataset_sample_index, s), (name, n)
            assert np.array_equal(idx.counts, np.bincount(d, minlength=k))


@given(weights_st, st.integers(0, 400))
def test_megatron_parity_property(w, n):
    idx = packlib.blend(w, n)
    d, s = nb.megatron_loop(nb.megatron_normalise(w), n)
    assert np.array_equal(idx.dataset_index, d) and np.array_equal(idx.dataset_sample_index, s)


@pytest.mark.parametrize("block", [4, 8, 32])
@pytest.mark.parametrize("theta", [0.0, 5.0, -3.0])
def test_threshold_kernel_equals_loop_large(block, theta):
    """The filtered kernel equals the loop on many datasets and steps, from any starting
    threshold (5.0: every block first fails and retries; -3.0: no filtering at first),
    and when run in chunks that carry the threshold over."""
    rng = np.random.default_rng(block)
    families = (
        rng.lognormal(0, 1, 500),
        rng.lognormal(0, 3, 500),
        1 + rng.random(500) * 1e-9,
        np.ones(500),
        rng.integers(1, 3, 500) * 1.0,
        np.r_[np.full(5, 1e6), rng.random(495) * 1e-6 + 1e-9],
    )
    for w in families:
        w = nb.megatron_normalise(w)
        n = 20000
        c0 = np.zeros(w.size, np.int64)
        d0 = np.empty(n, np.int16)
        s0 = np.empty(n, np.int64)
        K.megatron_loop(w, 0, n, c0, d0, s0)
        c = np.zeros(w.size, np.int64)
        d = np.empty(n, np.int16)
        s = np.empty(n, np.int64)
        state = np.array([theta, 0.02])
        for lo, hi in ((0, 1), (1, 777), (777, n)):
            K.megatron_fill(w, lo, hi, c, d[lo:], s[lo:], block, state)
        assert np.array_equal(d, d0) and np.array_equal(s, s0) and np.array_equal(c, c0)


def test_megatron_normalises_twice():
    """Weights where the second normalisation changes bits: parity needs both."""
    rng = np.random.default_rng(0)
    found = 0
    for _ in range(200):
        w = rng.lognormal(0, 1, 5)
        once = w / w.sum()
        if np.array_equal(once, once / once.sum()):
            continue
        found += 1
        assert np.array_equal(packlib.blend(w, 10).weights, once / once.sum())
    assert found > 0


def test_against_megatron_core_if_available():
    """The real compiled helper from the megatron-core wheel; skipped when absent."""
    h = nb.megatron_helpers()
    if h is None:
        pytest.skip("megatron-core helpers_cpp not found under /tmp")
    rng = np.random.default_rng(3)
    for k in (1, 5, 200):
        for w in weight_vectors(rng, k).values():
            n = 5000
            ww = nb.megatron_normalise(w)
            d = np.empty(n, np.int16)
            s = np.empty(n, np.int64)
            h.build_blending_indices(d, s, ww, k, n, False)
            idx = packlib.blend(w, n)
            assert np.array_equal(idx.dataset_index, d) and np.array_equal(idx.dataset_sample_index, s)
        sizes = rng.integers(1, 50, k)
        d = np.empty(sizes.sum(), np.int16)
        s = np.empty(sizes.sum(), np.int64)
        h.build_exhaustive_blending_indices(d, s, sizes, k)
        e = packlib.blend_exhaustive(sizes)
        assert np.array_equal(e.dataset_index, d) and np.array_equal(e.dataset_sample_index, s)


# --------------------------------------------------------------------------- exhaustive


@given(st.lists(st.integers(0, 30), min_size=1, max_size=8).filter(lambda x: sum(x) > 0))
def test_exhaustive(sizes):
    e = packlib.blend_exhaustive(sizes)
    d, s = nb.exhaustive_loop(sizes)
    assert np.array_equal(e.dataset_index, d) and np.array_equal(e.dataset_sample_index, s)
    assert e.counts.tolist() == list(sizes) and e.size == sum(sizes)
    assert np.array_equal(np.bincount(e.dataset_index, minlength=len(sizes)), sizes)


def test_exhaustive_zero_size_is_skipped():
    e = packlib.blend_exhaustive([3, 0, 2])
    assert 1 not in e.dataset_index.tolist() and e.size == 5


# --------------------------------------------------------------------------- smooth / shuffled


@given(
    st.lists(st.floats(0, 1e3, allow_nan=False), min_size=1, max_size=10).filter(lambda x: sum(x) > 0),
    st.integers(0, 300),
)
def test_smooth_quota_every_prefix(w, n):
    idx = packlib.blend(w, n, method="smooth")
    assert nb.quota_violations(idx.weights, idx.dataset_index) == []
    assert nb.is_quota_apportionment(idx.weights, n, idx.counts)
    assert np.array_equal(np.bincount(idx.dataset_index, minlength=len(w)), idx.counts)
    # smooth numbers each dataset's samples in order
    for i in range(len(w)):
        assert idx.dataset_sample_index[idx.dataset_index == i].tolist() == list(range(idx.counts[i]))
    # and a smaller size gives the first part of the same order
    part = packlib.blend(w, n // 2, method="smooth")
    assert np.array_equal(part.dataset_index, idx.dataset_index[: n // 2])


@pytest.mark.parametrize("k", [2, 5, 60, 400])
def test_smooth_quota_families(k):
    rng = np.random.default_rng(k)
    for name, w in weight_vectors(rng, k).items():
        w = np.asarray(w)
        w[rng.random(k) < 0.1] = 0.0
        if not (w > 0).any():
            w[0] = 1
        n = 3000 if k < 100 else 1200
        idx = packlib.blend(w, n, method="smooth")
        # exact check via integer comparisons (floor(w*s) <= c <= ceil(w*s)) for all prefixes
        from fractions import Fraction

        fr = [Fraction(float(x)) for x in idx.weights]
        onehot = np.zeros((n, k), np.int64)
        onehot[np.arange(n), idx.dataset_index] = 1
        cum = onehot.cumsum(axis=0)
        approx = np.outer(np.arange(1, n + 1), idx.weights)
        close = np.abs(cum - approx) >= 1 - 1e-9  # only these need the exact check
        for s, i in zip(*np.nonzero(close)):
            q = fr[i] * int(s + 1)
            assert q.__floor__() <= cum[s, i] <= q.__ceil__(), (name, s, i)
        assert nb.is_quota_apportionment(idx.weights, n, idx.counts), name


def test_largest_remainder_tie_rule():
    # remainders 0.5, 0.5, 0: the lower index gets the seat
    assert nb.largest_remainder([1, 1], 3).tolist() == [2, 1]
    assert packlib.blend([1, 1], 3, method="smooth").counts.tolist() == [2, 1]
    assert packlib.blend([1, 1, 1], 4, method="shuffled").counts.tolist() == [2, 1, 1]
    # no remainder left: nothing is added (the published x[-0:] bug added 1 to all)
    assert packlib.blend([1, 3], 8, method="shuffled").counts.tolist() == [2, 6]


@given(weights_st, st.integers(0, 2000), st.integers(0, 2**64 - 1))
def test_shuffled_totals_numbering_and_slices(w, n, seed):
    idx = packlib.blend(w, n, method="shuffled", seed=seed)
    assert np.array_equal(idx.counts, nb.largest_remainder(idx.weights, n))
    assert nb.sample_numbering_ok(idx.dataset_index, idx.dataset_sample_index, idx.counts)
    lazy = packlib.blend(w, n, method="shuffled", seed=seed, materialize=False)
    assert lazy.dataset_index is None
    rng = np.random.default_rng(seed % 1000)
    for _ in range(3):
        a, b = sorted(rng.integers(0, n + 1, 2))
        d, s = lazy.slice(int(a), int(b))
        assert np.array_equal(d, idx.dataset_index[a:b]) and np.array_equal(s, idx.dataset_sample_index[a:b])


def test_shuffled_is_a_permutation_and_seeded():
    for n in (1, 2, 3, 10, 99, 1000, 4097):
        for seed in (0, 1, 12345):
            a = int(np.sqrt(max(n - 1, 0))) + 1
            b = -(-n // a)
            keys = np.array([seed * 7 + r + 1 for r in range(4)], np.uint64)
            perm = [K.permute(x, n, a, b, keys) for x in range(n)]
            assert sorted(perm) == list(range(n))
    x = packlib.blend([1, 2, 3], 500, method="shuffled", seed=1).dataset_index
    y = packlib.blend([1, 2, 3], 500, method="shuffled", seed=1).dataset_index
    z = packlib.blend([1, 2, 3], 500, method="shuffled", seed=2).dataset_index
    assert np.array_equal(x, y) and not np.array_equal(x, z)


def test_shuffled_golden():
    """Same seed, same index on every machine (pins the Feistel keys and round function)."""
    idx = packlib.blend([0.5, 0.3, 0.2], 12, method="shuffled", seed=7)
    assert idx.counts.tolist() == [6, 4, 2]
    assert idx.dataset_index.tolist() == GOLDEN_SHUFFLED


GOLDEN_SHUFFLED = [1, 2, 1, 0, 0, 2, 0, 0, 0, 1, 1, 0]


def test_shuffled_looks_uniform():
    """Each dataset's share in each quarter of the stream is near its weight, and the
    first position is spread over the datasets across seeds (a failing order would not)."""
    n = 40000
    idx = packlib.blend([0.5, 0.25, 0.25], n, method="shuffled", seed=11)
    for q in range(4):
        part = idx.dataset_index[q * n // 4 : (q + 1) * n // 4]
        share = np.bincount(part, minlength=3) / part.size
        assert np.allclose(share, [0.5, 0.25, 0.25], atol=0.02)
    lazy = [packlib.blend([1, 1], 1000, method="shuffled", seed=s, materialize=False) for s in range(200)]
    firsts = [int(x.slice(0, 1)[0][0]) for x in lazy]
    assert 70 < sum(firsts) < 130


@pytest.mark.parametrize("method", METHODS)
def test_slices_equal_full(method):
    idx = packlib.blend(np.random.default_rng(1).lognormal(size=20), 5000, method=method, seed=3)
    for a, b in [(0, 0), (0, 5000), (17, 4000), (4999, 5000)]:
        d, s = idx.slice(a, b)
        assert np.array_equal(d, idx.dataset_index[a:b]) and np.array_equal(s, idx.dataset_sample_index[a:b])
    with pytest.raises(ValueError):
        idx.slice(10, 5001)
    with pytest.raises(ValueError):
        idx.slice(10, 5)


@pytest.mark.parametrize("method", METHODS)
def test_deterministic(method):
    a = packlib.blend([3, 1, 2], 777, method=method, seed=5)
    b = packlib.blend([3, 1, 2], 777, method=method, seed=5)
    assert np.array_equal(a.dataset_index, b.dataset_index)
    assert np.array_equal(a.dataset_sample_index, b.dataset_sample_index)
    assert not a.dataset_index.flags.writeable and not a.counts.flags.writeable


# --------------------------------------------------------------------------- input checks


@pytest.mark.parametrize(
    "weights,size,method",
    [
        ([1, np.nan], 10, "megatron"),
        ([1, np.inf], 10, "smooth"),
        ([1, -1], 10, "shuffled"),
        ([0, 0], 10, "smooth"),
        ([], 10, "megatron"),
        ([1, 0], 10, "megatron"),
        ([[1, 2]], 10, "megatron"),
        (["a", "b"], 10, "megatron"),
        ([1, 2], -1, "megatron"),
        ([1, 2], 2.5, "megatron"),
        ([1, 2], True, "megatron"),
        ([1, 2], 10, "greedy"),
    ],
)
def test_bad_input(weights, size, method):
    with pytest.raises((ValueError, TypeError)):
        packlib.blend(weights, size, method=method)


def test_bad_input_other():
    with pytest.raises(ValueError):
        packlib.blend([1, 2], 10, method="megatron", materialize=False)
    with pytest.raises(ValueError):
        packlib.blend([1, 2], 10, method="shuffled", seed=-1)
    for sizes in ([0, 0], [1, -1], [1.5], [], [2**63 - 1, 2**63 - 1, 3], [True]):
        with pytest.raises((ValueError, TypeError)):
            packlib.blend_exhaustive(sizes)


def test_zero_weights_allowed_for_smooth_and_shuffled():
    for method in ("smooth", "shuffled"):
        idx = packlib.blend([1, 0, 2], 300, method=method)
        assert idx.counts[1] == 0 and 1 not in idx.dataset_index.tolist()


def test_index_dtype_switches_at_32767():
    k = 32767
    idx = packlib.blend(np.ones(k), 10, method="shuffled", materialize=False)
    assert idx.slice(0, 10)[0].dtype == np.int32
    assert packlib.blend(np.ones(k), 10).dataset_index.dtype == np.int32
    assert packlib.blend(np.ones(k - 1), 10, method="shuffled").dataset_index.dtype == np.int16


# --------------------------------------------------------------------------- cache and display


@pytest.mark.parametrize("method", METHODS)
def test_save_load_roundtrip(tmp_path, method):
    w = [0.2, 0.5, 0.3]
    idx = packlib.blend(w, 1000, method=method, seed=9)
    path = idx.save(tmp_path)
    assert path.name == f"{idx.digest}-BlendedIndex-description.txt"
    assert (tmp_path / f"{idx.digest}-BlendedIndex-dataset_index.npy").exists()
    for mmap in (True, False):
        back = BlendedIndex.load(tmp_path, mmap=mmap)
        assert np.array_equal(back.dataset_index, idx.dataset_index)
        assert np.array_equal(back.dataset_sample_index, idx.dataset_sample_index)
        assert back.method == method and back.size == 1000 and back.digest == idx.digest
    again = BlendedIndex.load(tmp_path, weights=w, size=1000, method=method, seed=9)
    assert again.digest == idx.digest
    with pytest.raises(ValueError):
        BlendedIndex.load(tmp_path, weights=w, size=1001, method=method, seed=9)


def test_load_detects_tampering(tmp_path):
    idx = packlib.blend([1, 2], 50)
    path = idx.save(tmp_path)
    text = path.read_text().replace('"size": 50', '"size": 51')
    path.write_text(text)
    with pytest.raises(ValueError):
        BlendedIndex.load(tmp_path)
    packlib.blend([1, 3], 50).save(tmp_path)
    with pytest.raises(ValueError):  # two indices: ambiguous
        BlendedIndex.load(tmp_path)


def test_digest_depends_on_every_input():
    base = packlib.blend([1, 2], 10, method="shuffled", seed=1)
    others = [
        packlib.blend([1, 3], 10, method="shuffled", seed=1),
        packlib.blend([1, 2], 11, method="shuffled", seed=1),
        packlib.blend([1, 2], 10, method="shuffled", seed=2),
        packlib.blend([1, 2], 10, method="smooth"),
    ]
    assert len({base.digest, *(o.digest for o in others)}) == 5


def test_repr_and_dict():
    idx = packlib.blend(np.arange(1, 31), 1000, method="shuffled", seed=4)
    r = repr(idx)
    assert "shuffled" in r and "1,000" in r and "datasets=30" in r
    html = idx._repr_html_()
    assert html.startswith("<table>") and "10 more datasets" in html and html.count("<tr>") == 22
    d = idx.to_dict()
    assert d["counts"] == idx.counts.tolist() and d["digest"] == idx.digest and sum(d["counts"]) == 1000


@pytest.mark.parametrize("method", METHODS)
def test_progress_chunks_give_the_same_index(monkeypatch, method):
    import packlib.blending._common as pb

    w = np.random.default_rng(2).lognormal(size=300)
    plain = packlib.blend(w, 5000, method=method, seed=2, progress=False)
    monkeypatch.setattr(pb, "CHUNK", 777)  # many kernel calls, boundaries mid-block
    chunked = packlib.blend(w, 5000, method=method, seed=2, progress=True)
    assert np.array_equal(plain.dataset_index, chunked.dataset_index)
    assert np.array_equal(plain.dataset_sample_index, chunked.dataset_sample_index)


def test_shuffled_threads_and_chunks_agree(monkeypatch):
    """Big builds split over threads (and progress chunks); the result must not depend
    on the split, and slices must still equal the full index."""
    import packlib.blending._common as B
    from packlib.blending._feistel import shuffled_range

    w = np.random.default_rng(3).lognormal(0, 2, 300)
    n = 3_000_001
    full = packlib.blend(w, n, method="shuffled", seed=5)
    assert B.worker_count(n) >= 1
    monkeypatch.setattr(B, "worker_count", lambda n: 1)
    monkeypatch.setattr(B, "CHUNK", 1 << 20)
    one = packlib.blend(w, n, method="shuffled", seed=5, progress=False)
    chunked = shuffled_range(full.counts, n, 5, 0, n, progress=True)
    monkeypatch.setattr(B, "worker_count", lambda n: 3)
    three = packlib.blend(w, n, method="shuffled", seed=5)
    for other in (one, three):
        assert np.array_equal(full.dataset_index, other.dataset_index)
        assert np.array_equal(full.dataset_sample_index, other.dataset_sample_index)
    assert np.array_equal(full.dataset_index, chunked[0]) and np.array_equal(full.dataset_sample_index, chunked[1])
    assert np.array_equal(np.bincount(full.dataset_index, minlength=300), full.counts)
    lazy = packlib.blend(w, n, method="shuffled", seed=5, materialize=False)
    d, s = lazy.slice(1_234_567, 1_300_000)
    assert np.array_equal(d, full.dataset_index[1_234_567:1_300_000])
    assert np.array_equal(s, full.dataset_sample_index[1_234_567:1_300_000])


def test_smooth_two_threads_equal_one(monkeypatch):
    """The two-thread smooth build hands blocks between threads; the index must be the
    single-kernel one exactly, over many blocks and with a short last block (and with a
    progress bar, which the block-by-block build drives)."""
    import packlib.blending._common as B
    import packlib.blending._smooth as BS
    from packlib._kernels.blend_smooth import smooth_fill

    monkeypatch.setattr(B, "worker_count", lambda n: 2)
    monkeypatch.setattr(BS, "THREADED_FROM", 1)
    rng = np.random.default_rng(8)
    cases = ((rng.lognormal(0, 1, 1000), 1_000_003), (rng.lognormal(0, 3, 50), 300_001), ([1.0, 2.0], 5))
    for (w, n), progress in zip(cases, (False, True, False)):
        idx = packlib.blend(w, n, method="smooth", progress=progress)
        d = np.empty(n, idx.dataset_index.dtype)
        s = np.empty(n, np.int64)
        c = np.zeros(len(w), np.int64)
        assert smooth_fill(idx.weights, n, c, d, s) == 0
        assert np.array_equal(idx.dataset_index, d) and np.array_equal(idx.dataset_sample_index, s)
        assert np.array_equal(idx.counts, c)


def test_smooth_two_threads_surface_errors(monkeypatch):
    """A failure in the job-producing thread is raised in the caller, not a hang."""
    import packlib._kernels.blend_smooth as KS
    import packlib.blending._common as B
    import packlib.blending._smooth as BS

    monkeypatch.setattr(B, "worker_count", lambda n: 2)
    monkeypatch.setattr(BS, "THREADED_FROM", 1)

    def broken(*args):
        raise MemoryError("simulated")

    monkeypatch.setattr(KS, "block_jobs", broken)
    with pytest.raises(MemoryError, match="simulated"):
        packlib.blend([1.0, 2.0, 3.0], 200_000, method="smooth")


def test_smooth_progress_one_thread_equal(monkeypatch):
    """With one CPU, a progress bar makes the build go block by block from Python."""
    import packlib.blending._common as B

    monkeypatch.setattr(B, "worker_count", lambda n: 1)
    w = np.random.default_rng(9).lognormal(0, 1, 300)
    a = packlib.blend(w, 400_001, method="smooth", progress=True)
    b = packlib.blend(w, 400_001, method="smooth", progress=False)
    assert np.array_equal(a.dataset_index, b.dataset_index) and np.array_equal(a.dataset_sample_index, b.dataset_sample_index)
    assert np.array_equal(a.counts, b.counts)
