"""packlib.pipeline: out-of-core packing on the local engine (always) and Ray (when installed)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import packlib  # noqa: E402
from packlib.pipeline import InputError, VerifyError, WorkerDied, pack_files  # noqa: E402
from packlib.pipeline import _tasks  # noqa: E402
from tests.naive_pipeline import naive_pack_rows  # noqa: E402
from tests.pipeline_vision import CARRY, vision_table, write_shards  # noqa: E402
from tests.procs import ray_to_itself  # noqa: E402

L = 64


def _rows(n, seed, max_len=90):
    rng = np.random.default_rng(seed)
    lens = np.clip(rng.lognormal(3.0, 0.9, n).astype(int), 0, max_len)
    lens[::17] = 0  # some empty rows
    ids = [rng.integers(0, 30000, k).astype(np.int32) for k in lens]
    return {
        "input_ids": pa.array(ids, pa.list_(pa.int32())),
        "labels": pa.array([(-x).astype(np.int64) for x in ids], pa.large_list(pa.int64())),
        "text": pa.array([f"row {i}" for i in range(n)]),
    }


def _write(d, n_files, n_rows=1200, seed=0):
    """The same rows written as n_files Parquet files (several row groups each)."""
    t = pa.table(_rows(n_rows, seed))
    d.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, n_rows, n_files + 1).astype(int)
    paths = []
    for i in range(n_files):
        p = d / f"in-{i:03d}.parquet"
        pq.write_table(t.slice(bounds[i], bounds[i + 1] - bounds[i]), p, row_group_size=97)
        paths.append(str(p))
    return t, paths


def _read_files(result):
    return [pq.read_table(f).to_pylist() for f in result.files]


def _parts(out):
    return {n: (out / n).read_bytes() for n in sorted(os.listdir(out)) if n.startswith("part-")}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("pipe")
    t, paths = _write(d / "three", 3)
    return d, t, paths


@pytest.mark.parametrize("overflow,method,depth", [("truncate", "bfd", None), ("split", "nnls", 3), ("split", "ffd", None)])
def test_matches_naive_reference(data, tmp_path, overflow, method, depth):
    d, t, paths = data
    res = pack_files(paths, L, depth, output=tmp_path / "out", method=method, overflow=overflow, workers=1,
                     rows_per_file=40, seed=5)
    cols = ["input_ids", "labels"]
    want = naive_pack_rows(t.select(cols).to_pylist(), cols, L, depth=depth, method=method, overflow=overflow,
                           seed=5, rows_per_file=40, position_ids=True)
    assert _read_files(res) == want
    assert res.columns == ("input_ids", "labels") and res.left_out_columns == ("text",)
    assert pq.read_schema(res.files[0]).names == ["input_ids", "labels", "seq_lengths", "position_ids"]
    assert [os.path.basename(f) for f in res.files] == [f"part-{i:05d}-of-{len(want):05d}.parquet" for i in range(len(want))]
    meta = json.loads((tmp_path / "out" / "_packing_metadata.json").read_text())
    assert meta["plan"]["packs"] == res.num_packs == sum(len(f) for f in want)
    assert [f["packs"] for f in meta["files"]] == [len(f) for f in want]
    assert meta["options"]["seed"] == 5 and meta["left_out_columns"] == ["text"]
    assert res.verified and "exactly once" in res.summary()


def test_packs_equal_in_memory_packer_and_pack_table_columns(data, tmp_path):
    from packlib.formats.arrow import pack_table

    d, t, paths = data
    res = pack_files(paths, L, output=tmp_path / "out", workers=1, overflow="split")
    lens = pa.compute.list_value_length(t["input_ids"]).to_numpy(zero_copy_only=False)
    lens = np.nan_to_num(lens).astype(np.int64)
    from packlib.formats.arrow import make_segments

    seg = make_segments(lens, L, overflow="split")
    ref = packlib.methods.pack(seg.length, L, method="bfd")
    assert np.array_equal(res.packs.offsets, ref.offsets) and np.array_equal(res.packs.indices, ref.indices)
    table = pack_table(t.select(["input_ids", "labels"]), L, overflow="split", position_ids=True, fold_masks=True)
    got = pa.concat_tables(pq.read_table(f) for f in res.files)
    assert got.schema.remove_metadata() == table.schema.remove_metadata()
    assert got.num_rows == table.num_rows


def test_same_bytes_across_workers_and_sharding(data, tmp_path):
    d, t, paths = data
    _, one = _write(d / "one", 1)
    _, seven = _write(d / "seven", 7)
    outs = []
    for i, (inp, w) in enumerate([(paths, 1), (paths, 2), (one, 2), (seven, 1)]):
        out = tmp_path / f"o{i}"
        pack_files(inp, L, output=out, workers=w, rows_per_file=30, seed=3, overflow="truncate")
        outs.append(_parts(out))
    assert len(outs[0]) > 3
    assert all(o == outs[0] for o in outs[1:])


def test_exactly_once_many_shards(tmp_path):
    t, paths = _write(tmp_path / "in", 11, n_rows=900, seed=9)
    res = pack_files(str(tmp_path / "in"), 50, 4, output=tmp_path / "out", workers=2, method="lpfhp", overflow="split",
                     rows_per_file=7)
    got = pa.concat_tables(pq.read_table(f) for f in res.files)
    # every input token multiset per segment: rebuild segments from seq_lengths
    segs = []
    for ids, sl in zip(got["input_ids"].to_pylist(), got["seq_lengths"].to_pylist()):
        assert sum(sl) == len(ids) <= 50 and len(sl) <= 4
        a = 0
        for n in sl:
            segs.append(tuple(ids[a:a + n]))
            a += n
    want = []
    for ids in t["input_ids"].to_pylist():
        for a in range(0, len(ids or []), 50):
            want.append(tuple(ids[a:a + 50]))
    assert sorted(segs) == sorted(want)
    assert res.num_sequences == len(want) and len(res.files) == -(-res.num_packs // 7)


def test_save_to_disk_and_globs(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = _rows(500, 4)
    ds = datasets.Dataset.from_dict({"input_ids": rows["input_ids"].to_pylist(), "text": rows["text"].to_pylist()})
    ds.save_to_disk(str(tmp_path / "ds"), num_shards=3)
    res = pack_files(tmp_path / "ds", L, output=tmp_path / "out", workers=1, overflow="truncate")
    pq.write_table(pa.table({"input_ids": rows["input_ids"], "text": rows["text"]}), tmp_path / "x.parquet")
    res2 = pack_files([str(tmp_path / "x*.parquet")], L, output=tmp_path / "out2", workers=1, overflow="truncate")
    assert _read_files(res) == _read_files(res2)  # same rows (datasets stores int64 values)
    assert res.left_out_columns == ("text",) and res.num_rows == 500


def test_mlperf_tfrecord_input(tmp_path):
    from packlib.formats import mlperf_bert as mb

    seqs = mb.synthetic_sequences(300, seed=2)
    mb.write_unpacked(tmp_path / "part-00000-of-00001", seqs)
    res = pack_files(tmp_path / "part-00000-of-00001", 512, 3, output=tmp_path / "out", method="nnls", workers=1)
    assert res.columns == ("input_ids", "segment_ids", "labels")
    assert res.left_out_columns == ("next_sentence_label",)
    got = pa.concat_tables(pq.read_table(f) for f in res.files)
    assert sorted(got["input_ids"].to_pylist()[0][:5]) and res.num_sequences == 300
    first = got.slice(0, 1).to_pylist()[0]
    n = first["seq_lengths"][0]
    labels = np.array(first["labels"][:n])
    assert (labels == -100).sum() == n - (labels != -100).sum() and (labels != -100).any()


# --------------------------------------------------------------------------------------
# failures: one line, non-zero exit, nothing written
# --------------------------------------------------------------------------------------
def _cli(*argv):
    from packlib.cli import main

    return main(["pack-dataset", *map(str, argv)])


def _nothing_written(tmp_path, name="out"):
    return not (tmp_path / name).exists() and not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


def test_missing_column(data, tmp_path, capsys):
    d, t, paths = data
    assert _cli(*paths, "--output", tmp_path / "out", "--seq-length", L, "--columns", "nope") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "nope" in err and paths[0] in err and "\n" not in err
    assert _nothing_written(tmp_path)


def test_schema_differs_between_files(data, tmp_path, capsys):
    d, t, paths = data
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"labels": t["labels"]}), other)
    assert _cli(paths[0], other, "--output", tmp_path / "out", "--seq-length", L, "--overflow", "split") == 2
    err = capsys.readouterr().err
    assert "other.parquet" in err and "input_ids" in err and "Traceback" not in err
    assert _nothing_written(tmp_path)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_unreadable_or_truncated_file(data, tmp_path, capsys, damage):
    d, t, paths = data
    bad = tmp_path / "bad.parquet"
    raw = open(paths[1], "rb").read()
    bad.write_bytes(b"not parquet at all" if damage == "garbage" else raw[: len(raw) // 2])
    assert _cli(paths[0], bad, "--output", tmp_path / "out", "--seq-length", L, "--overflow", "split") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and str(bad) in err and "\n" not in err
    assert _nothing_written(tmp_path)


def test_too_long_without_overflow_subprocess(data, tmp_path):
    d, t, paths = data
    p = subprocess.run([sys.executable, "-m", "packlib", "pack-dataset", *paths, "--output", str(tmp_path / "out"),
                        "--seq-length", "32", "--workers", "1"], capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--overflow" in lines[0] and ".parquet" in lines[0]
    assert "Traceback" not in p.stderr and _nothing_written(tmp_path)


# loaded by every fresh interpreter of a run (the driver and the fork server; the workers are
# forked from it): it notes the process, and any import of pandas with where it came from
_PANDAS_HOOK = """
import os, sys, traceback
with open(os.environ["PACKLIB_TEST_SEEN"] + ".started", "a") as f:
    f.write(f"{os.getpid()}\\n")
