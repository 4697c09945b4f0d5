"""packlib.formats.arrow folds completion_mask / assistant_masks into labels (fold_masks), so
that a transformers.Trainer with its default remove_unused_columns=True, which drops the
masks, still trains only what they allow. Checked against tests/naive_arrow.py, token by token."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow", reason="Arrow tables: pip install 'packlib[arrow]'")

from packlib.formats import arrow as A  # noqa: E402

from . import naive_arrow as naive  # noqa: E402


@st.composite
def masked_tables(draw):
    """Rows of distinct token ids (row * 1000 + position, so every packed token says where it
    came from), with some of labels / completion_mask / assistant_masks."""
    lengths = draw(st.lists(st.integers(0, 25), min_size=1, max_size=25))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    cols = {"input_ids": [[r * 1000 + j for j in range(n)] for r, n in enumerate(lengths)]}
    for name in draw(st.sets(st.sampled_from(["labels", "completion_mask", "assistant_masks"]))):
        if name == "labels":
            cols[name] = [[-100 if rng.random() < 0.3 else t for t in row] for row in cols["input_ids"]]
        else:
            cols[name] = [rng.integers(0, 2, n).astype(bool if name == "assistant_masks" else int).tolist()
                          for n in lengths]
    large, unsigned = draw(st.booleans()), draw(st.booleans())
    ids_type = pa.uint32() if unsigned else pa.int32()
    types = {k: (pa.large_list if large else pa.list_)(ids_type if k == "input_ids" else
                                                       pa.int64() if k == "labels" else
                                                       pa.bool_() if k == "assistant_masks" else pa.int8())
             for k in cols}
    return pa.table({k: pa.array(v, type=types[k]) for k, v in cols.items()}), cols


@settings(max_examples=40, deadline=None)   # the folding follows the gathered rows, whichever packer made them
@given(masked_tables(), st.integers(1, 30), st.sampled_from(["truncate", "split"]), st.sampled_from(["bfd", "ffd"]))
def test_folded_labels_say_what_every_mask_allows(tm, L, overflow, method):
    table, cols = tm
    packed = A.pack_table(table, L, overflow=overflow, method=method, fold_masks=True)
    masks = [m for m in ("completion_mask", "assistant_masks") if m in cols]
    assert A.packing_report(packed)["folded_masks"] == masks
    out = packed.to_pydict()
    if not masks:
        assert ("labels" in out) == ("labels" in cols)
        return
    for r, row in enumerate(out["input_ids"]):
        assert len(out["labels"][r]) == len(row)
        for k, tok in enumerate(row):
            src, pos = divmod(tok, 1000)
            want = naive.folded_labels(cols["input_ids"][src], cols.get("labels", [None] * len(cols["input_ids"]))[src],
                                       [cols[m][src] for m in masks])[pos]
            assert out["labels"][r][k] == want
    assert pa.types.is_signed_integer(packed.schema.field("labels").type.value_type)


def test_pack_table_leaves_the_masks_alone_unless_asked():
    table = pa.table({"input_ids": [[1, 2, 3]], "completion_mask": [[0, 1, 1]]})
    packed = A.pack_table(table, 4)
    assert "labels" not in packed.column_names and A.packing_report(packed)["folded_masks"] == []
    assert A.pack_table(table, 4, fold_masks=True).column("labels").to_pylist() == [[-100, 2, 3]]
    with pytest.raises(TypeError, match="fold_masks"):
        A.pack_table(table, 4, fold_masks="yes")


def test_pack_dataset_folds_by_default_and_keeps_the_format():
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"input_ids": [[5, 6, 7], [8, 9]], "assistant_masks": [[0, 0, 1], [1, 1]]})
    packed = pack = A.pack_dataset(ds.with_format("numpy"), 8)
    assert packed.format["type"] == "numpy" and "labels" in packed.format["columns"]
    assert pack[0]["labels"].tolist() == [-100, -100, 7, 8, 9]
    plain = A.pack_dataset(ds, 8, fold_masks=False)
    assert "labels" not in plain.column_names and plain._fingerprint != packed._fingerprint
