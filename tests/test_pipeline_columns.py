"""packlib.pipeline: the columns a Trainer keeps. By default ``pack_files`` writes
``position_ids`` (restarting at every packed sequence) and, where the data has
``completion_mask`` / ``assistant_masks``, ``labels`` with them folded in, as
``pack_dataset`` does; ``position_ids=False, fold_masks=False`` gives the old columns."""
import json

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from packlib.formats.arrow import pack_table  # noqa: E402
from packlib.pipeline import InputError, VerifyError, pack_files, read_metadata  # noqa: E402
from packlib.pipeline import _tasks  # noqa: E402
from tests.naive_pipeline import naive_pack_rows  # noqa: E402

L = 24


def _masked(n, seed, labels=True):
    """Rows with both loss masks (and ``labels`` unless asked not to), some empty, some
    longer than ``L``; a non-list column that is left out."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 2 * L, n)
    lens[::11] = 0
    ids = [rng.integers(1, 30000, k).tolist() for k in lens]
    cols = {"input_ids": pa.array(ids, pa.list_(pa.int32()))}
    if labels:
        cols["labels"] = pa.array([[-x if x % 5 else -100 for x in r] for r in ids], pa.large_list(pa.int64()))
    cols["completion_mask"] = pa.array([(rng.random(len(r)) < 0.7).astype(int).tolist() for r in ids],
                                       pa.list_(pa.int8()))
    cols["assistant_masks"] = pa.array([(rng.random(len(r)) < 0.8).astype(int).tolist() for r in ids],
                                       pa.list_(pa.int64()))
    cols["text"] = pa.array([f"row {i}" for i in range(n)])
    return pa.table(cols)


def _write(tmp_path, table, n_files=2):
    d = tmp_path / "in"
    d.mkdir()
    bounds = np.linspace(0, table.num_rows, n_files + 1).astype(int)
    for i in range(n_files):
        pq.write_table(table.slice(bounds[i], bounds[i + 1] - bounds[i]), d / f"in-{i}.parquet", row_group_size=37)
    return str(d / "*.parquet")


def _rows_of(out):
    return pq.read_table(out).to_pylist()


def _key(row):
    return json.dumps(row, sort_keys=True)


@pytest.mark.parametrize("overflow,method,labels", [("split", "bfd", True), ("truncate", "ffd", True),
                                                    ("split", "nnls", False)])
def test_defaults_add_position_ids_and_fold_masks_token_by_token(tmp_path, overflow, method, labels):
    t = _masked(300, 1, labels)
    res = pack_files(_write(tmp_path, t), L, output=tmp_path / "out", method=method, overflow=overflow,
                     workers=1, rows_per_file=25, seed=2)
    cols = [c for c in t.column_names if c != "text"]
    want = naive_pack_rows(t.select(cols).to_pylist(), cols, L, method=method, overflow=overflow, seed=2,
                           rows_per_file=25, position_ids=True, fold_masks=True)
    got = [pq.read_table(f).to_pylist() for f in res.files]
    assert got == want
    names = cols + ["seq_lengths", "position_ids"] + ([] if labels else ["labels"])
    assert pq.read_schema(res.files[0]).names == names
    for row in (r for f in got for r in f):  # position_ids restart at every seq_lengths boundary
        starts = np.cumsum([0] + row["seq_lengths"][:-1])
        assert [k for k, p in enumerate(row["position_ids"]) if p == 0] == starts.tolist()
    assert res.verified and res.position_ids and res.folded_masks == ("completion_mask", "assistant_masks")
    meta = read_metadata(tmp_path / "out")
    assert meta["position_ids"] is True and meta["folded_masks"] == ["completion_mask", "assistant_masks"]
    assert meta["columns"] == names
    assert "position_ids" in res.summary() and "-100 wherever completion_mask or assistant_masks" in res.summary()


@pytest.mark.parametrize("labels", [True, False])
def test_defaults_equal_pack_table_with_the_trainer_columns(tmp_path, labels):
    t = _masked(200, 3, labels)
    pack_files(_write(tmp_path, t), L, output=tmp_path / "out", overflow="split", workers=1, seed=4)
    ref = pack_table(t, L, overflow="split", position_ids=True, fold_masks=True)
    got = pq.read_table(tmp_path / "out")
    assert got.schema.remove_metadata() == ref.schema.remove_metadata()
    # the same packs (the same packer on the same lengths), in another order across files
    assert sorted(map(_key, got.to_pylist())) == sorted(map(_key, ref.to_pylist()))


def test_opting_out_gives_the_old_columns(tmp_path):
    t = _masked(200, 5)
    inputs = _write(tmp_path, t)
    res = pack_files(inputs, L, output=tmp_path / "out", overflow="split", workers=1, position_ids=False,
                     fold_masks=False)
    cols = ["input_ids", "labels", "completion_mask", "assistant_masks"]
    assert pq.read_schema(res.files[0]).names == cols + ["seq_lengths"]
    ref = pack_table(t, L, overflow="split")
    assert pq.read_table(tmp_path / "out").schema.remove_metadata() == ref.schema.remove_metadata()
    assert sorted(map(_key, _rows_of(tmp_path / "out"))) == sorted(map(_key, ref.to_pylist()))
    meta = read_metadata(tmp_path / "out")
    assert meta["position_ids"] is False and meta["folded_masks"] == [] and meta["columns"] == cols + ["seq_lengths"]
    assert not res.position_ids and res.folded_masks == () and "labels: -100" not in res.summary()
    # one of them alone
    res = pack_files(inputs, L, output=tmp_path / "o2", overflow="split", workers=1, fold_masks=False)
    assert pq.read_schema(res.files[0]).names == cols + ["seq_lengths", "position_ids"]
    assert [r["labels"] for r in _rows_of(tmp_path / "o2")] == [r["labels"] for r in _rows_of(tmp_path / "out")]


def test_a_packed_position_ids_column_is_refused_unless_asked(tmp_path):
    t = pa.table({"input_ids": [[1, 2], [3]], "position_ids": [[0, 1], [0]]})
    inputs = _write(tmp_path, t, 1)
    with pytest.raises(InputError, match=r"column 'position_ids' is packed and position_ids=True.*position_ids=False"):
        pack_files(inputs, 8, output=tmp_path / "out", workers=1)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
    res = pack_files(inputs, 8, output=tmp_path / "out", workers=1, position_ids=False)
    assert pq.read_table(res.files[0]).to_pydict() == {"input_ids": [[1, 2, 3]], "position_ids": [[0, 1, 0]],
                                                       "seq_lengths": [[2, 1]]}
    for bad in ({"position_ids": "yes"}, {"fold_masks": 1}):
        with pytest.raises(TypeError, match="must be True or False"):
            pack_files(inputs, 8, output=tmp_path / "o3", workers=1, **bad)


def test_cli_flags(tmp_path, capsys):
    from packlib.cli import main

    inputs = _write(tmp_path, _masked(80, 6))
    base = ["pack-dataset", inputs, "--seq-length", str(L), "--overflow", "split", "--workers", "1"]
    assert main(base + ["--output", str(tmp_path / "a")]) == 0
    assert "position_ids" in pq.read_schema(str(tmp_path / "a" / "part-00000-of-00001.parquet")).names
    assert main(base + ["--output", str(tmp_path / "b"), "--no-position-ids", "--no-fold-masks"]) == 0
    assert pq.read_table(tmp_path / "b").column_names == ["input_ids", "labels", "completion_mask",
                                                           "assistant_masks", "seq_lengths"]
    capsys.readouterr()
    assert main(base + ["--output", str(tmp_path / "c.npy"), "--format", "megatron-sft", "--no-fold-masks"]) == 2
    assert "--format parquet" in capsys.readouterr().err


def test_verify_checks_the_folded_labels(tmp_path, monkeypatch):
    real = _tasks.assemble_task

    def corrupting(job, f, *args):
        out = real(job, f, *args)
        tab = pq.read_table(job.part_path(f))
        labels = tab["labels"].to_pylist()
        k = next(i for i, v in enumerate(labels[0]) if v == -100)
        labels[0][k] = 7  # a token a mask excludes, trained after all
        tab = tab.set_column(tab.schema.get_field_index("labels"), "labels",
                             pa.array(labels, tab.schema.field("labels").type))
        pq.write_table(tab, job.part_path(f))
        return out

    monkeypatch.setattr(_tasks, "assemble_task", corrupting)
    with pytest.raises(VerifyError):
        pack_files(_write(tmp_path, _masked(100, 7, labels=False)), L, output=tmp_path / "out", overflow="split",
                   workers=1)
