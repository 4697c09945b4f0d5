"""packlib.formats.arrow: packing Arrow tables and Hugging Face datasets (issue 12)."""
import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")

import packlib  # noqa: E402
from packlib.formats import arrow as A  # noqa: E402

from . import naive_arrow as naive  # noqa: E402

# TRL's documented example (trl.data_utils.pack_dataset docstring, trl 1.16)
TRL_EXAMPLE = {
    "input_ids": [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10], [11]],
    "attention_mask": [[1, 1, 1, 0, 0], [1, 0], [1, 1, 0], [1]],
}
TRL_BFD = {
    "input_ids": [[1, 2, 3, 4], [8, 9, 10, 11], [6, 7]],
    "attention_mask": [[1, 1, 1, 0], [1, 1, 0, 1], [1, 0]],
    "seq_lengths": [[4], [3, 1], [2]],
}
TRL_BFD_SPLIT = {
    "input_ids": [[1, 2, 3, 4], [8, 9, 10, 5], [6, 7, 11]],
    "attention_mask": [[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 1]],
    "seq_lengths": [[4], [3, 1], [2, 1]],
}

VALUE_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint64(),
               pa.float16(), pa.float32(), pa.float64()]


def _values(rng, n, t):
    if pa.types.is_floating(t):
        return (rng.standard_normal(n) * 100).astype(t.to_pandas_dtype())
    info = np.iinfo(t.to_pandas_dtype())
    return rng.integers(info.min, info.max, n, dtype=t.to_pandas_dtype(), endpoint=True)


def _make_table(lengths, *, value_type=pa.int8(), large=False, cuts=(), seed=0, nulls=()):
    """A table with an ``ids`` column whose value encodes (row, position), an ``x`` column of
    ``value_type`` and a ``y`` column (float32), chunked at ``cuts``; rows in ``nulls`` are null."""
    rng = np.random.default_rng(seed)
    ids = [[r * 100_000 + j for j in range(n)] for r, n in enumerate(lengths)]
    tot = int(sum(lengths))
    xs = _values(rng, tot, value_type)
    ys = rng.standard_normal(tot).astype(np.float32)
    off = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    x = [xs[off[r]:off[r + 1]].tolist() for r in range(len(lengths))]
    y = [ys[off[r]:off[r + 1]].tolist() for r in range(len(lengths))]
    for r in nulls:
        ids[r] = x[r] = y[r] = None
    mk = pa.large_list if large else pa.list_
    cols = {"ids": pa.array(ids, mk(pa.int64())), "x": pa.array(x, mk(value_type)),
            "y": pa.array(y, mk(pa.float32()))}
    table = pa.table(cols)
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(lengths))), len(lengths)]
    if len(bounds) > 2:
        table = pa.concat_tables([table.slice(a, b - a) for a, b in zip(bounds[:-1], bounds[1:])])
    return table


