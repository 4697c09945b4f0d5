"""Planning vision-language data without torch: image grids before processing, the vision
encoder's cost per sample, and balance plans that count it."""
import numpy as np
import pytest

import packlib
from packlib.torch import image_grid_thw
from tests import naive_vision_plan as nvp


def test_image_grid_thw_is_the_processors_rule():
    rng = np.random.default_rng(0)
    h, w = rng.integers(10, 5000, 200), rng.integers(10, 5000, 200)
    h[:3], w[:3] = [28, 14, 4000], [28, 2000, 20]  # at the bounds: min_pixels, max_pixels, a thin image
    for kw, factor in [({}, 28), (dict(patch_size=16, min_pixels=65536, max_pixels=16777216), 32)]:
        got = image_grid_thw(h, w, **kw)
        patch = factor // 2
        want = [(1,) + tuple(s // patch for s in nvp.smart_resize(int(y), int(x), factor, *(
            (kw["min_pixels"], kw["max_pixels"]) if kw else ()))) for y, x in zip(h, w)]
        assert got.tolist() == [list(r) for r in want]
    with pytest.raises(ValueError, match="aspect ratios above 200"):
        image_grid_thw([10], [2010])
    with pytest.raises(ValueError, match="one height and width per image"):
        image_grid_thw([10, 20], [30])


def test_vision_cost_sums_each_samples_images():
    got = packlib.vision_cost([[4, 8], [], [2]], cost=(1.0, 0.5))
    assert got.tolist() == [4 + 8 + 0.5 * (16 + 64), 0.0, 2 + 0.5 * 4]
    with pytest.raises(ValueError, match="non-negative"):
        packlib.vision_cost([[4]], cost=(-1.0, 0.0))
    with pytest.raises(ValueError, match=r"image_patches\[1\] holds a negative"):
        packlib.vision_cost([[4], [-2]], cost=(1.0, 0.0))
    with pytest.raises(TypeError, match="a pair"):
        packlib.vision_cost([[4]], cost=1.0)


def test_balance_counting_vision_spreads_vision_heavy_samples():
    """On a mix of text-only and image-heavy examples, the plan that counts the vision
    tower's cost is better balanced under the true step cost than plans counting tokens or
    the language model only; the wrong plans are measurably worse."""
    text, images = nvp.realistic_mix(1200, 1, vision_heavy=True)
    lengths = text + np.array([sum(i) for i in images])
    true = nvp.true_costs(text, images)
    extra = packlib.vision_cost([[nvp.PATCHES_PER_TOKEN * t for t in imgs] for imgs in images], cost=nvp.VISION)
    common = dict(world_size=4, micro_batches=1)
    tokens = packlib.balance(lengths, 8192, **common)
    language = packlib.balance(lengths, 8192, cost=nvp.LANGUAGE, **common)
    both = packlib.balance(lengths, 8192, cost=nvp.LANGUAGE, extra_costs=extra, **common)
    got = [nvp.balance_under(s, true) for s in (tokens, language, both)]
    assert got[2] > 0.98 and got[2] > got[1] + 0.01 and got[1] > got[0] + 0.01, got
    assert abs(both.balance - got[2]) < 1e-9  # the schedule reports the balance of the cost it planned
    with pytest.raises(ValueError, match="extra_costs holds 3 values for 1200 samples"):
        packlib.balance(lengths, 8192, extra_costs=[1.0, 2.0, 3.0], **common)
    with pytest.raises(ValueError, match=r"extra_costs\[0\] = -1.0 is negative"):
        packlib.balance(lengths, 8192, extra_costs=np.r_[-1.0, extra[1:]], **common)


def test_the_sampler_plans_with_the_vision_cost():
    """BalancedBatchSampler(extra_costs=...) deals each rank the micro-batches of
    balance(extra_costs=...); a checkpoint of a plan without them is refused."""
    text, images = nvp.realistic_mix(300, 2, vision_heavy=True)
    lengths = text + np.array([sum(i) for i in images])
    extra = packlib.vision_cost([[nvp.PATCHES_PER_TOKEN * t for t in imgs] for imgs in images], cost=nvp.VISION)
    common = dict(world_size=2, micro_batches=2, cost=nvp.LANGUAGE)
    schedule = packlib.balance(lengths, 8192, extra_costs=extra, **common)
    plain = packlib.balance(lengths, 8192, **common)
    for rank in range(2):
        with_cost = packlib.BalancedBatchSampler(lengths, 8192, rank=rank, extra_costs=extra, **common)
        got = [list(b) for b in with_cost]
        want = [list(p) for step in schedule.rank(rank) for p in step]
        assert got == want
    assert got != [list(p) for step in plain.rank(1) for p in step]  # the cost changed the plan
    without = packlib.BalancedBatchSampler(lengths, 8192, rank=1, **common)
    with pytest.raises(ValueError, match="fingerprint|settings|lengths"):
        without.load_state_dict(with_cost.state_dict())
    with pytest.raises(ValueError, match="extra_costs holds 2 values for 300 samples"):
        packlib.BalancedBatchSampler(lengths, 8192, rank=0, extra_costs=[1.0, 2.0], **common)


def test_pack_table_carries_whole_columns_with_their_rows():
    """Carried columns follow their rows into the packed rows, in the rows' order, never
    split; the tokens plan on the packed columns (text and image tokens)."""
    pa = pytest.importorskip("pyarrow")
    from packlib.formats.arrow import pack_table, packing_report

    ids = [[1, 9, 9, 2], [3, 4], [5, 9, 6], [7]]
    grids = [[[1, 2, 4]], [], [[1, 2, 2]], None]  # one image of 2 tokens, none, one of 1 token, a null row
    images = [b"png-a", None, b"png-c", None]
    t = pa.table({"input_ids": ids, "image_grid_thw": grids, "images": images, "text": ["a", "b", "c", "d"]})
    packed = pack_table(t, 5, carry=["image_grid_thw", "images"])
    report = packing_report(packed)
    assert report["columns"] == ["input_ids"] and report["carried_columns"] == ["image_grid_thw", "images"]
    assert report["left_out_columns"] == ["text"]
    for row in packed.to_pylist():
        members = []
        pos = 0
        for n in row["seq_lengths"]:
            members.append(ids.index(row["input_ids"][pos:pos + n]))
            pos += n
        assert row["image_grid_thw"] == [g for m in members for g in (grids[m] or [])]
        assert row["images"] == [images[m] for m in members if images[m] is not None]
    assert sorted(len(x) for x in packed.column("input_ids").to_pylist()) == [5, 5]
    with pytest.raises(ValueError, match="needs overflow='error'"):
        pack_table(t, 3, carry=["images"], overflow="split")
    with pytest.raises(ValueError, match="both packed and carried"):
        pack_table(t, 5, columns=["input_ids", "image_grid_thw"], carry=["image_grid_thw"])
    with pytest.raises(ValueError, match="no column 'pixels' in the table to carry"):
        pack_table(t, 5, carry=["pixels"])
    with pytest.raises(TypeError, match=r"pass carry=\['images'\]"):
        pack_table(t, 5, carry="images")
