"""Processed vision-language rows for the pipeline's ``carry=`` tests (tests/test_pipeline_carry.py,
and the Ray comparison in tests/test_pipeline.py)."""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

L = 48
CARRY = ["pixel_values", "image_grid_thw", "images"]
IMAGE = 7  # the image token


def vision_rows(n, seed):
    """Processed vision-language rows: 0-2 images each (grid (1, h, w), h*w patches of 6
    values, h*w/4 image tokens in ``input_ids``), an encoded image per image in ``images``
    (list<binary>) and a ``cover`` (binary, null without images); each row's first token is
    its own; some rows empty, one null."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        grids = [[1, int(rng.choice([2, 4])), int(rng.choice([2, 4]))] for _ in range(rng.integers(0, 3) if i % 13 else 0)]
        image_tokens = sum(h * w // 4 for _, h, w in grids)
        text = int(rng.integers(0, L - image_tokens - 1))
        ids = [] if i % 13 == 0 else [30000 + i] + [IMAGE] * image_tokens + rng.integers(10, 30000, text).tolist()
        rows.append({"input_ids": ids, "labels": [-100 if t == IMAGE else t for t in ids],
                     "mm_token_type_ids": [int(t == IMAGE) for t in ids],
                     "pixel_values": rng.random((sum(h * w for _, h, w in grids), 6)).astype(np.float32).tolist(),
                     "image_grid_thw": grids, "images": [f"png {i}.{k}".encode() for k in range(len(grids))],
                     "cover": f"cover {i}".encode() if grids else None, "text": f"row {i}"})
    rows[5] = {k: None for k in rows[5]}  # a null row: dropped, and counted
    return rows


def vision_table(n=240, seed=0):
    t = pa.Table.from_pylist(vision_rows(n, seed))
    return t.cast(t.schema.set(t.schema.get_field_index("pixel_values"),
                               pa.field("pixel_values", pa.list_(pa.list_(pa.float32())))))


def write_shards(d, table, n_files):
    """``table`` written as ``n_files`` Parquet files (row groups of 29 rows); their glob."""
    d.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, table.num_rows, n_files + 1).astype(int)
    for i in range(n_files):
        pq.write_table(table.slice(bounds[i], bounds[i + 1] - bounds[i]), d / f"in-{i}.parquet", row_group_size=29)
    return str(d / "*.parquet")


def check_carried(packed_rows, source_rows):
    """Every packed row holds its sequences' images end to end, in their order (each
    sequence found by its first token), and as many as its image tokens say."""
    rows = {r["input_ids"][0]: r for r in source_rows if r["input_ids"]}
    for packed in packed_rows:
        starts = np.cumsum([0] + list(packed["seq_lengths"][:-1]))
        members = [rows[packed["input_ids"][a]] for a in starts]
        assert [m["input_ids"] for m in members] == [list(packed["input_ids"][a:a + n])
                                                      for a, n in zip(starts, packed["seq_lengths"])]
        for c in CARRY:
            assert packed[c] == [v for m in members for v in m[c]]
        if "cover" in packed:
            assert packed["cover"] == [m["cover"] for m in members if m["cover"] is not None]
        image_tokens = sum(x == IMAGE for x in packed["input_ids"])
        assert image_tokens == sum(h * w // 4 for _, h, w in packed["image_grid_thw"])
        assert len(packed["pixel_values"]) == sum(h * w for _, h, w in packed["image_grid_thw"])


def vision_dataset(datasets, n=90, seed=2):
    """The rows as a ``datasets.Dataset`` with ``cover`` an ``Image()`` column (encoded bytes,
    not decoded here)."""
    t = vision_table(n, seed)
    covers = [None if b is None else {"bytes": b, "path": None} for b in t["cover"].to_pylist()]
    ds = datasets.Dataset(t.drop_columns(["cover"]))
    return ds.add_column("cover", covers, feature=datasets.Image(decode=False))
