"""Bad input at the blending, bucketing and file-format entry points (issue 15).

Every call ends in one of two outcomes: a ``ValueError``/``TypeError`` with a message, or a
result that passes an exactly-once / consistency check. Inputs that used to crash the
interpreter run in a fresh subprocess, so a crash fails the test instead of the run.
Damaged files (TFRecord, HDF5, blend caches) are flipped, cut and extended at every offset
class and must be refused with a message naming the file -- or read back unchanged.
"""
from __future__ import annotations

import json
import math
import re
import struct
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packlib
from packlib import BlendedIndex, BucketedReadaheadBatchIterator, blend, blend_exhaustive, bucket, pack_stream
from packlib.formats import example as fex
from packlib.formats import tfrecord as tfr
from packlib.formats import varlen

from .fuzz import (
    BAD_SCALARS,
    HUGE_INTS,
    assert_clear_error_or,
    bad_int_array_cases,
    bad_int_arrays,
    bad_scalars,
    run_isolated,
)

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
LENS = np.array([5, 3, 2, 4, 1, 6, 2, 2], dtype=np.int64)
SCALAR_IDS = [label for label, _ in BAD_SCALARS]
SCALARS = [v for _, v in BAD_SCALARS]


# ============================================================== crashes: in a subprocess


def test_bucket_huge_lengths_do_not_crash():
    """``hi - lo + 1`` wrapped in the counting sort's span and wrote out of bounds."""
    run_isolated("""
        import numpy as np, packlib
        try:
            packlib.bucket([2**63 - 1, 1], read_ahead=2, batch_size=1)
            raise SystemExit("accepted a total above 2**62")
        except ValueError as e:
            assert "2**62" in str(e), e
        # spans just inside the limit take the merge-sort path and are exact
        b = packlib.bucket([2**61, 1, 3, 2**61 - 5], read_ahead=4, batch_size=1, shuffle=False)
        assert b.to_list() == [[0], [3], [2], [1]], b.to_list()
        from packlib._kernels.bucket import sort_desc
        keys = np.array([-(2**63), 2**63 - 1, 0, -(2**63), 5], dtype=np.int64)
        for scratch in (np.empty(0, np.int64), np.empty(2, np.int64), np.empty(10, np.int64)):
            assert sort_desc(keys, -(2**63), 2**63 - 1, scratch).tolist() == [1, 4, 2, 0, 3]
    """)


def test_iterator_extreme_int_keys_do_not_crash():
    run_isolated("""
        from packlib import BucketedReadaheadBatchIterator as B
        got = list(B([-(2**62), 2**62, 5], 3, key=lambda x: x, batch_size=1, shuffle=False))
        assert got == [[2**62], [5], [-(2**62)]], got
        edge = [-(2**63), 2**63 - 1, 0, 7, -(2**63)]
        got = list(B(edge, 5, key=lambda x: x, batch_size=2, shuffle=False))
        assert got == [[2**63 - 1, 7], [0, -(2**63)], [-(2**63)]], got
    """)


@pytest.mark.parametrize("hashseed", ["0", "1", "2", "3", "7", "12345"])
def test_iterator_hash_keys_do_not_crash(hashseed):
    """``key=hash`` on strings spans the whole int64 range, differently per PYTHONHASHSEED."""
    run_isolated("""
        import random
        from packlib import BucketedReadaheadBatchIterator as B
        words = [f"w{i}-{random.Random(i).random()}" for i in range(3000)]
        batches = list(B(words, 500, key=hash, batch_size=7, seed=1))
        flat = [w for b in batches for w in b]
        assert sorted(flat) == sorted(words)  # every item exactly once
        for b in batches:
            assert [hash(w) for w in b] == sorted((hash(w) for w in b), reverse=True)
        # the sort is stable and descending, as sorted() would do it
        win = words[:500]
        want = sorted(range(500), key=lambda i: hash(win[i]), reverse=True)
        got = [w for b in B(win, 500, key=hash, batch_size=500, shuffle=False) for w in b]
        assert got == [win[i] for i in want]
    """, env={"PYTHONHASHSEED": hashseed})


def test_tfrecord_huge_last_length_does_not_crash(tmp_path):
    """A last header declaring a huge record with 12-15 bytes left: the unsigned
    ``n - pos - 16`` wrapped and the length check passed."""
    path = tmp_path / "h.tfrecord"
    tfr.write_tfrecord(path, [b"hello", b"xyz"])
    good = path.read_bytes()
    # one fresh interpreter for every damaged file (a crash there fails the test; each case
    # is printed before it runs, so the output names the one that crashed)
    cases = []
    for declared in (2**64 - 1, 2**64 - 5, 2**63, 1, 3):
        head = struct.pack("<Q", declared)
        head += struct.pack("<I", tfr.masked_crc32c(head))
        for extra in range(0, 5 if declared <= 3 else 1):
            case = tmp_path / f"h-{declared}-{extra}.tfrecord"
            case.write_bytes(good + head + b"\x00" * extra)
            cases.append(str(case))
    proc = run_isolated(f"""
        from packlib.formats.tfrecord import read_tfrecord
        for path in {cases!r}:
            print(path, flush=True)
            for verify in (False, True):
                try:
                    read_tfrecord(path, verify=verify)
                except ValueError as e:
                    m = str(e)
                    assert "truncated" in m and "record 2" in m and "byte {len(good)}" in m and path in m, m
                else:
                    raise SystemExit("a truncated file was read: " + path)
    """)
    assert proc.returncode == 0 and proc.stdout.split() == cases
    for declared in (1, 3, 100):
        head = struct.pack("<Q", declared)
        head += struct.pack("<I", tfr.masked_crc32c(head))
        for extra in range(0, declared + 4):
            raw = good + head + b"\x00" * extra
            for verify in (False, True):
                with pytest.raises(ValueError, match="truncated"):
                    tfr.parse_tfrecord_bytes(raw, verify=verify)


