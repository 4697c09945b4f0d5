"""VisionPackedCollator against each example alone on tiny random Qwen2-VL, Qwen2.5-VL and
Qwen3-VL models (logits of every example, token-weighted loss, gradients), the naive layouts
shown wrong by the same checks, and bad input."""
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from packlib.torch import VisionPackedCollator  # noqa: E402
from tests import naive_vision as nv  # noqa: E402

EXACT = 5e-5  # float32 on CPU, logits of magnitude ~10: observed differences are 4e-6 to 9e-6
WRONG = 1.0  # every naive layout is off by 6 to 11 on a later example


@pytest.fixture(scope="module")
def models():
    return {f: nv.tiny_model(f) for f in nv.FAMILIES}


@pytest.fixture(scope="module")
def exs():
    return nv.examples()


def _later_logits_diff(model, exs, batch):
    """Max logit difference over the examples after the first (the first is exact under every
    naive layout), and the loss difference."""
    with torch.no_grad():
        ref = nv.alone(model, exs)
        out = model(**batch)
    parts = out.logits[0].split([r[0].shape[0] for r in ref])
    later = max(float((p - r[0]).abs().max()) for p, r in zip(parts[1:], ref[1:]))
    first = float((parts[0] - ref[0][0]).abs().max())
    loss = float(sum(r[1] for r in ref)) / sum(r[2] for r in ref)
    return first, later, abs(float(out.loss) - loss)


def _grads(model, loss):
    model.zero_grad()
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family", nv.FAMILIES)
def test_positions_are_the_models_own(models, exs, family):
    batch = VisionPackedCollator(models[family])(exs)
    assert batch["position_ids"].shape == (4, 1, sum(e["input_ids"].shape[1] for e in exs))
    assert torch.equal(batch["position_ids"][1:], nv.own_mrope(models[family], exs))
    assert torch.equal(batch["position_ids"][0], nv.restarting(exs))
    assert batch["use_cache"] is False and "attention_mask" not in batch


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("family", nv.FAMILIES)
def test_packed_row_is_each_example_alone(models, exs, family, attn):
    model = models[family]
    model.set_attn_implementation(attn)
    try:
        batch = VisionPackedCollator(model.config)(exs)
        first, later, dloss = _later_logits_diff(model, exs, batch)
        assert first < EXACT and later < EXACT and dloss < EXACT
        n = int((batch["labels"][0, 1:] != -100).sum())
        packed = _grads(model, model(**batch).loss * n)  # summed over tokens: the examples' sums add up
        alone = _grads(model, sum(r[1] for r in nv.alone(model, exs)))
        assert packed.keys() == alone.keys()
        scale = max(float(g.abs().max()) for g in alone.values())
        assert max(float((packed[k] - alone[k]).abs().max()) for k in alone) < EXACT * max(1.0, scale)
    finally:
        model.set_attn_implementation("sdpa")


@pytest.mark.parametrize("family", nv.FAMILIES)
def test_naive_layouts_are_wrong_by_the_same_check(models, exs, family):
    model = models[family]
    for name, batch in nv.naive_layouts(model, exs).items():
        first, later, _ = _later_logits_diff(model, exs, batch)
        assert later > WRONG, name  # the check can fail ...
        if name != "2-D positions restarting":  # (which also loses the first example's image positions)
            assert first < EXACT, name  # ... though the first example looks fine


def test_rows_of_pack_dataset_and_plain_inputs(models, exs):
    """A row holding several examples (``seq_lengths``, images in row order) collates as the
    examples do; lists instead of tensors, a batch dimension or none, the same batch."""
    collate = VisionPackedCollator(models["qwen2_vl"])
    want = collate(exs)
    row = {k: torch.cat([e[k][0] for e in exs]) for k in ("input_ids", "labels", "mm_token_type_ids")}
    row["seq_lengths"] = [e["input_ids"].shape[1] for e in exs]
    row["pixel_values"] = torch.cat([e["pixel_values"] for e in exs if "pixel_values" in e]).tolist()
    row["image_grid_thw"] = torch.cat([e["image_grid_thw"] for e in exs if "image_grid_thw" in e]).tolist()
    got = collate([{k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in row.items()}])
    assert want.keys() == got.keys()
    for k in want:
        assert torch.equal(want[k], got[k]) if k != "use_cache" else want[k] is got[k], k
    again = pickle.loads(pickle.dumps(collate))
    assert repr(again) == repr(collate) and torch.equal(again(exs)["position_ids"], want["position_ids"])
    padded = dict(exs[2])  # right padding, as a processor pads a batch: dropped from the row
    padded.update({k: torch.nn.functional.pad(exs[2][k], (0, 3), value=v) for k, v in
                   (("input_ids", 0), ("labels", -100), ("attention_mask", 0), ("mm_token_type_ids", 0))})
    got = collate([exs[0], exs[1], padded, exs[3]])
    assert all(torch.equal(want[k], got[k]) for k in want if k != "use_cache")
    text_only = collate([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9]}])
    assert text_only["position_ids"][:, 0].tolist() == [[0, 1, 2, 0, 1]] * 4 and "pixel_values" not in text_only


def _bad(exs, k, **change):
    out = [dict(e) for e in exs]
    out[k].update(change)
    return [{key: v for key, v in e.items() if v is not None} for e in out]