def _check_packed(table, packed, L, overflow, *, method="bfd", depth=None, position_ids=False, seed=0):
    """Everything the issue promises about a packed table, checked against plain Python."""
    rows = table.to_pydict()
    cols = [c for c in table.column_names]
    lengths = [0 if v is None else len(v) for v in rows["ids"]]
    out = packed.to_pydict()
    # types: same columns and types, then seq_lengths (as TRL), then position_ids
    for c in cols:
        assert packed.schema.field(c).type == table.schema.field(c).type
    large = pa.types.is_large_list(table.schema.field(cols[0]).type)
    assert packed.schema.field("seq_lengths").type == pa.list_(pa.int64() if large else pa.int32())
    assert packed.column_names == cols + ["seq_lengths"] + (["position_ids"] if position_ids else [])
    # no packed row longer than L; seq_lengths add up; depth respected
    for p, lens in enumerate(out["seq_lengths"]):
        assert 1 <= sum(lens) <= L and all(n >= 1 for n in lens)
        assert depth is None or len(lens) <= depth
        for c in cols:
            assert len(out[c][p]) == sum(lens)
    # decode every segment from the ids column: one row, contiguous positions
    got = []
    for p, segs in enumerate(naive.split_packed(out, "ids")):
        for k, seg in enumerate(segs):
            r, s = divmod(seg[0], 100_000)
            assert seg == [r * 100_000 + s + j for j in range(len(seg))], "a segment is one contiguous run of one row"
            got.append((r, s, len(seg)))
            for c in cols[1:]:                     # the other columns moved together
                assert naive.split_packed(out, c)[p][k] == rows[c][r][s:s + len(seg)]
            if position_ids:
                assert naive.split_packed(out, "position_ids")[p][k] == list(range(len(seg)))
    want = naive.segments(lengths, L, overflow)
    assert sorted(got) == sorted(want), "every non-empty row exactly once (truncate: first L; split: all fragments)"
    # order: exactly the packs packlib.methods.pack returns, gathered by plain Python
    segs = naive.segments(lengths, L, overflow)
    packs = packlib.methods.pack([n for _, _, n in segs], L, depth, method=method, seed=seed)
    expect = naive.gather(rows, cols, [[segs[i] for i in p] for p in packs.to_list()], position_ids)
    assert out == expect
    # the report
    rep = A.packing_report(packed)
    dropped, truncated = naive.dropped_and_truncated(lengths, L, overflow)
    assert rep["rows"] == len(lengths) and rep["packed_rows"] == packed.num_rows
    assert rep["dropped_empty_rows"] == dropped and rep["truncated_tokens"] == truncated
    assert rep["tokens"] == sum(n for _, _, n in want) and rep["segments"] == len(want)
    assert rep["row_bound"] == -(-rep["tokens"] // L)
    assert rep["method"] == method and rep["overflow"] == overflow and rep["seed"] == seed
    assert rep["split_rows"] == (sum(1 for n in lengths if n > L) if overflow == "split" else 0)


# --------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------

@st.composite
def tables(draw):
    L = draw(st.integers(1, 12))
    n = draw(st.integers(0, 25))
    lengths = draw(st.lists(st.integers(0, 3 * L), min_size=n, max_size=n))
    nulls = draw(st.sets(st.integers(0, n - 1), max_size=3)) if n else set()
    for r in nulls:
        lengths[r] = 0
    cuts = draw(st.lists(st.integers(0, n), max_size=4))
    vt = draw(st.sampled_from(VALUE_TYPES))
    large = draw(st.booleans())
    table = _make_table(lengths, value_type=vt, large=large, cuts=cuts, seed=n, nulls=sorted(nulls))
    return table, L


@given(tables(), st.sampled_from(["truncate", "split"]), st.sampled_from(["bfd", "ffd"]),
       st.sampled_from([None, 1, 2, 3]), st.booleans())
def test_pack_table_properties(tl, overflow, method, depth, position_ids):
    table, L = tl
    packed = A.pack_table(table, L, method=method, max_sequences_per_pack=depth, overflow=overflow,
                          position_ids=position_ids)
    _check_packed(table, packed, L, overflow, method=method, depth=depth, position_ids=position_ids)


@settings(max_examples=15)
@given(tables(), st.sampled_from(["truncate", "split"]), st.sampled_from(["nnls", "optimal", "lpfhp", "spfhp"]),
       st.sampled_from([None, 2, 3]), st.integers(0, 2**64 - 1))
def test_histogram_methods(tl, overflow, method, depth, seed):
    table, L = tl
    packed = A.pack_table(table, L, method=method, max_sequences_per_pack=depth, overflow=overflow, seed=seed)
    _check_packed(table, packed, L, overflow, method=method, depth=depth, seed=seed)


def test_histogram_method_depth_at_least_capacity():
    table = _make_table([1, 1, 1])
    packed = A.pack_table(table, 1, method="nnls", max_sequences_per_pack=2)
    _check_packed(table, packed, 1, "error", method="nnls", depth=2)


@given(st.lists(st.integers(0, 40), max_size=30), st.integers(1, 12), st.sampled_from(["error", "truncate", "split"]))
def test_make_segments_matches_naive(lengths, L, overflow):
    if overflow == "error" and any(n > L for n in lengths):
        r = next(i for i, n in enumerate(lengths) if n > L)
        with pytest.raises(ValueError, match=rf"row {r} holds {lengths[r]} tokens > max_sequence_length = {L}.*overflow='truncate'"):
            A.make_segments(lengths, L, overflow=overflow)
        return
    seg = A.make_segments(lengths, L, overflow=overflow)
    want = naive.segments(lengths, L, overflow)
    assert list(zip(seg.row.tolist(), seg.start.tolist(), seg.length.tolist())) == want
    assert (seg.dropped_rows, seg.truncated_tokens) == naive.dropped_and_truncated(lengths, L, overflow)
    assert seg.row.dtype == seg.start.dtype == seg.length.dtype == np.int64
    assert seg.num_segments == len(want) and seg.num_tokens == sum(n for _, _, n in want)


@given(tables(), st.data())
def test_gather_packs_any_segments(tl, data):
    """gather_packs copies arbitrary segments (any start, any order), as the pipeline uses it."""
    table, _ = tl
    rows = table.to_pydict()
    lengths = [0 if v is None else len(v) for v in rows["ids"]]
    segs = []
    for r, n in enumerate(lengths):
        if n and data.draw(st.booleans()):
            s = data.draw(st.integers(0, n - 1))
            segs.append((r, s, data.draw(st.integers(1, n - s))))
    segs = data.draw(st.permutations(segs))
    sizes = []
    left = len(segs)
    while left:
        sizes.append(data.draw(st.integers(1, left)))
        left -= sizes[-1]
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    position_ids = data.draw(st.booleans())
    r, s, n = (np.array([x[i] for x in segs], dtype=np.int64) for i in range(3))
    out = A.gather_packs(table, ["x", "ids"], r, s, n, offsets, position_ids=position_ids)
    packs = [segs[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
    assert out.to_pydict() == naive.gather(rows, ["x", "ids"], packs, position_ids)
    assert out.schema.metadata is None


def test_determinism():
    rng = np.random.default_rng(1)
    lengths = rng.integers(0, 30, 300).tolist()
    table = _make_table(lengths, cuts=[17, 100, 101, 250])
    for method in ("bfd", "nnls"):
        a = A.pack_table(table, 24, method=method, overflow="split", seed=5, max_sequences_per_pack=4)
        b = A.pack_table(table, 24, method=method, overflow="split", seed=5, max_sequences_per_pack=4)
        assert a.equals(b, check_metadata=True)
    # seed=None means 0
    assert A.pack_table(table, 24, method="lpfhp", overflow="truncate").equals(A.pack_table(table, 24, method="lpfhp", seed=0, overflow="truncate"),
                                                         check_metadata=True)
    assert A.packing_report(A.pack_table(table, 24, overflow="truncate"))["seed"] == 0


# --------------------------------------------------------------------------------------
# layouts and value types
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("vt", VALUE_TYPES + [pa.date32(), pa.timestamp("ms"), pa.duration("s"), pa.decimal128(30, 2),
                                pa.binary(3)])
@pytest.mark.parametrize("large", [False, True])
def test_value_types_chunked(vt, large):
    lengths = [3, 0, 7, 1, 12, 5, 0, 9, 2, 2]
    rng = np.random.default_rng(0)
    tot = sum(lengths)
    if pa.types.is_floating(vt):
        flat = pa.array(rng.standard_normal(tot)).cast(vt)
    elif pa.types.is_integer(vt) or pa.types.is_decimal(vt):
        flat = pa.array(rng.integers(0, 100, tot)).cast(vt)
    elif pa.types.is_fixed_size_binary(vt):
        flat = pa.array([bytes(rng.integers(0, 256, 3, dtype=np.uint8)) for _ in range(tot)], vt)
    else:                                          # temporal: from the same-width integers
        storage = pa.int32() if vt.bit_width == 32 else pa.int64()
        flat = pa.array(rng.integers(0, 10_000, tot)).cast(storage).view(vt)
    off = np.concatenate(([0], np.cumsum(lengths)))
    cls = pa.LargeListArray if large else pa.ListArray
    col = cls.from_arrays(pa.array(off.astype(np.int64 if large else np.int32)), flat)
    table = pa.table({"ids": pa.array([[r * 100_000 + j for j in range(n)] for r, n in enumerate(lengths)]),
                      "v": col})
    table = pa.concat_tables([table.slice(0, 3), table.slice(3, 4), table.slice(7)])
    packed = A.pack_table(table, 8, overflow="split")
    _check_packed(table, packed, 8, "split")


def test_other_value_types_use_take():
    """bool, strings, nested lists and dictionaries go through pyarrow's take."""
    rows = {
        "ids": [[0, 1, 2], [], [100_000 * 2 + j for j in range(5)], [300_000]],
        "b": [[True, False, True], [], [False] * 5, [True]],
        "s": [["a", "bb", "c"], [], ["d", "e", "f", "g", "h"], ["i"]],
        "n": [[[1], [], [2, 3]], [], [[4]] * 5, [[5, 6]]],
        "z": [[1.5, 2.5, 3.5], [], [0.5] * 5, [7.0]],
        "d": [["x", "y", "x"], [], ["y"] * 5, ["x"]],
    }
    table = pa.table({k: pa.array(v) for k, v in rows.items()})
    table = table.set_column(5, "d", table.column("d").cast(pa.list_(pa.dictionary(pa.int8(), pa.string()))))
    table = pa.concat_tables([table.slice(0, 2), table.slice(2)])
    packed = A.pack_table(table, 4, overflow="split", position_ids=True)
    _check_packed(table, packed, 4, "split", position_ids=True)
    assert packed.schema.field("d").type == table.schema.field("d").type


def test_sliced_and_offset_columns():
    """Slices (non-zero array offsets) of list arrays and of their value arrays."""
    lengths = [4, 0, 6, 2, 9, 3, 1, 8]
    base = _make_table(lengths, value_type=pa.int16())
    ids = pa.array([[(r - 2) * 100_000 + j for j in range(n)] if r >= 2 else [7] * n for r, n in enumerate(lengths)])
    table = base.set_column(0, "ids", ids).slice(2, 5)            # ids encode rows of the slice
    vals = pa.array(np.arange(100, dtype=np.int32)).slice(7, 50)
    col = pa.ListArray.from_arrays(pa.array(np.array([0, 6, 8, 17, 20, 21, 25], np.int32)), vals)
    table = table.append_column("w", col.slice(0, 5))
    _check_packed(table, A.pack_table(table, 7, overflow="split"), 7, "split")
    _check_packed(table, A.pack_table(table, 7, overflow="truncate"), 7, "truncate")


def test_int32_offset_limit_splits_output_chunks(monkeypatch):
    """A list column whose packed values would pass 2**31 - 1 is cut into several chunks."""
    table = _make_table(list(np.random.default_rng(3).integers(0, 20, 200)), value_type=pa.int32())
    want = A.pack_table(table, 16, overflow="split", position_ids=True)
    monkeypatch.setattr(A._gather, "_MAX_OFFSET", 40)
    got = A.pack_table(table, 16, overflow="split", position_ids=True)
    assert got.column("ids").num_chunks > 1
    assert all(c.offsets[-1].as_py() <= 40 for c in got.column("x").chunks)
    assert got.to_pydict() == want.to_pydict()
    with pytest.raises(ValueError, match="large_list"):
        monkeypatch.setattr(A._gather, "_MAX_OFFSET", 10)
        A.pack_table(table, 16, overflow="split")


def test_empty_inputs():
    for lengths in ([], [0, 0], [0]):
        table = _make_table(lengths, value_type=pa.float32(), large=True)
        packed = A.pack_table(table, 5, position_ids=True)
        assert packed.num_rows == 0
        assert packed.schema.field("seq_lengths").type == pa.list_(pa.int64())
        rep = A.packing_report(packed)
        assert rep["packed_rows"] == 0 and rep["dropped_empty_rows"] == len(lengths) and rep["efficiency"] == 1.0


def test_record_batch_and_columns_subset():
    table = _make_table([3, 4, 5]).append_column("source", pa.array(["a", "b", "c"]))
    batch = table.combine_chunks().to_batches()[0]
    packed = A.pack_table(batch, 8, columns=["ids", "x"])
    assert packed.column_names == ["ids", "x", "seq_lengths"]
    assert A.packing_report(packed)["left_out_columns"] == ["y", "source"]
    _check_packed(table.select(["ids", "x"]), packed, 8, "error")


# --------------------------------------------------------------------------------------
# TRL: documented example, live comparison, issue #3887
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("overflow, expected", [("truncate", TRL_BFD), ("split", TRL_BFD_SPLIT)])
def test_trl_documented_example(overflow, expected):
    table = pa.table(TRL_EXAMPLE)
    packed = A.pack_table(table, seq_length=4, overflow=overflow)
    assert packed.to_pydict() == expected          # same rows, even in the same order
    assert packed.schema.field("seq_lengths").type == pa.list_(pa.int32())


def _segment_multiset(d):
    return Counter(tuple(s) for segs in naive.split_packed(d, "input_ids") for s in segs)


def _pack_multiset(d):
    return Counter(tuple(sorted(tuple(s) for s in segs)) for segs in naive.split_packed(d, "input_ids"))


@pytest.mark.parametrize("strategy, overflow", [("bfd", "truncate"), ("bfd_split", "split")])
def test_trl_live(strategy, overflow):
    datasets = pytest.importorskip("datasets")
    try:
        from trl.data_utils import pack_dataset as trl_pack
    except Exception as e:  # trl missing or not importable without torch
        pytest.skip(f"trl does not import: {e}")
    ds = datasets.Dataset.from_dict(TRL_EXAMPLE)
    want = trl_pack(ds, seq_length=4, strategy=strategy)[:]
    got = A.pack_dataset(ds, seq_length=4, overflow=overflow, position_ids=False)[:]
    assert _segment_multiset(got) == _segment_multiset(want)
    assert _pack_multiset(got) == _pack_multiset(want)
    # and on a batch of random rows (one TRL map batch: both whole-batch BFD)
    rng = np.random.default_rng(7)
    lengths = rng.integers(0, 40, 300)
    ids = [list(range(r * 1000, r * 1000 + n)) for r, n in enumerate(lengths)]
    ds = datasets.Dataset.from_dict({"input_ids": ids, "labels": ids})
    want = trl_pack(ds, seq_length=32, strategy=strategy, map_kwargs={"batch_size": 1000})[:]
    got = A.pack_dataset(ds, seq_length=32, overflow=overflow, position_ids=False)[:]
    assert _segment_multiset(got) == _segment_multiset(want)
    assert len(got["input_ids"]) <= len(want["input_ids"])
    assert got.keys() == want.keys()


@pytest.mark.parametrize("n", [1, 2])
def test_trl_issue_3887_shape(n):
    """seq_length = 8192·n + 1 (TRL #3887: nothing was packed) packs normally."""
    L = 8192 * n + 1
    lengths = [8192 * n, 1, 4096, 4097, 8192 * n + 1, 3, 8192 * n + 5] * 3
    table = _make_table(lengths, value_type=pa.int32())
    for overflow in ("truncate", "split"):
        packed = A.pack_table(table, seq_length=L, overflow=overflow)
        _check_packed(table, packed, L, overflow)
        rep = A.packing_report(packed)
        assert rep["packed_rows"] == rep["row_bound"] < len(lengths)


# --------------------------------------------------------------------------------------
# Hugging Face datasets
# --------------------------------------------------------------------------------------

def test_pack_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")
    rng = np.random.default_rng(2)
    lengths = rng.integers(0, 30, 500)
    ids = [list(range(r * 1000, r * 1000 + n)) for r, n in enumerate(lengths)]
    ds = datasets.Dataset.from_dict({"input_ids": ids, "labels": [[-x for x in v] for v in ids]})
    ds.save_to_disk(str(tmp_path / "ds"))
    mm = datasets.load_from_disk(str(tmp_path / "ds"))          # memory-mapped
    packed = A.pack_dataset(mm, 24, overflow="split", position_ids=True)
    assert isinstance(packed, datasets.Dataset)
    table = mm.data.table
    want = A.pack_table(table, 24, overflow="split", position_ids=True)
    assert packed.data.table.select(want.column_names).to_pydict() == want.to_pydict()
    rep = A.packing_report(packed)
    assert rep == A.packing_report(want)
    assert packed.features["seq_lengths"].feature == datasets.Value("int32")
    # an index mapping (shuffle / select) is followed, and the format is kept
    sh = mm.shuffle(seed=3).select(range(400)).with_format("numpy", columns=["input_ids"])
    assert sh._indices is not None
    got = A.pack_dataset(sh, 24, overflow="truncate")          # position_ids by default: Trainer keeps them
    assert got.format["type"] == "numpy" and got.format["columns"] == ["input_ids", "seq_lengths", "position_ids"]
    flat = pa.table(sh.with_format(None)[:])
    assert got.with_format(None)[:] == A.pack_table(flat, 24, overflow="truncate", position_ids=True).to_pydict()
    assert A.packing_report(got)["rows"] == 400
    # DatasetDict -> DatasetDict, split by split
    dd = A.pack_dataset(datasets.DatasetDict(train=ds, test=ds.select(range(10))), seq_length=24, method="lpfhp", overflow="truncate")
    assert isinstance(dd, datasets.DatasetDict) and set(dd) == {"train", "test"}
    assert A.packing_report(dd["test"])["rows"] == 10
    assert dd["train"][:] == A.pack_table(ds.data.table, 24, method="lpfhp", overflow="truncate",
                                          position_ids=True).to_pydict()
    with pytest.raises(TypeError, match="IterableDataset"):
        A.pack_dataset(ds.to_iterable_dataset(), 24)
    with pytest.raises(TypeError, match="pack_dataset"):
        A.pack_table(ds, 24)


# --------------------------------------------------------------------------------------
# the contract functions and bad input
# --------------------------------------------------------------------------------------

def test_select_list_columns():
    t = pa.table({"a": [[1]], "b": pa.array([[2]], pa.large_list(pa.int8())), "c": [1]})
    assert A.select_list_columns(t.select(["a", "b"]).schema) == ["a", "b"]
    assert A.select_list_columns(t.schema, ["b", "a"]) == ["b", "a"]
    assert A.select_list_columns(t.schema) == ["a", "b"]  # the non-list column is left out
    with pytest.raises(TypeError, match="no list or large_list column"):
        A.select_list_columns(t.select(["c"]).schema)
    with pytest.raises(TypeError, match="'c' is not a list column"):
        A.select_list_columns(t.schema, ["a", "c"])
    with pytest.raises(TypeError, match=r"columns=\['a'\]"):
        A.select_list_columns(t.schema, "a")
    with pytest.raises(ValueError, match="no column 'q'"):
        A.select_list_columns(t.schema, ["q"])
    with pytest.raises(ValueError, match="twice"):
        A.select_list_columns(t.schema, ["a", "a"])
    with pytest.raises(ValueError, match="empty"):
        A.select_list_columns(t.schema, [])
    with pytest.raises(TypeError, match="column names"):
        A.select_list_columns(t.schema, [1])
    with pytest.raises(TypeError, match="Schema"):
        A.select_list_columns({"a": 1})
    with pytest.raises(ValueError, match="several columns named 'a'"):
        A.select_list_columns(pa.table([pa.array([[1]]), pa.array([[1]])], names=["a", "a"]).schema)
    t2 = pa.table({"input_ids": [[1]], "seq_lengths": [[1]]})
    with pytest.raises(ValueError, match=r"seq_lengths.*columns=\['input_ids'\]"):
        A.select_list_columns(t2.schema)


def test_row_lengths_and_mismatch():
    t = pa.concat_tables([pa.table({"a": [[1, 2], None], "b": [[1, 2], []]}),
                          pa.table({"a": [[3], [4, 5]], "b": [[3], [4]]})])
    with pytest.raises(ValueError, match=r"column 'b' has 1 values in row 3 but column 'a' has 2"):
        A.row_lengths(t, ["a", "b"])
    with pytest.raises(ValueError, match="row 3"):
        A.pack_table(t, 4)
    got = A.row_lengths(t, ["a"])
    assert got.dtype == np.int64 and got.tolist() == [2, 0, 1, 2]


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(max_sequence_length=0), ValueError, "max_sequence_length must be >= 1"),
    (dict(seq_length=0), ValueError, "seq_length must be >= 1"),
    (dict(seq_length=2.5), TypeError, "seq_length"),
    (dict(), TypeError, "max_sequence_length .* is required"),
    (dict(max_sequence_length=4, seq_length=4), TypeError, "not both"),
    (dict(seq_length=4, method="best"), ValueError, "unknown method 'best'"),
    (dict(seq_length=4, method=3), TypeError, "method"),
    (dict(seq_length=4, overflow="bfd_split"), ValueError, "overflow='split'"),
    (dict(seq_length=4, overflow=None), TypeError, "overflow"),
    (dict(seq_length=4, max_sequences_per_pack=0), ValueError, "max_sequences_per_pack"),
    (dict(seq_length=4, seed=-1), ValueError, "seed"),
    (dict(seq_length=4, position_ids="yes"), TypeError, "position_ids"),
    (dict(seq_length=4, columns=["nope"]), ValueError, "no column 'nope'"),
])
def test_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        A.pack_table(pa.table(TRL_EXAMPLE), **kwargs)


