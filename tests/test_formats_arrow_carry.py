"""``pack_dataset(..., carry=...)`` on Hugging Face ``datasets``: images (list columns such
as ``pixel_values``, binary and ``Image()`` columns) carried whole with their rows, after
``select`` / ``shuffle`` too, the dataset's format kept, and an ``Image()`` column still
images in the packed dataset."""
import pytest

pa = pytest.importorskip("pyarrow")
datasets = pytest.importorskip("datasets")

from packlib.formats.arrow import pack_dataset, pack_table, packing_report  # noqa: E402
from tests.pipeline_vision import CARRY, L, check_carried, vision_dataset  # noqa: E402


def _dataset(n=90, seed=2):
    return vision_dataset(datasets, n, seed)


def test_images_travel_with_their_rows_after_select_and_shuffle_format_kept():
    ds = _dataset()
    view = ds.shuffle(seed=3).select(range(70)).with_format("numpy", columns=["input_ids", "pixel_values", "cover"])
    assert view._indices is not None  # an index mapping, followed in place
    packed = pack_dataset(view, L, carry=CARRY + ["cover"])
    report = packing_report(packed)
    assert report["carried_columns"] == CARRY + ["cover"] and report["left_out_columns"] == ["text"]
    assert report["columns"] == ["input_ids", "labels", "mm_token_type_ids"]
    assert packed.format["type"] == "numpy"
    assert packed.format["columns"] == ["input_ids", "pixel_values", "cover", "seq_lengths", "position_ids"]
    assert packed.features["cover"] == datasets.List(datasets.Image(decode=False))
    assert packed.features["pixel_values"] == ds.features["pixel_values"]
    rows = packed.with_format(None).to_list()
    source = view.with_format(None).to_list()
    want = pack_table(pa.Table.from_pylist(source, schema=ds.features.arrow_schema), L, carry=CARRY + ["cover"],
                      position_ids=True, fold_masks=True)
    assert rows == want.to_pylist()
    covers = [{**r, "cover": [c["bytes"] for c in r["cover"]]} for r in rows]
    check_carried(covers, [{**r, "cover": r["cover"] and r["cover"]["bytes"]} for r in source])
    first = packed[0]  # numpy, as the format says: a (patches, 6) array per row
    assert first["pixel_values"].shape[1:] in ((6,), ()) and len(first["cover"]) == len(rows[0]["cover"])


def test_dataset_dict_and_refusals():
    ds = _dataset(40)
    packed = pack_dataset(datasets.DatasetDict({"train": ds, "test": ds.select(range(10))}), L, carry=CARRY)
    assert packing_report(packed["test"])["carried_columns"] == CARRY
    with pytest.raises(ValueError, match="needs overflow='error'"):
        pack_dataset(ds, L, carry=CARRY, overflow="truncate")
    with pytest.raises(ValueError, match="both packed and carried"):
        pack_dataset(ds, L, columns=["input_ids", "images"], carry=["images"])
    with pytest.raises(ValueError, match="no column 'pixels'"):
        pack_dataset(ds, L, carry=["pixels"])
    with pytest.raises(ValueError, match="packing writes its own 'position_ids'"):
        pack_dataset(ds.add_column("position_ids", [[0]] * len(ds)), L, carry=["position_ids"])