# ============================================================== TFRecord files


def _records():
    return [b"first record", b"", bytes(range(256)) * 3, b"\x00\x01"]


def _offset_classes(records):
    """Byte offsets of each part of each record: header (length), length CRC, payload,
    data CRC, and the file's tail (just past the end)."""
    out = {"header": [], "length_crc": [], "payload": [], "data_crc": []}
    pos = 0
    for r in records:
        out["header"] += list(range(pos, pos + 8))
        out["length_crc"] += list(range(pos + 8, pos + 12))
        out["payload"] += list(range(pos + 12, pos + 12 + len(r)))
        out["data_crc"] += list(range(pos + 12 + len(r), pos + 16 + len(r)))
        pos += 16 + len(r)
    return out, pos


@pytest.mark.parametrize("part", ["header", "length_crc", "payload", "data_crc"])
def test_tfrecord_every_flip_is_detected_with_verify(tmp_path, part):
    recs = _records()
    path = tmp_path / "f.tfrecord"
    tfr.write_tfrecord(path, recs)
    good = path.read_bytes()
    classes, size = _offset_classes(recs)
    assert size == len(good)
    for off in classes[part]:
        for bit in (0x01, 0x80):
            bad = bytearray(good)
            bad[off] ^= bit
            path.write_bytes(bytes(bad))
            with pytest.raises(ValueError) as info:
                tfr.read_tfrecord(path)
            msg = str(info.value)
            assert str(path) in msg and "record" in msg and "byte" in msg
            # without verify: framing is still checked; only data damage may pass, and then
            # the records keep their number and sizes
            try:
                back = tfr.read_tfrecord(path, verify=False)
            except ValueError as exc:
                assert str(path) in str(exc)
            else:
                assert part in ("payload", "data_crc")
                assert [len(r) for r in back] == [len(r) for r in recs]


def test_tfrecord_every_cut_says_truncated_or_is_a_prefix(tmp_path):
    recs = _records()
    path = tmp_path / "c.tfrecord"
    tfr.write_tfrecord(path, recs)
    good = path.read_bytes()
    ends = np.cumsum([16 + len(r) for r in recs]).tolist()
    for cut in range(len(good)):
        path.write_bytes(good[:cut])
        for verify in (False, True):
            if cut == 0 or cut in ends:
                back = tfr.read_tfrecord(path, verify=verify)  # a whole number of records
                assert list(back) == recs[: len(back)]
                continue
            with pytest.raises(ValueError) as info:
                tfr.read_tfrecord(path, verify=verify)
            msg = str(info.value)
            assert "truncated" in msg and str(path) in msg, msg
            k = sum(1 for e in ends if e <= cut)
            assert f"record {k} at byte {([0] + ends)[k]}" in msg, msg


@pytest.mark.parametrize("tail", [b"\x00", b"\x00" * 11, b"\x00" * 12, b"\xff" * 15, b"\x00" * 16, bytes(np.random.default_rng(40).integers(0, 256, 40, dtype=np.uint8))])
def test_tfrecord_extended_file_is_refused(tmp_path, tail):
    path = tmp_path / "e.tfrecord"
    tfr.write_tfrecord(path, _records())
    path.write_bytes(path.read_bytes() + tail)
    for verify in (False, True):
        with pytest.raises(ValueError, match=str(path).replace("\\", "\\\\")):
            tfr.read_tfrecord(path, verify=verify)