def test_bad_inputs():
    with pytest.raises(TypeError, match="pyarrow.Table"):
        A.pack_table(TRL_EXAMPLE, 4)
    t = pa.table({"position_ids": [[1, 2]], "a": [[1, 2]]})
    with pytest.raises(ValueError, match="position_ids"):
        A.pack_table(t, 4, position_ids=True)
    assert A.pack_table(t, 4).column_names == ["position_ids", "a", "seq_lengths"]
    with pytest.raises(ValueError, match=">= 0"):
        A.make_segments([1, -1], 4)
    with pytest.raises(ValueError, match="max_sequence_length"):
        A.make_segments([1], 0)
    t = pa.table(TRL_EXAMPLE)
    ok = dict(row=[0, 1], start=[0, 0], length=[5, 2], pack_offsets=[0, 1, 2])
    assert A.gather_packs(t, ["input_ids"], **ok).to_pydict()["input_ids"] == [[1, 2, 3, 4, 5], [6, 7]]
    for bad, match in [(dict(row=[0, 4]), r"row\[1\] = 4"), (dict(length=[6, 2]), "segment 0"),
                       (dict(start=[0, -1]), "segment 1"), (dict(length=[5, 0]), "segment 1"),
                       (dict(pack_offsets=[0, 3]), "pack_offsets"), (dict(pack_offsets=[0, 2, 1, 2]), "pack_offsets"),
                       (dict(start=[0]), "one entry per segment")]:
        with pytest.raises(ValueError, match=match):
            A.gather_packs(t, ["input_ids"], **{**ok, **bad})