class _Seen:
    def find_spec(self, name, path=None, target=None):
        if name == "pandas" and "pandas" not in sys.modules:
            with open(os.environ["PACKLIB_TEST_SEEN"], "a") as f:
                f.write(f"process {os.getpid()}:\\n{''.join(traceback.format_stack()[-8:-1])}\\n")
sys.meta_path.insert(0, _Seen())
"""


def test_a_run_imports_no_pandas(tmp_path):
    """pyarrow's numpy conversions import pandas where it is installed, a cost paid at the
    start of each fresh process: no process of a run makes one, in either output format
    (the driver, the fork server and the workers forked from it, which run the tasks)."""
    pytest.importorskip("pandas")  # without it there is nothing to import
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(_PANDAS_HOOK)
    lengths = np.random.default_rng(3).integers(1, 40, 300)
    pq.write_table(pa.table({"input_ids": pa.array([np.arange(n) for n in lengths], pa.list_(pa.int32())),
                             "loss_mask": pa.array([np.arange(n) % 2 == 0 for n in lengths])}), tmp_path / "in.parquet")
    seen = tmp_path / "seen"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "hook"), root]), PACKLIB_TEST_SEEN=str(seen))
    for out, options in (("out", ["--workers", "2"]), ("sft.npy", ["--format", "megatron-sft", "--method", "bfd"])):
        subprocess.run([sys.executable, "-m", "packlib", "pack-dataset", str(tmp_path / "in.parquet"), "--output",
                        str(tmp_path / out), "--seq-length", "64", *options], check=True, capture_output=True, env=env)
    assert len((tmp_path / "seen.started").read_text().split()) >= 3  # the hook ran in each interpreter
    assert not seen.exists(), seen.read_text()


def test_output_exists_and_bad_arguments(data, tmp_path, capsys):
    d, t, paths = data
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("x")
    assert _cli(*paths, "--output", tmp_path / "out", "--seq-length", L, "--overflow", "split") == 2
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "out" / "keep").read_text() == "x"
    with pytest.raises(ValueError, match="overflow"):
        pack_files(paths, L, output=tmp_path / "o2", overflow="drop")
    with pytest.raises(ValueError, match="unknown method"):
        pack_files(paths, L, output=tmp_path / "o2", method="best")
    with pytest.raises(TypeError, match="max_sequence_length"):
        pack_files(paths, output=tmp_path / "o2")
    with pytest.raises(TypeError, match="verify"):
        pack_files(paths, L, output=tmp_path / "o2", verify="yes")
    with pytest.raises(InputError, match="no such file"):
        pack_files([str(tmp_path / "missing-*.parquet")], L, output=tmp_path / "o2")
    assert not (tmp_path / "o2").exists()
    # seq_length= is the TRL alias of the capacity
    assert pack_files(paths, output=tmp_path / "o3", seq_length=L, workers=1, overflow="split").max_sequence_length == L


def _dying_spill(job, i, *args):
    if i == 1:
        os._exit(3)
    return _tasks.spill_task(job, i, *args)


def test_worker_that_dies_fails_cleanly(data, tmp_path, monkeypatch):
    d, t, paths = data
    monkeypatch.setattr(_tasks, "spill_task", _dying_spill)
    with pytest.raises(WorkerDied, match="died"):
        pack_files(paths, L, output=tmp_path / "out", workers=2, overflow="split")
    assert _nothing_written(tmp_path)


def test_verify_catches_a_wrong_output(data, tmp_path, monkeypatch, capsys):
    d, t, paths = data
    real = _tasks.assemble_task

    def corrupting(job, f, *args):
        out = real(job, f, *args)
        if f == 0:  # change one token of the first file
            tab = pq.read_table(job.part_path(f))
            ids = tab["input_ids"].to_pylist()
            ids[0][0] += 1
            tab = tab.set_column(0, "input_ids", pa.array(ids, tab.schema.field("input_ids").type))
            pq.write_table(tab, job.part_path(f))
        return out

    monkeypatch.setattr(_tasks, "assemble_task", corrupting)
    with pytest.raises(VerifyError):
        pack_files(paths, L, output=tmp_path / "out", workers=1, overflow="split")
    assert _nothing_written(tmp_path)
    assert _cli(*paths, "--output", tmp_path / "out", "--seq-length", L, "--overflow", "split", "--workers", 1) == 1
    assert "exactly once" in capsys.readouterr().err
    assert _nothing_written(tmp_path)


def test_summary_and_repr(data, tmp_path, capsys):
    d, t, paths = data
    assert _cli(*paths, "--output", tmp_path / "out", "--seq-length", L, "--overflow", "truncate",
                "--workers", 1, "--rows-per-file", 50, "--progress") == 0
    out = capsys.readouterr().out
    assert "efficiency" in out and "left out" in out and "text" in out and "peak memory" in out
    assert "truncated" in out


# --------------------------------------------------------------------------------------
# Ray
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_runtime():
    ray = pytest.importorskip("ray")
    with ray_to_itself():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}})
        yield ray
        ray.shutdown()


def test_ray_engine_same_bytes_as_local(data, tmp_path, ray_runtime):
    d, t, paths = data
    # the loss masks too (folded into labels by default, beside position_ids)
    ids = t["input_ids"].to_pylist()
    masked = t.append_column("completion_mask", pa.array([[int(x % 3 != 0) for x in r or []] for r in ids],
                                                          pa.list_(pa.int8())))
    for k, p in enumerate(paths[:2]):
        pq.write_table(masked.slice(k * 300, 300), tmp_path / f"m{k}.parquet", row_group_size=97)
    for inputs, name in [(paths, ""), (str(tmp_path / "m*.parquet"), "-m")]:
        local = pack_files(inputs, L, 4, output=tmp_path / f"local{name}", workers=1, rows_per_file=30, seed=1,
                           overflow="split")
        res = pack_files(inputs, L, 4, output=tmp_path / f"ray{name}", engine="ray", workers=2, rows_per_file=30,
                         seed=1, overflow="split")
        assert res.engine == "ray" and res.verified and res.position_ids
        assert _parts(tmp_path / f"ray{name}") == _parts(tmp_path / f"local{name}")
        assert ((tmp_path / f"ray{name}" / "_packing_metadata.json").read_bytes()
                == (tmp_path / f"local{name}" / "_packing_metadata.json").read_bytes())
        assert local.num_packs == res.num_packs
    assert res.folded_masks == ("completion_mask",)
    assert "position_ids" in pq.read_schema(res.files[0]).names
    # images carried whole with their rows (tests/test_pipeline_carry.py: the rest of carry=)
    vision = write_shards(tmp_path / "vision", vision_table(60, seed=1), 2)  # local: 2 worker processes too
    for name, engine in (("local-v", "local"), ("ray-v", "ray")):
        res = pack_files(vision, L, output=tmp_path / name, carry=CARRY, engine=engine, workers=2, rows_per_file=9)
        assert res.carried_columns == tuple(CARRY) and res.verified
    assert _parts(tmp_path / "ray-v") == _parts(tmp_path / "local-v")
    assert ((tmp_path / "ray-v" / "_packing_metadata.json").read_bytes()
            == (tmp_path / "local-v" / "_packing_metadata.json").read_bytes())


def test_ray_engine_errors_are_one_line(data, tmp_path, ray_runtime):
    d, t, paths = data
    with pytest.raises(InputError, match="--overflow"):
        pack_files(paths, 16, output=tmp_path / "out", engine="ray", workers=2, overflow="error")
    assert _nothing_written(tmp_path)


def test_ray_engine_mlperf_bert_same_bytes(tmp_path, ray_runtime):
    from packlib.formats import mlperf_bert as mb
    from packlib.pipeline.mlperf import pack_mlperf_bert

    seqs = mb.synthetic_sequences(600, seed=3)
    mb.write_unpacked(tmp_path / "u.tfrecord", seqs)
    pack_mlperf_bert([tmp_path / "u.tfrecord"], output_dir=tmp_path / "local", records_per_file=100)
    pack_mlperf_bert([tmp_path / "u.tfrecord"], output_dir=tmp_path / "ray", records_per_file=100, engine="ray", workers=2)
    assert _parts_any(tmp_path / "ray") == _parts_any(tmp_path / "local")


def _parts_any(out):
    return {n: (out / n).read_bytes() for n in sorted(os.listdir(out))}


def test_segment_hashes_agree_and_see_every_change():
    from packlib.pipeline._hash import hash_into, hash_packed_into

    rng = np.random.default_rng(0)
    values = rng.integers(-5, 5, 1000).astype(np.int32)
    seg = np.array([0, 7, 8, 30, 31, 500, 1000])
    a = np.zeros(6, dtype=np.uint64)
    hash_into(a, seg[:-1], seg[1:], values)
    b = np.zeros(6, dtype=np.uint64)
    # the same segments as two packed rows: [0, 30) holding 3 segments and [30, 1000) holding 3
    assert hash_packed_into(b, np.array([0, 30, 1000]), np.array([0, 3, 6]), np.diff(seg), values) == -1
    assert np.array_equal(a, b) and len(set(a.tolist())) == 6
    assert hash_packed_into(b, np.array([0, 30, 1000]), np.array([0, 3, 6]), np.array([7, 1, 21, 1, 469, 500]), values) == 0
    for i in (0, 3, 499, 998):  # any single changed value changes its segment's hash
        v = values.copy()
        v[i] += 1
        c = np.zeros(6, dtype=np.uint64)
        hash_into(c, seg[:-1], seg[1:], v)
        assert (c != a).sum() == 1
    c = np.zeros(6, dtype=np.uint64)
    hash_into(c, seg[:-1], seg[1:], values.astype(np.int64))  # the value type does not matter
    assert np.array_equal(a, c)