def test_tfrecord_gzip_damage_is_a_clear_error(tmp_path):
    path = tmp_path / "g.tfrecord.gz"
    tfr.write_tfrecord(path, _records(), compression="gzip")
    good = path.read_bytes()
    for bad in (good[: len(good) // 2], good[:-3], good[:10] + b"\xff" * 20 + good[30:], b"not gzip at all"):
        path.write_bytes(bad)
        with pytest.raises(ValueError, match="g.tfrecord.gz"):
            tfr.read_tfrecord(path, compression="gzip")


@pytest.mark.parametrize("records", [
    [1, 2], [b"ok", 3], ["abc"], [np.array([1.5, 2.5])], [np.arange(3)], [None], [[1, 2]], 5, "abc", b"abc",
    [np.ones((2, 2), np.uint8)], [memoryview(np.arange(3.0))],
], ids=lambda records: re.sub(r" at 0x[0-9a-f]+", "", repr(records)))  # the same ids in every process
def test_write_tfrecord_refuses_non_bytes_and_writes_nothing(tmp_path, records):
    path = tmp_path / "w.tfrecord"
    with pytest.raises(TypeError) as info:
        tfr.write_tfrecord(path, records)
    assert str(info.value)
    assert not path.exists() and not list(tmp_path.iterdir())


def test_write_tfrecord_accepts_every_bytes_like(tmp_path):
    path = tmp_path / "ok.tfrecord"
    recs = [b"a", bytearray(b"bc"), memoryview(b"def"), np.frombuffer(b"gh", np.uint8), np.array([105], np.int8)]
    assert tfr.write_tfrecord(path, recs) == 5
    assert list(tfr.read_tfrecord(path)) == [b"a", b"bc", b"def", b"gh", b"i"]


@FUZZ
@given(st.one_of(bad_scalars(), st.sampled_from(["zip", "GZIP", "", "none", "auto"])), st.sampled_from(["compression", "crc", "verify"]))
def test_read_tfrecord_bad_options(tmp_path_factory, value, option):
    path = tmp_path_factory.mktemp("o") / "o.tfrecord"
    tfr.write_tfrecord(path, [b"x"])
    assert_clear_error_or(lambda: tfr.read_tfrecord(path, **{option: value}), lambda r: list(r) == [b"x"])


@FUZZ
@given(st.binary(max_size=200))
def test_parse_random_bytes(raw):
    assert_clear_error_or(lambda: tfr.parse_tfrecord_bytes(raw, verify=False),
                          lambda r: all(isinstance(x, bytes) for x in r))


# ============================================================== tf.train.Example


@FUZZ
@given(st.binary(max_size=120))
def test_decode_example_random_bytes(raw):
    assert_clear_error_or(lambda: fex.decode_example(raw), lambda d: isinstance(d, dict))


@FUZZ
@given(st.sampled_from(SCALARS + [[1, 2], np.arange(3.0), ["a", "b"], [b"a", 1], np.ones((2, 2)), {"k": 1},
                                  np.array([2**64 - 1], np.uint64), [2**70], [True, False], np.array([1e300])]))
def test_encode_example_bad_values(value):
    def check(data):
        back = fex.decode_example(data)
        assert set(back) == {"f"}
        return True

    assert_clear_error_or(lambda: fex.encode_example({"f": value}), check)


@pytest.mark.parametrize("value", [3, "abc", None, [1, 2], np.arange(3.0)], ids=repr)
def test_decode_example_refuses_non_bytes(value):
    with pytest.raises(TypeError):
        fex.decode_example(value)


def test_not_an_example_names_file_and_record(tmp_path):
    schema = fex.Schema.of({"ids": ("int64", 2)})
    path = tmp_path / "n.tfrecord"
    good = fex.encode_example({"ids": [1, 2]})
    tfr.write_tfrecord(path, [good, b"\x0a\x05\x0a", b"junk"])
    with pytest.raises(ValueError, match=r"n\.tfrecord: record 1 .*not a tf\.train\.Example"):
        schema.decode(tfr.read_tfrecord(path))
    with pytest.raises(ValueError, match=r"n\.tfrecord: record 1: not a valid tf\.train\.Example"):
        fex.decode_example(tfr.read_tfrecord(path)[1], path=str(path), record=1)


@FUZZ
@given(st.sampled_from(bad_int_array_cases(good=(1, 2, 3, 4))), st.sampled_from(["int64", "float"]))
def test_schema_encode_bad_matrices(case, kind):
    label, value = case
    schema = fex.Schema.of({"a": (kind, 2)})
    arr = value
    try:
        arr = np.asarray(value).reshape(-1, 2) if np.asarray(value).size % 2 == 0 and np.asarray(value).ndim == 1 else value
    except (ValueError, TypeError):
        pass

    def encode():
        ints, floats = (arr, np.zeros((np.shape(arr)[0] if np.ndim(arr) == 2 else 0, 0))) if kind == "int64" else \
            (np.zeros((np.shape(arr)[0] if np.ndim(arr) == 2 else 0, 0), np.int64), arr)
        return schema.encode(ints, floats), ints, floats

    def check(out):
        (data, offsets), ints, floats = out
        recs = [data[offsets[i]:offsets[i + 1]].tobytes() for i in range(offsets.size - 1)]
        got_i, got_f = schema.decode(recs)
        if kind == "int64":
            assert np.array_equal(got_i, np.asarray(ints, dtype=np.int64))
        else:
            assert np.array_equal(got_f, np.asarray(floats, dtype=np.float32), equal_nan=True)
        return True

    assert_clear_error_or(encode, check)


@pytest.mark.parametrize("spec", [{"a": ("int32", 2)}, {"a": ("int64", 2.5)}, {"a": ("int64", -1)}, {"a": ("int64", 2**70)},
                                  {"a": "int64"}, {3: ("int64", 1)}, [("a", ("int64", 1))], {"a": ("int64", True)}], ids=repr)
def test_schema_of_bad_spec(spec):
    with pytest.raises((TypeError, ValueError)) as info:
        fex.Schema.of(spec)
    assert str(info.value)


# ============================================================== HDF5

h5py = pytest.importorskip("h5py") if False else None  # noqa: E731 (imported lazily per test)


def _h5():
    return pytest.importorskip("h5py")


TOK = np.arange(1, 40, dtype=np.int64)
DOCS = np.array([0, 5, 12, 20, 39], dtype=np.int64)


@pytest.mark.parametrize("kw", [
    dict(chunk_rows=-1), dict(chunk_rows=0), dict(chunk_rows=1.5), dict(chunk_rows=2**70), dict(pad_id=1.5),
    dict(pad_id=2**40), dict(pad_id=True), dict(compression="zip"), dict(compression=3), dict(max_sequence_length=0),
    dict(max_sequence_length=2.0), dict(max_sequence_length=2**40), dict(packs=[[0]]), dict(packs="packs"),
], ids=repr)
def test_write_hdf5_bad_arguments(tmp_path, kw):
    from packlib.formats.hdf5 import write_hdf5

    _h5()
    args = dict(max_sequence_length=24)
    args.update(kw)
    with pytest.raises((TypeError, ValueError)) as info:
        write_hdf5(tmp_path / "x.h5", TOK, DOCS, **args)
    assert str(info.value)
    assert not list(tmp_path.iterdir())


@FUZZ
@given(st.sampled_from(bad_int_array_cases(good=TOK)), st.sampled_from(["tokens", "doc_offsets"]))
def test_write_hdf5_bad_arrays(tmp_path_factory, case, which):
    from packlib.formats.hdf5 import read_hdf5, write_hdf5

    _h5()
    label, value = case
    path = tmp_path_factory.mktemp("h") / "x.h5"
    tokens, offsets = (value, DOCS) if which == "tokens" else (TOK, value)

    def check(n):
        back = read_hdf5(path)
        ids, mask, labels = back["input_ids"], back["attention_mask"], back["labels"]
        tok = np.asarray(tokens, dtype=np.int64)
        off = np.asarray(offsets, dtype=np.int64)
        for d in range(n):
            doc = tok[off[d]:off[d + 1]]
            k = doc.size - 1
            assert ids[d, :k].tolist() == doc[:-1].tolist() and labels[d, :k].tolist() == doc[1:].tolist()
            assert mask[d].sum() == k
        return True

    assert_clear_error_or(lambda: write_hdf5(path, tokens, offsets, max_sequence_length=40), check)


def _h5_file(tmp_path, packed: bool):
    from packlib.formats.hdf5 import write_hdf5

    path = tmp_path / ("p.h5" if packed else "c.h5")
    packs = packlib.ffd_pack(np.diff(DOCS) - 1, 24) if packed else None
    write_hdf5(path, TOK, DOCS, packs, max_sequence_length=24)
    return path


@pytest.mark.parametrize("packed", [False, True])
def test_hdf5_damage_is_refused_or_harmless(tmp_path, packed):
    """Flip bytes across the whole file (superblock, object headers, chunk index, chunk
    data, tail), cut it, extend it: read_hdf5 raises a ValueError naming the file or
    returns exactly the original examples (a flip in unused bytes)."""
    from packlib.formats.hdf5 import read_hdf5

    _h5()
    path = _h5_file(tmp_path, packed)
    good = path.read_bytes()
    ref = read_hdf5(path)["data"]
    bad_path = tmp_path / "bad.h5"
    offsets = sorted(set(range(0, len(good), 7)) | set(range(0, 200)) | set(range(len(good) - 64, len(good))))
    silent = []
    for off in offsets:
        b = bytearray(good)
        b[off] ^= 0x41
        bad_path.write_bytes(bytes(b))
        try:
            data = read_hdf5(bad_path)["data"]
        except ValueError as exc:
            assert "bad.h5" in str(exc)
            continue
        if data.shape != ref.shape or not np.array_equal(data, ref):
            silent.append(off)
    assert not silent, f"flips at {silent[:10]} changed the examples silently"
    for cut in (0, 8, 100, len(good) // 2, len(good) - 1):
        bad_path.write_bytes(good[:cut])
        with pytest.raises(ValueError, match="bad.h5"):
            read_hdf5(bad_path)
    bad_path.write_bytes(good + b"\x00" * 100)
    try:
        assert np.array_equal(read_hdf5(bad_path)["data"], ref)
    except ValueError as exc:
        assert "bad.h5" in str(exc)


@pytest.mark.parametrize("label, value", BAD_SCALARS, ids=SCALAR_IDS)
@pytest.mark.parametrize("arg", ["start", "stop"])
def test_read_hdf5_bad_range(tmp_path, label, value, arg):
    from packlib.formats.hdf5 import read_hdf5

    _h5()
    path = _h5_file(tmp_path, False)
    ref = read_hdf5(path)["data"]

    def check(out):
        start = value if arg == "start" else 0
        stop = value if arg == "stop" else None
        assert np.array_equal(out["data"], ref[start:stop])
        return True

    assert_clear_error_or(lambda: read_hdf5(path, **{arg: value}), check)


# ============================================================== blending


def _index_ok(size=None, counts=None):
    def check(idx):
        assert isinstance(idx, BlendedIndex)
        if size is not None:
            assert idx.size == size
        assert int(idx.counts.sum()) == idx.size and (idx.counts >= 0).all()
        if counts is not None:
            assert idx.counts.tolist() == list(counts)
        idx.validate()
        return True

    return check


@FUZZ
@given(bad_int_arrays(good=(3, 1, 2)), st.sampled_from(["megatron", "smooth", "shuffled"]))
def test_blend_bad_weights(weights, method):
    assert_clear_error_or(lambda: blend(weights, 50, method=method, seed=1), _index_ok(50))


@FUZZ
@given(st.sampled_from([[0.5, np.nan], [np.inf, 1], [1e308, 1e308], [1e-320, 1e-320], [-0.0, 1], [1, -1e-300],
                        np.array([1, 2], ">f8"), np.array([1, 2, 3, 4], float)[::2], np.float32([1, 2])]),
       st.sampled_from(["megatron", "smooth", "shuffled"]))
def test_blend_float_weights(weights, method):
    assert_clear_error_or(lambda: blend(weights, 50, method=method, seed=1), _index_ok(50))


@FUZZ
@given(bad_scalars(), st.sampled_from(["size", "seed", "method", "materialize", "progress"]))
def test_blend_bad_scalars(value, arg):
    kw = dict(weights=[1, 2, 3], size=40, method="shuffled", seed=0)
    kw[arg] = value
    if arg == "size" and isinstance(value, int) and not isinstance(value, bool) and 0 <= value:
        kw["materialize"] = False  # huge lazy sizes are fine; don't allocate them

    def check(idx):
        assert int(idx.counts.sum()) == idx.size
        if idx.size <= 10**6:
            _index_ok()(idx.materialize())
        else:
            d, s = idx.slice(idx.size - 5, idx.size)
            assert ((d >= 0) & (d < 3)).all() and ((s >= 0) & (s < idx.counts[d])).all()
        return True

    assert_clear_error_or(lambda: blend(**kw), check)


@FUZZ
@given(bad_int_arrays(good=(3, 0, 2)))
def test_blend_exhaustive_bad_sizes(sizes):
    def check(idx):
        want = np.asarray(sizes).astype(np.int64)
        return _index_ok(int(want.sum()), want.tolist())(idx)

    assert_clear_error_or(lambda: blend_exhaustive(sizes), check)


def test_blend_exhaustive_total_never_wraps():
    with pytest.raises(ValueError, match="2\\*\\*62"):
        blend_exhaustive([2**63 - 1, 2**63 - 1, 3])
    with pytest.raises(ValueError, match="2\\*\\*62"):
        blend_exhaustive([2**62, 1])
    with pytest.raises(ValueError, match="memory"):
        blend_exhaustive([2**61, 2**61])


@FUZZ
@given(bad_scalars(), bad_scalars())
def test_blended_index_slice_bad_bounds(start, stop):
    for idx in (blend([1, 2], 30, method="megatron"), blend([1, 2], 30, method="shuffled", materialize=False)):
        full = idx.materialize()

        def check(out, start=start, stop=stop, full=full):
            d, s = out
            assert np.array_equal(d, full.dataset_index[start:stop]) and np.array_equal(s, full.dataset_sample_index[start:stop])
            return True

        assert_clear_error_or(lambda: idx.slice(start, stop), check)


@pytest.mark.parametrize("kw", [
    dict(method="greedy"), dict(counts=[5, 5]), dict(counts=[-1, 31]), dict(size=29), dict(seed=-1), dict(method=3),
    dict(dataset_index=np.zeros(30, np.int64)), dict(dataset_index=None), dict(weights=[1.0]), dict(weights=[np.nan, 1]),
], ids=repr)
def test_blended_index_constructor_checks(kw):
    idx = blend([1, 2], 30, method="megatron")
    args = dict(dataset_index=idx.dataset_index, dataset_sample_index=idx.dataset_sample_index, counts=idx.counts,
                weights=idx.weights, method=idx.method, seed=0, size=30)
    args.update(kw)
    with pytest.raises((TypeError, ValueError)) as info:
        BlendedIndex(**args).validate()
    assert str(info.value)


# ---------------------------------------------------------------- blend caches


def _cache(tmp_path, method="megatron"):
    idx = blend([0.2, 0.5, 0.3], 300, method=method, seed=3)
    desc = idx.save(tmp_path)
    return idx, desc, {n: tmp_path / f"{idx.digest}-BlendedIndex-{n}.npy" for n in ("dataset_index", "dataset_sample_index", "counts")}


def _tamper(path, fn):
    a = np.load(path)
    a = fn(a.copy())
    np.save(path, a)


@pytest.mark.parametrize("method", ["megatron", "smooth", "shuffled"])
@pytest.mark.parametrize("what, fn", [
    ("dataset_index", lambda a: (a.__setitem__(0, 7), a)[1]),            # out-of-range dataset id
    ("dataset_index", lambda a: (a.__setitem__(0, -1), a)[1]),
    ("dataset_index", lambda a: (a.__setitem__(slice(0, 2), a[[1, 0]]), a)[1]),  # swapped: counts still agree
    ("dataset_sample_index", lambda a: (a.__setitem__(3, -5), a)[1]),     # negative sample id
    ("dataset_sample_index", lambda a: (a.__setitem__(int(np.argmax(a)), 0), a)[1]),  # a sample used twice
    ("dataset_sample_index", lambda a: (a.__setitem__(3, 10**6), a)[1]),
    ("counts", lambda a: (a.__setitem__(0, a[0] + 1), a.__setitem__(1, a[1] - 1), a)[2]),  # same total
], ids=["id-7", "id-neg", "swap", "sample-neg", "sample-twice", "sample-huge", "counts"])
def test_blend_cache_tampered_arrays_are_refused(tmp_path, method, what, fn):
    idx, desc, paths = _cache(tmp_path, method)
    _tamper(paths[what], fn)
    for mmap in (True, False):
        with pytest.raises(ValueError) as info:
            BlendedIndex.load(tmp_path, mmap=mmap)
        msg = str(info.value)
        assert idx.digest in msg and "delete" in msg and "rebuild" in msg, msg


def test_blend_cache_tampered_arrays_without_checksum_still_checked(tmp_path):
    """A cache without checksums (or whose checksums were recomputed) is still checked
    for ranges, totals and exactly-once use."""
    idx, desc, paths = _cache(tmp_path)
    d = json.loads(desc.read_text())
    d.pop("checksums")
    desc.write_text(json.dumps(d))
    assert np.array_equal(BlendedIndex.load(tmp_path).dataset_index, idx.dataset_index)
    _tamper(paths["dataset_sample_index"], lambda a: (a.__setitem__(int(np.argmax(a)), 0), a)[1])
    with pytest.raises(ValueError, match="never used|twice"):
        BlendedIndex.load(tmp_path)
    # verify=False trusts the arrays but still checks shapes, dtypes and counts
    assert BlendedIndex.load(tmp_path, verify=False).size == 300


@pytest.mark.parametrize("damage", ["json", "empty", "truncate-npy", "garbage-npy", "missing-npy", "wrong-dtype",
                                    "wrong-shape", "checksums", "not-object", "object-npy"])
def test_blend_cache_corrupt_files_name_the_file(tmp_path, damage):
    idx, desc, paths = _cache(tmp_path)
    if damage == "json":
        desc.write_text(desc.read_text()[:-20])
    elif damage == "empty":
        desc.write_text("")
    elif damage == "not-object":
        desc.write_text("[1, 2]")
    elif damage == "checksums":
        d = json.loads(desc.read_text())
        d["checksums"] = {"dataset_index": 1}
        desc.write_text(json.dumps(d))
    elif damage == "truncate-npy":
        raw = paths["dataset_index"].read_bytes()
        paths["dataset_index"].write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage-npy":
        paths["dataset_sample_index"].write_bytes(b"\x00" * 100)
    elif damage == "missing-npy":
        paths["counts"].unlink()
    elif damage == "wrong-dtype":
        np.save(paths["dataset_index"], np.asarray(idx.dataset_index, np.int64))
    elif damage == "wrong-shape":
        np.save(paths["dataset_index"], np.asarray(idx.dataset_index)[:-1])
    elif damage == "object-npy":
        np.save(paths["counts"], np.array([1, "a"], dtype=object), allow_pickle=True)
    for mmap in (True, False):
        with pytest.raises(ValueError) as info:
            BlendedIndex.load(tmp_path, mmap=mmap)
        msg = str(info.value)
        assert idx.digest in msg and ("delete" in msg or "corrupt" in msg), msg


@pytest.mark.parametrize("which", ["description", "dataset_index", "dataset_sample_index", "counts"])
def test_blend_cache_every_byte_flip_is_refused_or_harmless(tmp_path, which):
    idx, desc, paths = _cache(tmp_path, "shuffled")
    path = desc if which == "description" else paths[which]
    good = path.read_bytes()
    step = 1 if len(good) < 800 else 3
    for off in range(0, len(good), step):
        b = bytearray(good)
        b[off] ^= 0x04
        path.write_bytes(bytes(b))
        try:
            back = BlendedIndex.load(tmp_path, mmap=False)
        except ValueError as exc:
            assert idx.digest in str(exc) or "saved indices" in str(exc)
            continue
        assert np.array_equal(back.dataset_index, idx.dataset_index)
        assert np.array_equal(back.dataset_sample_index, idx.dataset_sample_index)
        assert np.array_equal(back.counts, idx.counts)
    path.write_bytes(good)


@pytest.mark.parametrize("label, value", BAD_SCALARS, ids=SCALAR_IDS)
def test_blend_cache_load_bad_arguments(tmp_path, label, value):
    idx, desc, paths = _cache(tmp_path)
    for kw in (dict(mmap=value), dict(verify=value), dict(weights=[0.2, 0.5, 0.3], size=value),
               dict(weights=value, size=300), dict(weights=[0.2, 0.5, 0.3], size=300, method=value)):
        assert_clear_error_or(lambda: BlendedIndex.load(tmp_path, **kw), _index_ok(300))


# ============================================================== bucketing


def _batches_ok(lengths):
    def check(b):
        lens = np.asarray(lengths).astype(np.int64)
        assert sorted(b.indices.tolist()) == list(range(lens.size))  # every sample exactly once
        assert np.array_equal(b.lengths, lens[b.indices])
        assert int(b.window_batches.sum()) == b.num_batches
        assert b.padded_tokens >= b.num_tokens >= 0
        return True

    return check


@FUZZ
@given(bad_int_arrays(good=LENS), st.sampled_from([dict(batch_size=2), dict(max_tokens=8), dict(max_tokens=2**62)]))
def test_bucket_bad_lengths(lengths, kw):
    assert_clear_error_or(lambda: bucket(lengths, read_ahead=3, seed=1, **kw), _batches_ok(lengths))


@FUZZ
@given(bad_scalars(), st.sampled_from(["read_ahead", "batch_size", "max_tokens", "seed", "shuffle", "rank", "world_size", "remainder"]))
def test_bucket_bad_scalars(value, arg):
    kw = dict(read_ahead=3, batch_size=2, seed=0)
    if arg == "max_tokens":
        kw.pop("batch_size")
    kw[arg] = value

    def check(b):
        if kw.get("world_size", 1) == 1:
            return _batches_ok(LENS)(b)
        return True

    assert_clear_error_or(lambda: bucket(LENS, **kw), check)


@FUZZ
@given(st.lists(st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([-(2**63), 2**63 - 1, 0, 2**62, -(2**62)])),
                max_size=40), st.integers(1, 12), st.integers(1, 5))
def test_iterator_any_int64_keys(keys, read_ahead, batch_size):
    """Any int64 keys (the compiled path), including spans wider than 2**63: each item
    exactly once, each batch sorted longest first, windows in stream order."""
    items = list(enumerate(keys))
    batches = list(BucketedReadaheadBatchIterator(items, read_ahead, key=lambda t: t[1], batch_size=batch_size, seed=2))
    assert sorted(t for b in batches for t in b) == items
    for b in batches:
        assert [t[1] for t in b] == sorted((t[1] for t in b), reverse=True)


@FUZZ
@given(bad_scalars(), st.sampled_from(["read_ahead", "batch_size", "seed", "shuffle", "rank", "world_size", "remainder", "key",
                                       "boundary_key"]))
def test_iterator_bad_scalars(value, arg):
    kw = dict(read_ahead=3, key=lambda x: x, batch_size=2)
    kw[arg] = value

    def check(it):
        flat = [x for b in it for x in b]
        if kw.get("world_size", 1) == 1:
            assert sorted(flat) == sorted(LENS.tolist())
        return True

    assert_clear_error_or(lambda: BucketedReadaheadBatchIterator(LENS.tolist(), **kw), check)


def _stream_ok(items, L):
    def check(ps):
        try:
            packs = list(ps)
        except ValueError as exc:  # the stream is lazy: a too-long item is refused when read
            assert max(items) > L and "exceeds max_sequence_length" in str(exc)
            return True
        assert sorted(x for p in packs for x in p) == sorted(items)
        assert all(sum(p) <= L for p in packs)
        return True

    return check


@FUZZ
@given(bad_scalars(), st.sampled_from(["max_sequence_length", "read_ahead", "max_sequences_per_pack", "seed", "shuffle", "method", "key"]))
def test_pack_stream_bad_scalars(value, arg):
    kw = dict(max_sequence_length=8, read_ahead=4, key=lambda x: x)
    kw[arg] = value
    L = kw["max_sequence_length"]
    exact = isinstance(L, (int, np.integer, np.ndarray)) and not isinstance(L, (bool, np.bool_)) and np.ndim(L) == 0
    assert_clear_error_or(lambda: pack_stream(LENS.tolist(), **kw),
                          _stream_ok(LENS.tolist(), int(L) if exact and np.asarray(L).dtype.kind in "iu" else 8))


_STATE_VALUES = st.one_of(bad_scalars(), st.dictionaries(st.sampled_from(["num_items_yielded", "x"]), bad_scalars(), max_size=2))


@FUZZ
@given(st.sampled_from(["source_state", "window", "num_served", "packlib_config", "<drop>", "<replace>"]), _STATE_VALUES,
       st.integers(0, 7))
def test_pack_stream_setstate_fuzz(key, value, consumed):
    """A state is either refused with a clear error, or resumes to exactly the packs a
    fresh stream serves from that point (never a different stream)."""
    items = list(range(1, 30))
    mk = lambda: pack_stream(items, 40, read_ahead=6, key=lambda x: x, seed=4)  # noqa: E731
    full = list(mk())
    it = mk()
    for _ in range(consumed):
        next(it)
    state = it.getstate()
    if key == "<drop>":
        state = {k: v for k, v in state.items() if k != "source_state"}
    elif key == "<replace>":
        state = value
    else:
        state = dict(state, **{key: value})
    fresh = mk()

    def check(_):
        rest = list(fresh)
        # accepted: it must be a real position of this stream
        assert any(rest == full[k:] for k in range(len(full) + 1)), "resumed to a position that does not exist"
        return True

    try:
        assert_clear_error_or(lambda: fresh.setstate(state), check)
    except ValueError as exc:  # refused lazily, while iterating, is also a clear error
        assert str(exc)


@FUZZ
@given(st.sampled_from(["source_state", "random_state", "num_served", "packlib_config", "<replace>"]), _STATE_VALUES)
def test_iterator_setstate_fuzz(key, value):
    items = list(range(40))
    mk = lambda: BucketedReadaheadBatchIterator(items, 7, key=lambda x: x % 5, batch_size=2, seed=3)  # noqa: E731
    full = list(mk())
    it = mk()
    for _ in range(3):
        next(it)
    state = value if key == "<replace>" else dict(it.getstate(), **{key: value})
    fresh = mk()

    def check(_):
        rest = list(fresh)
        flat = [x for b in rest for x in b]
        assert len(flat) == len(set(flat)) and set(flat) <= set(items)
        return True

    try:
        assert_clear_error_or(lambda: fresh.setstate(state), check)
    except ValueError as exc:
        assert str(exc)


# ============================================================== varlen


VARLEN_ONE = [varlen.cu_seqlens, varlen.max_seqlen, varlen.position_ids, varlen.seq_idx, varlen.varlen_fields,
              varlen.megatron_thd]
VARLEN_ROW = [varlen.mlperf_input_mask, varlen.attention_span, varlen.torchtune_seq_lens, varlen.torchtune_input_pos]


def _varlen_ok(fn, lengths, T=None):
    def check(out):
        lens = np.asarray(lengths).astype(np.int64)
        total = int(lens.sum())
        if fn is varlen.cu_seqlens:
            assert out.tolist() == [0] + np.cumsum(lens).tolist()
        elif fn is varlen.max_seqlen:
            assert out == (int(lens.max()) if lens.size else 0)
        elif fn is varlen.position_ids:
            assert out.tolist() == [p for n in lens.tolist() for p in range(n)]
        elif fn is varlen.seq_idx:
            assert out.tolist() == [i for i, n in enumerate(lens.tolist()) for _ in range(n)]
        elif fn is varlen.varlen_fields:
            assert out["total_tokens"] == total
        elif fn is varlen.megatron_thd:
            assert out["total_tokens"] == total
        elif T is not None:
            assert total <= T
        return True

    return check


@FUZZ
@given(bad_int_arrays(good=(3, 2, 4)), st.sampled_from(VARLEN_ONE + VARLEN_ROW))
def test_varlen_bad_lengths(lengths, fn):
    if fn in VARLEN_ROW:
        assert_clear_error_or(lambda: fn(lengths, 12), _varlen_ok(fn, lengths, 12))
    else:
        assert_clear_error_or(lambda: fn(lengths), _varlen_ok(fn, lengths))


@FUZZ
@given(bad_scalars(), st.sampled_from(VARLEN_ROW + [varlen.torchtune_pack]))
def test_varlen_bad_row_length(value, fn):
    if fn is varlen.torchtune_pack:
        call = lambda: fn([1, 2, 3], [3], value)  # noqa: E731
    else:
        call = lambda: fn([3, 2], value)  # noqa: E731
    assert_clear_error_or(call, lambda out: True)


def test_cu_seqlens_never_wraps():
    with pytest.raises(ValueError, match="2\\*\\*62"):
        varlen.cu_seqlens([2**62] * 4)
    with pytest.raises(ValueError, match="int32"):
        varlen.cu_seqlens([2**30] * 2)


@pytest.mark.parametrize("arg", ["padding_idx", "ignore_index"])
@pytest.mark.parametrize("label, value", BAD_SCALARS, ids=SCALAR_IDS)
def test_torchtune_pack_exact_pad_values(arg, label, value):
    def check(out):
        assert out[("tokens" if arg == "padding_idx" else "labels")][-1] == value
        return True

    assert_clear_error_or(lambda: varlen.torchtune_pack([1, 2, 3], [3], 5, **{arg: value}), check)


@pytest.mark.parametrize("label, value", BAD_SCALARS, ids=SCALAR_IDS)
def test_hf_flattening_batch_bad_options(label, value):
    for kw in (dict(separator_id=value), dict(return_seq_idx=value)):
        assert_clear_error_or(lambda: varlen.hf_flattening_batch([1, 2, 3], [2, 1], **kw), lambda out: True)


def test_row_and_batch_lengths_index_errors():
    packs = packlib.ffd_pack([3, 2, 4], 5)
    with pytest.raises(IndexError):
        varlen.row_lengths(packs, 5)
    with pytest.raises(TypeError):
        varlen.row_lengths(packs, 1.5)
    with pytest.raises(IndexError):
        varlen.batch_lengths(packs, [0, 9])
    with pytest.raises(ValueError, match="whole numbers"):
        varlen.batch_lengths(packs, [0.5])


# ============================================================== torch adapter


def test_torch_adapter_bad_iterator():
    pytest.importorskip("torch")
    from packlib.torch import CheckpointableDataset

    for bad in (3, [1, 2], None, "x"):
        with pytest.raises(TypeError):
            CheckpointableDataset(bad)


_SCHEMA = fex.Schema.of({"ids": ("int64", 3), "w": ("float", 2), "z": ("int64", 0)})
_GOOD = fex.encode_example({"ids": [1, -2, 300], "w": np.array([0.5, -1.0], np.float32), "z": []})


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(_GOOD) - 1), st.integers(0, 255), st.sampled_from(["set", "insert", "delete"])),
                min_size=1, max_size=4))