def test_report_access():
    packed = A.pack_table(pa.table(TRL_EXAMPLE), seq_length=4, overflow="truncate")
    meta = json.loads(packed.schema.metadata[b"packlib"])
    assert meta == A.packing_report(packed) == A.packing_report(packed.schema)
    assert meta["rows"] == 4 and meta["packed_rows"] == 3 and meta["truncated_tokens"] == 1
    assert meta["efficiency"] == pytest.approx(10 / 12)
    with pytest.raises(ValueError, match="no packing report"):
        A.packing_report(pa.table(TRL_EXAMPLE))
    assert packlib.formats.pack_table is A.pack_table


@pytest.mark.parametrize("cuts_a, cuts_b", [((2, 3), (1, 2)), ((1,), (3,)), ((), (1, 2, 3)), ((1, 2, 3), (1, 2, 3))])
def test_columns_with_different_chunk_layouts(cuts_a, cuts_b):
    """Each column is read through its own chunks (rows of equal length make equal offsets)."""
    lengths = [3, 3, 3, 3]
    ids = [[r * 100_000 + j for j in range(n)] for r, n in enumerate(lengths)]
    other = [[-(r * 100 + j) for j in range(n)] for r, n in enumerate(lengths)]

    def chunked(rows, cuts):
        b = [0, *cuts, len(rows)]
        return pa.chunked_array([pa.array(rows[x:y], pa.list_(pa.int32())) for x, y in zip(b[:-1], b[1:])])

    table = pa.table({"ids": chunked(ids, cuts_a), "v": chunked(other, cuts_b)})
    for overflow in ("truncate", "split"):
        _check_packed(table, A.pack_table(table, 4, overflow=overflow), 4, overflow)
        _check_packed(table, A.pack_table(table, 2, overflow=overflow), 2, overflow)


