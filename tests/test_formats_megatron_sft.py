"""packlib.formats.megatron_sft: Megatron-Bridge's packed SFT file, checked with its own reader."""
from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from packlib.formats.megatron_sft import METADATA_KEYS, write_packed  # noqa: E402
from tests import naive_megatron_sft as naive  # noqa: E402

MB_MISSING = naive.missing_reason()
needs_mb = pytest.mark.skipif(MB_MISSING is not None, reason=str(MB_MISSING))


def sft_rows(n, seed=0, max_tokens=40, kind="loss_mask"):
    """Tokenised SFT rows (token ids >= 1: 0 is the reader's eos / pad id)."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(2, max_tokens + 1, n)
    rows = []
    for ln in lens:
        ids = rng.integers(1, 50_000, ln).tolist()
        row = {"input_ids": ids}
        if kind == "loss_mask":
            row["loss_mask"] = (rng.random(ln) < 0.6).tolist()
        else:
            row["answer_start_idx"] = int(rng.integers(0, ln + 1))
        rows.append(row)
    return rows


def table_of(rows):
    return pa.Table.from_pylist(rows)


def expected(rows):
    """Each sequence with the loss mask Megatron-Bridge writes for it, as a multiset."""
    return Counter((tuple(r["input_ids"]),
                    tuple(naive.naive_loss_mask(r["input_ids"], r.get("loss_mask"), r.get("answer_start_idx"))))
                   for r in rows)


def written_sequences(path):
    """The sequences of a packed file as (ids, mask) pairs, cut at seq_start_id."""
    out = Counter()
    for p in np.load(path, allow_pickle=True):
        b = p["seq_start_id"] + [len(p["input_ids"])]
        for i in range(len(b) - 1):
            out[(tuple(p["input_ids"][b[i]:b[i + 1]]), tuple(p["loss_mask"][b[i]:b[i + 1]]))] += 1
    return out


@needs_mb
@pytest.mark.parametrize("kind,method,depth", [("loss_mask", "optimal", None), ("answer_start_idx", "optimal", 3),
                                               ("loss_mask", "bfd", 2)])
def test_megatron_reader_reads_every_sequence_once(tmp_path, kind, method, depth):
    L = 64
    rows = sft_rows(300, seed=1, kind=kind)
    out, meta = tmp_path / "train.npy", tmp_path / "meta.json"
    report = write_packed(table_of(rows), L, depth, output=out, metadata_output=meta, method=method, seed=3)
    ds = naive.read_packed(out, L, metadata=meta)
    assert len(ds) == report["packs"]
    items = [ds[i] for i in range(len(ds))]
    got = Counter()
    for it in items:
        b = it["seq_boundaries"]
        assert b[-1] - (len(b) - 1) <= L                       # n - 1 positions per sequence
        assert depth is None or len(b) - 1 <= depth
        for i in range(len(b) - 1):
            got[(tuple(it["input_ids"][b[i]:b[i + 1]]), tuple(it["loss_mask"][b[i]:b[i + 1]]))] += 1
    assert got == expected(rows)
    batch = ds.collate_fn(items)
    for r, it in enumerate(items):
        seqlens = np.diff(it["seq_boundaries"]) - 1
        cu = [0] + np.cumsum(seqlens).tolist()
        width = batch["tokens"].shape[1]
        if cu[-1] != width:
            cu.append(width)
        row_cu = batch["cu_seqlens"][r].tolist()
        assert row_cu[:len(cu)] == cu and set(row_cu[len(cu):]) <= {-1}
        pos = np.concatenate([np.arange(s) for s in seqlens])
        assert batch["position_ids"][r, :pos.size].tolist() == pos.tolist()
        # the mask the model trains on: each sequence's rolled mask without its last position
        train = np.concatenate([np.asarray(it["loss_mask"][a:b - 1], bool)
                                for a, b in zip(it["seq_boundaries"][:-1], it["seq_boundaries"][1:])])
        assert batch["loss_mask"][r, :train.size].tolist() == train.astype(int).tolist()
        assert batch["loss_mask"][r, train.size:].sum() == 0
    assert report["packs_over_bound"] <= 1 if method == "optimal" and depth is None else True
    assert json.loads(meta.read_text())[0] == report["metadata"]


@needs_mb
def test_same_packs_as_megatron_bridge_writes(tmp_path):
    """Sequences longer than half a pack go one to a pack whoever packs them: then every pack
    dict and the metadata must equal Megatron-Bridge's own, value for value and type for type."""
    L = 32
    rng = np.random.default_rng(5)
    rows = []
    for k in range(40):
        n = int(rng.integers(L // 2 + 2, L + 2))
        ids = rng.integers(1, 1000, n).tolist()
        rows.append({"input_ids": ids, "answer_start_idx": int(rng.integers(1, n))} if k % 2 else
                    {"input_ids": ids, "answer_start_idx": 0})
    theirs, their_meta = naive.megatron_write(rows, L, tmp_path / "theirs.npy", algorithm="first_fit_decreasing")
    report = write_packed(table_of(rows), L, output=tmp_path / "ours.npy", metadata_output=tmp_path / "m.json")
    ours = np.load(tmp_path / "ours.npy", allow_pickle=True)
    key = lambda p: p["input_ids"]  # noqa: E731
    assert sorted(ours.tolist(), key=key) == sorted(list(theirs), key=key)
    types = {(k, type(v[0]).__name__) for p in ours for k, v in p.items()}
    assert types == {("input_ids", "int"), ("loss_mask", "bool"), ("seq_start_id", "int")}
    assert report["metadata"] == their_meta and tuple(their_meta) == METADATA_KEYS
    assert json.loads((tmp_path / "m.json").read_text()) == [their_meta]


@needs_mb
def test_loss_mask_rows_match_megatron_fill(tmp_path):
    """The per-token loss_mask rule, on Megatron-Bridge's own fill: same (ids, mask) multiset."""
    rows = sft_rows(200, seed=2, kind="loss_mask")
    theirs, _ = naive.megatron_write(rows, 64, tmp_path / "theirs.npy")
    write_packed(table_of(rows), 64, output=tmp_path / "ours.npy")
    assert written_sequences(tmp_path / "ours.npy") == written_sequences(tmp_path / "theirs.npy") == expected(rows)


def test_metadata_appends_and_same_seed_same_bytes(tmp_path):
    rows = sft_rows(100, seed=3)
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps([{"pack_size": 1}]))
    r1 = write_packed(table_of(rows), 50, output=tmp_path / "a.npy", metadata_output=meta, seed=7)
    write_packed(table_of(rows), 50, output=tmp_path / "b.npy", metadata_output=meta, seed=7)
    assert json.loads(meta.read_text()) == [{"pack_size": 1}, r1["metadata"], r1["metadata"]]
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()
    write_packed(table_of(rows), 50, output=tmp_path / "c.npy", seed=8)
    assert (tmp_path / "c.npy").read_bytes() != (tmp_path / "a.npy").read_bytes()
    assert written_sequences(tmp_path / "c.npy") == written_sequences(tmp_path / "a.npy") == expected(rows)


def test_overflow_truncate_and_split(tmp_path):
    L = 8
    ids = list(range(1, 22))                                  # 21 tokens: 20 positions
    mask = [i % 3 == 0 for i in range(21)]
    t = table_of([{"input_ids": ids, "loss_mask": mask}, {"input_ids": [30, 31, 32], "loss_mask": [False, True, True]}])
    with pytest.raises(ValueError, match=r"row 0 holds 21 tokens, 20 positions .* max_sequence_length = 8"):
        write_packed(t, L, output=tmp_path / "x.npy")
    r = write_packed(t, L, output=tmp_path / "t.npy", overflow="truncate")
    assert r["truncated_tokens"] == 12 and r["sequences"] == 2
    assert ((tuple(ids[:9]), tuple(mask[1:9]) + (False,))) in written_sequences(tmp_path / "t.npy")
    r = write_packed(t, L, output=tmp_path / "s.npy", overflow="split")
    assert r["split_rows"] == 1 and r["sequences"] == 4 and r["tokens"] == 22
    pieces = {s for s in written_sequences(tmp_path / "s.npy") if s[0][0] != 30}
    pieces = sorted(pieces, key=lambda p: p[0][0])
    assert [p[0] for p in pieces] == [tuple(ids[0:9]), tuple(ids[8:17]), tuple(ids[16:21])]
    # consecutive pieces share one token; every label (token 1 ... 20) is trained exactly once
    assert [p[0][0] for p in pieces] == [1, 9, 17]
    labels = [(tok, m) for ids_, m_ in pieces for tok, m in zip(ids_[1:], m_[:-1])]
    assert labels == [(ids[i], mask[i]) for i in range(1, 21)]


def test_hf_dataset_with_index_mapping(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = sft_rows(60, seed=4, kind="answer_start_idx")
    ds = datasets.Dataset.from_list(rows).shuffle(seed=1).select(range(0, 60, 2))
    r = write_packed(ds, 48, output=tmp_path / "d.npy")
    assert r["rows"] == 30
    assert written_sequences(tmp_path / "d.npy") == expected([rows[i] for i in ds._indices.column(0).to_pylist()])


def test_dropped_rows_counted(tmp_path):
    t = pa.table({"input_ids": [[1, 2, 3], [], None, [4]], "answer_start_idx": [1, 0, None, 0]})
    r = write_packed(t, 8, output=tmp_path / "d.npy")
    assert (r["sequences"], r["dropped_empty_rows"], r["dropped_one_token_rows"]) == (1, 2, 1)


BAD = [
    ({"input_ids": [[1, 2]], "labels": [[1, 2]]}, ValueError, "neither a 'loss_mask' nor an 'answer_start_idx'"),
    ({"tokens": [[1, 2]], "loss_mask": [[1, 1]]}, ValueError, "no column 'input_ids'"),
    ({"input_ids": [[1, 2], [3, 4, 5]], "loss_mask": [[1, 1], [1, 1]]}, ValueError,
     "'loss_mask' has 2 values in row 1 but 'input_ids' has 3"),
    ({"input_ids": [[1, 2], [3, 4, 5]], "answer_start_idx": [0, 4]}, ValueError,
     "'answer_start_idx' is 4 in row 1, outside its sequence of 3 tokens"),
    ({"input_ids": [[1, 2], [3, 4, 5]], "answer_start_idx": [-1, 1]}, ValueError, "'answer_start_idx' is -1 in row 0"),
    ({"input_ids": [[1, 2], [3, 4, 5]], "answer_start_idx": [1, None]}, ValueError, "'answer_start_idx' is null in row 1"),
    ({"input_ids": [[1, 2], [3, 4, 5]], "loss_mask": [[1, 0], None]}, ValueError, "'loss_mask' is null in row 1"),
    ({"input_ids": [[1, 2], [3, None, 5]], "answer_start_idx": [1, 1]}, ValueError, "'input_ids' row 1 holds a null"),
    ({"input_ids": [[1, 2], [3, 4, 5]], "loss_mask": [[1, 0], [1, None, 1]]}, ValueError, "'loss_mask' row 1 holds a null"),
    ({"input_ids": [[1.0, 2.0]], "answer_start_idx": [1]}, TypeError, "'input_ids' holds double"),
    ({"input_ids": [[1, 2]], "answer_start_idx": ["1"]}, TypeError, "'answer_start_idx' must hold integers"),
    ({"input_ids": [[1] * 12], "answer_start_idx": [1]}, ValueError, "row 0 holds 12 tokens"),
    ({"input_ids": [[1], []], "answer_start_idx": [0, 0]}, ValueError, "nothing to pack"),
]


@pytest.mark.parametrize("columns,exc,match", BAD, ids=[b[2][:30] for b in BAD])
def test_bad_input_names_row_and_column_and_writes_nothing(tmp_path, columns, exc, match):
    meta = tmp_path / "meta.json"
    meta.write_text("[]")
    with pytest.raises(exc, match=match.replace("(", r"\(")):
        write_packed(pa.table(columns), 10, output=tmp_path / "out.npy", metadata_output=meta)
    assert sorted(os.listdir(tmp_path)) == ["meta.json"] and meta.read_text() == "[]"


def test_bad_arguments(tmp_path):
    t = pa.table({"input_ids": [[1, 2]], "answer_start_idx": [1]})
    (tmp_path / "m.json").write_text('{"a": 1}')
    for kwargs, exc, match in [
        ({"output": tmp_path / "x.bin"}, ValueError, "must end in .npy"),
        ({"output": tmp_path / "no" / "x.npy"}, ValueError, "does not exist"),
        ({"output": tmp_path / "x.npy", "metadata_output": tmp_path / "m.json"}, ValueError, "not the list"),
        ({"output": tmp_path / "x.npy", "overflow": "bfd"}, ValueError, "overflow must be"),
        ({"output": tmp_path / "x.npy", "method": "nope"}, ValueError, "nope"),
    ]:
        with pytest.raises(exc, match=match):
            write_packed(t, 10, **kwargs)
    with pytest.raises(TypeError, match="datasets.Dataset"):
        write_packed({"input_ids": [[1, 2]]}, 10, output=tmp_path / "x.npy")
    assert sorted(os.listdir(tmp_path)) == ["m.json"]


@settings(max_examples=25)
@given(lens=st.lists(st.integers(0, 30), min_size=1, max_size=40), L=st.integers(4, 24),
       depth=st.one_of(st.none(), st.integers(1, 4)), overflow=st.sampled_from(["truncate", "split"]),
       method=st.sampled_from(["optimal", "bfd"]))
def test_every_label_once_property(tmp_path_factory, lens, L, depth, overflow, method):
    """Whatever the lengths: every next-token label (split) or every kept one (truncate) is
    trained exactly once, with its mask, and no pack holds more than L positions."""
    rng = np.random.default_rng(len(lens))
    rows = [{"input_ids": (np.arange(n) + 1000 * k).tolist(), "loss_mask": (rng.random(n) < 0.5).tolist()}
            for k, n in enumerate(lens)]
    if all(n < 2 for n in lens):
        return
    path = tmp_path_factory.mktemp("p") / "x.npy"
    write_packed(table_of(rows), L, depth, output=path, method=method, overflow=overflow)
    got = Counter()
    for p in np.load(path, allow_pickle=True):
        b = p["seq_start_id"] + [len(p["input_ids"])]
        assert len(p["input_ids"]) - (len(b) - 1) <= L and (depth is None or len(b) - 1 <= depth)
        for a, e in zip(b[:-1], b[1:]):
            got.update((tok, m) for tok, m in zip(p["input_ids"][a + 1:e], p["loss_mask"][a:e - 1]))
    want = Counter()
    for r in rows:
        keep = len(r["input_ids"]) if overflow == "split" else min(len(r["input_ids"]), L + 1)
        want.update((r["input_ids"][i], r["loss_mask"][i]) for i in range(1, keep))
    assert got == want


EDGE_INTS = [0, 1, 255, 256, 65535, 65536, -1, -256, 2**31 - 1, -(2**31), 2**31, -(2**31) - 1, 2**62, -(2**63)]


@pytest.mark.parametrize("kind", ["loss_mask", "answer_start_idx"])
def test_pickle_written_from_arrays_loads_as_np_save_would(tmp_path, kind):
    """Every integer width pickle has (and int32 ids): np.load gives the dicts np.save of
    Python lists would, behind the same .npy header."""
    rows = [{"input_ids": EDGE_INTS[k:] + EDGE_INTS[:k], **({"loss_mask": [v % 3 == 0 for v in EDGE_INTS]}
                                                          if kind == "loss_mask" else {"answer_start_idx": k})}
            for k in range(len(EDGE_INTS))]
    write_packed(table_of(rows), 40, 3, output=tmp_path / "a.npy")
    ours = np.load(tmp_path / "a.npy", allow_pickle=True)
    assert written_sequences(tmp_path / "a.npy") == expected(rows)
    assert {type(v).__name__ for p in ours for k in ("input_ids", "seq_start_id") for v in p[k]} == {"int"}
    np.save(tmp_path / "ref.npy", ours.tolist())
    head = len(np.lib.format.magic(1, 0)) + 2
    ref_bytes, our_bytes = (tmp_path / "ref.npy").read_bytes(), (tmp_path / "a.npy").read_bytes()
    hlen = head + int.from_bytes(ref_bytes[8:10], "little")
    assert our_bytes[:hlen] == ref_bytes[:hlen]
    assert np.load(tmp_path / "ref.npy", allow_pickle=True).tolist() == ours.tolist()
    i32 = [v for v in EDGE_INTS if -(2**31) <= v < 2**31]
    small = pa.table({"input_ids": pa.array([i32[k:] + i32[:k] for k in range(len(i32))], pa.list_(pa.int32())),
                      "answer_start_idx": [1] * len(i32)})
    write_packed(small, 20, output=tmp_path / "b.npy")
    got = sorted(s[0] for s in written_sequences(tmp_path / "b.npy"))
    assert got == sorted(tuple(i32[k:] + i32[:k]) for k in range(len(i32)))


def test_pack_dataset_cli_megatron_sft(tmp_path, capsys):
    """``python -m packlib pack-dataset ... --format megatron-sft``: several Parquet files in,
    the same file write_packed writes out; errors name the file and its row."""
    pq = pytest.importorskip("pyarrow.parquet")
    from packlib.cli import main

    rows = sft_rows(90, seed=6, kind="loss_mask")
    for k in range(3):
        pq.write_table(table_of(rows[30 * k:30 * (k + 1)]), tmp_path / f"part{k}.parquet")
    meta = tmp_path / "meta.json"
    argv = ["pack-dataset", str(tmp_path / "*.parquet"), "--format", "megatron-sft", "--output",
            str(tmp_path / "train.npy"), "--metadata-output", str(meta), "--max-sequence-length", "64"]
    assert main(argv) == 0
    assert "written to" in capsys.readouterr().out
    write_packed(table_of(rows), 64, output=tmp_path / "direct.npy")
    assert (tmp_path / "train.npy").read_bytes() == (tmp_path / "direct.npy").read_bytes()
    assert json.loads(meta.read_text())[0]["pack_size"] == 64
    bad = [dict(r) for r in rows[:30]]
    bad[7]["loss_mask"] = bad[7]["loss_mask"][:-1]
    pq.write_table(table_of(bad), tmp_path / "part1.parquet")
    assert main(argv[:5] + [str(tmp_path / "x.npy")] + argv[6:]) == 2
    err = capsys.readouterr().err
    assert "part1.parquet row 7" in err and "'loss_mask'" in err
    assert not (tmp_path / "x.npy").exists()
    assert main(argv + ["--engine", "ray"]) == 2
    assert main(["pack-dataset", str(tmp_path / "*.parquet"), "-o", str(tmp_path / "d"), "--seq-length", "8",
                 "--metadata-output", str(meta)]) == 2


def test_integer_masks_and_sliced_tables(tmp_path):
    """A 0/1 integer mask reads as the boolean one; a slice of a table (its values starting
    mid-byte of the mask's bitmap) packs only its own rows."""
    rows = sft_rows(40, seed=9)
    t = table_of(rows)
    as_int = t.set_column(1, "loss_mask", pa.array([[int(v) for v in r["loss_mask"]] for r in rows],
                                                   pa.list_(pa.int8())))
    write_packed(t, 48, output=tmp_path / "b.npy")
    write_packed(as_int, 48, output=tmp_path / "i.npy")
    assert (tmp_path / "b.npy").read_bytes() == (tmp_path / "i.npy").read_bytes()
    for table in (t, as_int):
        write_packed(table.slice(3, 20), 48, output=tmp_path / "s.npy")
        assert written_sequences(tmp_path / "s.npy") == expected(rows[3:23])


@pytest.mark.parametrize("kind", ["loss_mask", "answer_start_idx"])
def test_batches_of_packs_write_the_same_bytes(tmp_path, monkeypatch, kind):
    """The file is written a batch of packs at a time: any batch size gives the same bytes."""
    from packlib.formats import megatron_sft

    t = table_of(sft_rows(120, seed=11, kind=kind))
    write_packed(t, 40, output=tmp_path / "one.npy", seed=2)
    monkeypatch.setattr(megatron_sft, "_BATCH_TOKENS", 50)
    write_packed(t, 40, output=tmp_path / "many.npy", seed=2)
    assert (tmp_path / "one.npy").read_bytes() == (tmp_path / "many.npy").read_bytes()