def test_schema_decode_damaged_records_agree_with_python_decoder(edits):
    """The compiled fixed-schema decoder on damaged records: a clear error, or exactly the
    values the plain-Python decoder finds (never values it does not)."""
    rec = bytearray(_GOOD)
    for pos, byte, op in edits:
        pos = min(pos, len(rec) - 1) if rec else 0
        if op == "set" and rec:
            rec[pos] = byte
        elif op == "insert":
            rec.insert(pos, byte)
        elif rec:
            del rec[pos]
    rec = bytes(rec)

    def check(out):
        ints, floats = out
        ref = fex.decode_example(rec)  # must parse too, with the same values
        assert set(ref) == {"ids", "w", "z"}
        assert ints[0, _SCHEMA.columns("ids")].tolist() == ref["ids"].tolist()
        assert floats[0].view(np.uint32).tolist() == ref["w"].view(np.uint32).tolist()
        return True

    assert_clear_error_or(lambda: _SCHEMA.decode([rec], path="d.tfrecord"), check)


def test_kernels_stay_in_bounds(tmp_path):
    """Run the bucketing, blending and format kernels with NUMBA_BOUNDSCHECK=1 on the
    adversarial inputs above (wide key spans, damaged TFRecord streams and Examples): any
    out-of-bounds access is an IndexError, which fails this test."""
    code = """
import numpy as np, packlib, random, struct
from packlib.formats import tfrecord as tfr, example as fex
from packlib._kernels.bucket import sort_desc
rng = np.random.default_rng(0)
keys = np.array([-(2**63), 2**63 - 1, 0, 5, -(2**63)], dtype=np.int64)
for scratch in (0, 2, 10, 100):
    sort_desc(keys, -(2**63), 2**63 - 1, np.empty(scratch, np.int64))
for trial in range(30):
    lens = rng.integers(1, 2**int(rng.integers(1, 54)), int(rng.integers(0, 200)))
    ra = int(rng.integers(1, 50))
    if lens.size:
        packlib.bucket(lens, read_ahead=ra, batch_size=int(rng.integers(1, 9)), seed=trial)
        packlib.bucket(lens, read_ahead=ra, max_tokens=int(lens.max()) * 3, seed=trial)
words = [str(i) * 3 for i in range(2000)]
list(packlib.BucketedReadaheadBatchIterator(words, 300, key=hash, batch_size=5))
good = tfr.frame_records(np.frombuffer(b"abcdefghij" * 5, np.uint8), np.array([0, 7, 7, 30, 50])).tobytes()
for cut in range(len(good) + 20):
    raw = (good + bytes(range(20)))[:cut]
    for verify in (False, True):
        try:
            tfr.parse_tfrecord_bytes(raw, verify=verify, crc="numba")
        except ValueError:
            pass
head = struct.pack("<Q", 2**64 - 3)
head += struct.pack("<I", tfr.masked_crc32c(head))
for extra in range(6):
    try:
        tfr.parse_tfrecord_bytes(good + head + bytes(extra), crc="numba")
    except ValueError:
        pass
schema = fex.Schema.of({"ids": ("int64", 3), "w": ("float", 2)})
rec = fex.encode_example({"ids": [1, 2, 3], "w": np.array([0.5, 1.5], np.float32)})
data, offsets = schema.encode(np.array([[1, 2, 3]]), np.array([[0.5, 1.5]], np.float32))
for i in range(len(rec)):
    for b in (0, 1, 0x7F, 0x80, 0xFF):
        bad = bytearray(rec); bad[i] = b
        for r in (bytes(bad), bytes(bad[:i]), bytes(bad[:i]) + bytes(bad[i + 1:])):
            try:
                schema.decode([r])
            except ValueError:
                pass
w = rng.lognormal(size=7)
for m in ("megatron", "smooth", "shuffled"):
    for n in (0, 1, 2, 97, 5000):
        packlib.blend(w, n, method=m, seed=3).validate()
lazy = packlib.blend(w, 2**40, method="shuffled", seed=1, materialize=False)
lazy.slice(2**40 - 100, 2**40)
packlib.blend_exhaustive([3, 0, 5, 1]).validate()
print("ok")
"""
    # unoptimised (NUMBA_OPT=0) compiles faster and checks the same: test_packing.py says why
    proc = run_isolated(code, timeout=900, env={"NUMBA_BOUNDSCHECK": "1", "NUMBA_OPT": "0", "NUMBA_CACHE_DIR": str(tmp_path)})
    assert "ok" in proc.stdout


@pytest.mark.parametrize("starts, stops", [([0, 5], [5, 11]), ([-1], [2]), ([3], [2]), ([0], [2, 3]), ([0.5], [2]),
                                           ([2**63 - 1], [2**63 - 1]), ([True], [2])], ids=repr)
def test_records_must_lie_inside_their_buffer(starts, stops):
    """Schema.decode hands starts/stops to a compiled decoder: a Records that points
    outside its buffer is refused when built."""
    with pytest.raises((ValueError, TypeError)) as info:
        recs = tfr.Records(np.zeros(10, np.uint8), starts, stops)
        fex.Schema.of({"a": ("int64", 1)}).decode(recs)
    assert str(info.value)


@pytest.mark.parametrize("names, kinds, widths", [(("a",), ("int64",), (-1,)), (("a",), ("int32",), (1,)),
                                                  (("b", "a"), ("int64", "int64"), (1, 1)), (("a",), ("int64",), (1.5,)),
                                                  (("a", "b"), ("int64",), (1,)), ((3,), ("int64",), (1,))], ids=repr)
def test_schema_constructor_checks(names, kinds, widths):
    with pytest.raises((ValueError, TypeError)) as info:
        fex.Schema(names, kinds, widths)
    assert str(info.value)