def test_null_tokens_are_refused_with_their_row_and_null_rows_are_counted():
    """Issue 21: a null token came out in the packed rows; a null row is dropped and counted."""
    table = pa.table({"ids": pa.array([[1, 2], [3, None, 5], [6]]), "labels": pa.array([[1, 2], [3, 4, 5], [6]])})
    with pytest.raises(ValueError, match=r"column 'ids' row 1 holds a null token \(position 1\)"):
        A.pack_table(table, 8)
    chunked = pa.table({"ids": pa.chunked_array([pa.array([[1], [2]]), pa.array([[3], [4, None]])])})
    with pytest.raises(ValueError, match="column 'ids' row 3 holds a null token"):
        A.pack_table(chunked, 8)
    nested = pa.table({"ids": pa.array([[[1], None], [[2]]])})
    with pytest.raises(ValueError, match="row 0 holds a null token"):
        A.pack_table(nested, 8)
    # null rows: dropped like empty ones, counted in the report
    with_null_rows = pa.table({"ids": pa.array([[1, 2], None, [], [3]]), "text": ["a", "b", "c", "d"]})
    packed = A.pack_table(with_null_rows, 8)
    rep = A.packing_report(packed)
    assert rep["dropped_empty_rows"] == 2 and rep["dropped_null_rows"] == 1
    assert packed.column("ids").to_pylist() == [[1, 2, 3]] and packed.column("ids").null_count == 0


