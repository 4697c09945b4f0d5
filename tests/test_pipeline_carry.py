"""packlib.pipeline with ``carry=``: images (``pixel_values``, ``image_grid_thw``, encoded
bytes) travel whole with their rows through the out-of-core passes, giving the packs that
``pack_table(..., carry=...)`` gives in memory; the verify pass checks them pack by pack."""
import json

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from packlib.formats.arrow import pack_table  # noqa: E402
from packlib.pipeline import InputError, VerifyError, pack_files, read_metadata  # noqa: E402
from packlib.pipeline import _tasks  # noqa: E402
from tests.pipeline_vision import CARRY, L, check_carried, vision_table, write_shards  # noqa: E402


def _key(row):
    return json.dumps(row, sort_keys=True, default=bytes.hex)


def _parts(out):
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name.startswith("part-")}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("carry")
    t = vision_table()
    return t, write_shards(d / "three", t, 3), write_shards(d / "one", t, 1)


def test_packs_equal_pack_table_and_images_follow_their_rows(shards, tmp_path):
    t, three, _ = shards
    carry = CARRY + ["cover"]
    res = pack_files(three, L, output=tmp_path / "out", carry=carry, workers=1, rows_per_file=9, seed=4)
    got = pq.read_table(tmp_path / "out")
    want = pack_table(t, L, carry=carry, position_ids=True, fold_masks=True, seed=4)
    assert got.schema.remove_metadata() == want.schema.remove_metadata()
    assert sorted(map(_key, got.to_pylist())) == sorted(map(_key, want.to_pylist()))
    assert res.carried_columns == tuple(carry) and res.left_out_columns == ("text",)
    assert res.columns == ("input_ids", "labels", "mm_token_type_ids") and res.verified
    assert res.output_columns == tuple(got.schema.names) and "carried whole" in res.summary()
    meta = read_metadata(tmp_path / "out")
    assert meta["carried_columns"] == carry and meta["columns"] == got.schema.names
    assert meta["plan"]["dropped_null_rows"] == 1
    check_carried(got.to_pylist(), t.to_pylist())  # independently of pack_table


def test_same_bytes_whatever_the_sharding_and_files_sized_on_images(shards, tmp_path):
    t, three, one = shards
    a = pack_files(three, L, output=tmp_path / "a", carry=CARRY, workers=1)
    b = pack_files(one, L, output=tmp_path / "b", carry=CARRY, workers=1)
    assert _parts(tmp_path / "a") == _parts(tmp_path / "b") and len(a.files) == 1
    # the carried bytes count in the file size: the same rows without their images fit fewer files
    from packlib.pipeline import _pack_files

    old = _pack_files._FILE_TARGET_BYTES
    try:
        _pack_files._FILE_TARGET_BYTES = 40 * L * 8 * 3  # 40 packs of tokens alone (three int64 columns)
        with_images = pack_files(one, L, output=tmp_path / "c", carry=CARRY, workers=1)
        without = pack_files(one, L, output=tmp_path / "d", columns=["input_ids", "labels", "mm_token_type_ids"],
                             workers=1)
    finally:
        _pack_files._FILE_TARGET_BYTES = old
    assert len(without.files) == -(-without.num_packs // 40) and len(with_images.files) > len(without.files) + 1


def test_refusals(shards, tmp_path, capsys):
    from packlib.cli import main

    t, three, _ = shards
    with pytest.raises(ValueError, match="needs overflow='error'"):
        pack_files(three, L, output=tmp_path / "o", carry=["pixel_values"], overflow="split")
    with pytest.raises(TypeError, match=r"pass carry=\['images'\]"):
        pack_files(three, L, output=tmp_path / "o", carry="images")
    with pytest.raises(InputError, match="no column 'pixels' in the table to carry"):
        pack_files(three, L, output=tmp_path / "o", carry=["pixels"], workers=1)
    with pytest.raises(InputError, match="both packed and carried"):
        pack_files(three, L, output=tmp_path / "o", columns=["input_ids", "image_grid_thw"],
                   carry=["image_grid_thw"], workers=1)
    pq.write_table(t.slice(0, 30).drop_columns(["images"]), tmp_path / "no-images.parquet")
    with pytest.raises(InputError, match="no-images.parquet: no column 'images'.*pass --carry naming"):
        pack_files([three, str(tmp_path / "no-images.parquet")], L, output=tmp_path / "o", carry=CARRY, workers=1)
    argv = ["pack-dataset", three, "--output", str(tmp_path / "o"), "--seq-length", str(L), "--workers", "1"]
    assert main(argv + ["--carry", "pixel_values,image_grid_thw", "--overflow", "truncate"]) == 2
    assert "needs overflow='error'" in capsys.readouterr().err
    assert main(argv + ["--carry", "pixel_values", "--format", "megatron-sft"]) == 2
    assert "--carry goes with --format parquet" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_command_line_and_verify_sees_an_image_moved(shards, tmp_path, monkeypatch, capsys):
    from packlib.cli import main

    t, three, _ = shards
    argv = ["pack-dataset", three, "--output", str(tmp_path / "cli"), "--seq-length", str(L), "--workers", "1",
            "--rows-per-file", "9", "--carry", "pixel_values,image_grid_thw", "--carry", "images"]
    assert main(argv) == 0
    assert "carried whole with their rows: pixel_values, image_grid_thw, images" in capsys.readouterr().out
    real = _tasks.assemble_task

    def swapping(job, f, *args):  # the first two images of file 0 trade places: tokens untouched
        out = real(job, f, *args)
        if f == 0:
            tab = pq.read_table(job.part_path(f))
            rows = tab["images"].to_pylist()
            i, j = [k for k, r in enumerate(rows) if r][:2]
            rows[i][0], rows[j][0] = rows[j][0], rows[i][0]
            tab = tab.set_column(tab.schema.get_field_index("images"), "images",
                                 pa.array(rows, tab.schema.field("images").type))
            pq.write_table(tab, job.part_path(f))
        return out

    monkeypatch.setattr(_tasks, "assemble_task", swapping)
    with pytest.raises(VerifyError, match=r"part-00000-of-\d+.parquet: packed row \d+: its 'images'"):
        pack_files(three, L, output=tmp_path / "bad", carry=CARRY, workers=1, rows_per_file=9)
    assert not (tmp_path / "bad").exists()


def test_a_saved_dataset_with_an_image_column(tmp_path):
    """``save_to_disk`` output (Arrow files) with an ``Image()`` column (a struct of bytes and
    path): the packs of ``pack_dataset`` on the same dataset."""
    datasets = pytest.importorskip("datasets")
    from packlib.formats.arrow import pack_dataset
    from tests.pipeline_vision import vision_dataset

    ds = vision_dataset(datasets, 60)
    ds.save_to_disk(str(tmp_path / "ds"), num_shards=2)
    pack_files(tmp_path / "ds", L, output=tmp_path / "out", carry=CARRY + ["cover"], workers=1)
    want = pack_dataset(ds, L, carry=CARRY + ["cover"]).with_format(None).to_list()
    assert sorted(map(_key, pq.read_table(tmp_path / "out").to_pylist())) == sorted(map(_key, want))