def test_bad_input(models, exs):
    collate = VisionPackedCollator(models["qwen2_5_vl"])
    grids = exs[2]["image_grid_thw"]
    cases = [
        (_bad(exs, 2, image_grid_thw=torch.tensor([[1, 6, 6]]), pixel_values=torch.zeros(36, nv.PATCH_DIM)),
         r"examples\[2\]: image 0 takes 6 image tokens"),
        (_bad(exs, 2, pixel_values=exs[2]["pixel_values"][:-1]), r"examples\[2\]\['pixel_values'\] has shape"),
        (_bad(exs, 3, mm_token_type_ids=None), r"examples\[3\] has images but no 'mm_token_type_ids'"),
        (_bad(exs, 2, image_grid_thw=torch.cat([grids, grids]),
              pixel_values=torch.cat([exs[2]["pixel_values"]] * 2)), r"examples\[2\] has 2 rows of image_grid_thw"),
        (_bad(exs, 0, mm_token_type_ids=torch.zeros_like(exs[0]["input_ids"])), r"examples\[0\]: token \d+ is 190"),
        (_bad(exs, 1, video_grid_thw=torch.tensor([[2, 2, 2]])), r"examples\[1\] has 'video_grid_thw'"),
        (_bad(exs, 2, pixel_values=None), r"examples\[2\] has image_grid_thw but no pixel_values"),
    ]
    for batch, message in cases:
        with pytest.raises(ValueError, match=message):
            collate(batch)
    with pytest.raises(ValueError, match="over max_sequence_length = 10"):
        VisionPackedCollator(models["qwen2_vl"], max_sequence_length=10)(exs)
    with pytest.raises(ValueError, match="model family 'llama' is not one packlib packs with images"):
        VisionPackedCollator({"model_type": "llama"})
    with pytest.raises(ValueError, match="non-empty list"):
        collate([])


def test_calibrate_vision_cost_fits_the_towers_time(models):
    """The tower's forward advances a clock by ``c1 * p + c2 * p**2 + c`` over its patches:
    the fit gives them back, so it times each image set as the rows say."""
    from packlib.torch import calibrate_vision_cost

    tower = models["qwen2_5_vl"].model.visual
    forward = tower.forward

    def timed(pixels, grid_thw=None, **kw):
        p = grid_thw.prod(dim=1).double()
        clock.now += float(2e-6 * p.sum() + 1e-9 * (p * p).sum()) + 1e-3
        return forward(pixels, grid_thw=grid_thw, **kw)

    def clock():
        return clock.now

    clock.now = 0.0
    tower.forward = timed
    try:
        fit = calibrate_vision_cost(models["qwen2_5_vl"], 256, repeats=1, warmup=0, clock=clock)
    finally:
        del tower.forward
    assert [round(x, 6) for x in (fit.a / 1e-6, fit.b / 1e-9, fit.c / 1e-3)] == [2.0, 1.0, 1.0]
    assert max(int(r.sum()) for r in fit.rows) <= 4 * 256 and fit.max_error < 1e-9
    with pytest.raises(ValueError, match="no vision tower"):
        calibrate_vision_cost(torch.nn.Linear(2, 2))


def test_the_benchmark_runs_at_a_toy_size(monkeypatch, capsys):
    """benchmarks/bench_vision.py, its tables whole (the figures are measured by running it)."""
    import importlib
    import pathlib

    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
    bench = importlib.import_module("bench_vision")
    bench.main(["--examples", "200", "--no-exactness", "--step-time", "--timed", "1", "--per-batch", "2",
                "--scale", "0.02", "--hidden", "32", "--layers", "1", "--repeat", "0"])
    out = capsys.readouterr().out
    for row in ("| padded batches of 8 |", "| packed rows of 8,192 (padding-free) |", "| realistic (0-4 images) |",
                "| packed | "):
        assert row in out


def test_a_row_of_pack_table_with_carried_images_collates_as_its_examples(models, exs):
    pa = pytest.importorskip("pyarrow")
    from packlib.formats.arrow import pack_table

    cols = ("input_ids", "labels", "mm_token_type_ids")
    table = pa.table({**{k: [e[k][0].tolist() for e in exs] for k in cols},
                      "pixel_values": [e["pixel_values"].tolist() if "pixel_values" in e else None for e in exs],
                      "image_grid_thw": [e["image_grid_thw"].tolist() if "image_grid_thw" in e else [] for e in exs]})
    packed = pack_table(table, 512, carry=["pixel_values", "image_grid_thw"], position_ids=True)
    (row,) = packed.to_pylist()
    starts = np.cumsum([0] + row["seq_lengths"][:-1]).tolist()
    members = [next(e for e in exs if e["input_ids"][0].tolist() == row["input_ids"][s:s + n])
               for s, n in zip(starts, row["seq_lengths"])]
    collate = VisionPackedCollator(models["qwen3_vl"])
    got, want = collate([row]), collate(members)
    for k in want:
        assert torch.equal(got[k], want[k].to(got[k].dtype)) if k != "use_cache" else got[k] is want[k], k


def test_qwen3_vl_moe_is_exact_too(exs):
    model = nv.tiny_model("qwen3_vl_moe")
    batch = VisionPackedCollator(model)(exs)
    assert torch.equal(batch["position_ids"][1:], nv.own_mrope(model, exs))
    first, later, dloss = _later_logits_diff(model, exs, batch)
    assert first < EXACT and later < EXACT and dloss < EXACT
    _, later, _ = _later_logits_diff(model, exs, nv.naive_layouts(model, exs)["positions computed by the model"])
    assert later > WRONG