def test_non_list_columns_are_left_out_and_reported():
    """Issue 21: one rule for pack_table, pack_dataset and pack_files: a non-list column is
    left out of the packed table (they cannot be concatenated) and listed in the report."""
    table = pa.table({"ids": pa.array([[1, 2], [3]]), "text": ["a", "b"], "score": [0.5, 0.25]})
    packed = A.pack_table(table, 4)
    assert packed.column_names == ["ids", "seq_lengths"]
    assert A.packing_report(packed)["left_out_columns"] == ["text", "score"]
    with pytest.raises(TypeError, match="column 'text' is not a list column"):
        A.pack_table(table, 4, columns=["ids", "text"])  # named explicitly: still an error


# --------------------------------------------------------------------------------------
# What feeds a model: token types, and masks kept aligned with their tokens
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("column, values, what", [
    ("input_ids", [[], ["a", "b", "c"], ["d"]], "string"),
    ("input_ids", [[], [1.0, 2.0, 3.0], [3.5]], "double"),
    ("labels", [[], [3.0, 4.0, 5.0], [6.0]], "double"),
    ("completion_mask", [[], [0.0, 1.0, 1.0], [1.0]], "double"),
    ("attention_mask", [[], ["1", "1", "1"], ["1"]], "string"),
])
def test_token_columns_of_strings_or_floats_are_refused(column, values, what):
    cols = {"input_ids": [[], [3, 4, 5], [6]], column: values}
    table = pa.table(cols)
    with pytest.raises(TypeError, match=f"column '{column}' holds {what}.*row 1"):
        A.pack_table(table, 4, overflow="split")
    datasets = pytest.importorskip("datasets")
    with pytest.raises(TypeError, match=f"column '{column}' holds {what}.*row 1"):
        A.pack_dataset(datasets.Dataset(table), 4, overflow="split")


def test_boolean_masks_and_other_columns_of_any_type_pack():
    table = pa.table({"input_ids": [[1, 2, 3], [4]], "completion_mask": [[False, True, True], [True]],
                      "score": [[0.5, 1.5, 2.5], [3.5]]})
    packed = A.pack_table(table, 4)
    assert packed.column("completion_mask").to_pylist() == [[False, True, True, True]]


@pytest.mark.parametrize("overflow", ["split", "truncate"])
def test_masks_stay_aligned_with_their_tokens(overflow):
    """completion_mask / assistant_masks / attention_mask move with input_ids through split and
    truncate: every packed token keeps its own mask values."""
    rng = np.random.default_rng(11)
    lengths = rng.integers(1, 30, 60)
    ids = [[r * 1000 + j for j in range(n)] for r, n in enumerate(lengths)]
    masks = {m: [rng.integers(0, 2, n).tolist() for n in lengths]
             for m in ("completion_mask", "assistant_masks", "attention_mask")}
    table = pa.table({"input_ids": ids, **masks})
    packed = A.pack_table(table, 12, overflow=overflow).to_pydict()
    for r, row in enumerate(packed["input_ids"]):
        for k, tok in enumerate(row):
            src, pos = divmod(tok, 1000)
            for m in masks:
                assert packed[m][r][k] == masks[m][src][pos]
    if overflow == "split":
        assert sum(map(len, packed["input_ids"])) == int(lengths.sum())


def test_a_mask_of_another_length_names_the_row():
    table = pa.table({"input_ids": [[1, 2, 3], [4, 5]], "completion_mask": [[0, 1, 1], [1]]})
    with pytest.raises(ValueError, match="'completion_mask' has 1 values in row 1 but column 'input_ids' has 2"):
        A.pack_table(table, 4)
