"""Multimodal rotary positions (mRoPE) of Qwen2-VL, Qwen2.5-VL and Qwen3-VL, computed per
sequence in numpy, as the models' ``get_rope_index`` computes them for one example alone:
text tokens count on from the last position on all three rows; an image's tokens take
``(t, row, column)`` on its merged grid, offset by the position it starts at, after which
the count goes on from ``max(h, w) / merge``."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

#: The model families whose positions this module computes (``config.model_type``).
FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")
TEXT, IMAGE, VIDEO = 0, 1, 2


class VisionConfig(tuple):
    """``(family, merge, image_token_id, video_token_id)`` read from a model or its config."""

    __slots__ = ()

    def __new__(cls, family, merge, image_token_id, video_token_id):
        return super().__new__(cls, (family, merge, image_token_id, video_token_id))

    def __getnewargs__(self):
        return tuple(self)

    family = property(lambda self: self[0])
    merge = property(lambda self: self[1])
    image_token_id = property(lambda self: self[2])
    video_token_id = property(lambda self: self[3])


def _get(config, name):
    return config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)


def vision_config(model) -> VisionConfig:
    """The settings of ``model`` (a model, its config, or the config as a dict) that the
    positions need; a ``ValueError`` for a family this module does not know."""
    config = getattr(model, "config", model)
    family = _get(config, "model_type")
    if family not in FAMILIES:
        raise ValueError(f"model family {family!r} is not one packlib packs with images (it knows {', '.join(FAMILIES)}"
                         "): pass a Qwen2-VL, Qwen2.5-VL or Qwen3-VL model or its config; for a text-only model "
                         "use PackedCollator")
    vision = _get(config, "vision_config")
    merge = _get(vision, "spatial_merge_size") if vision is not None else None
    image, video = _get(config, "image_token_id"), _get(config, "video_token_id")
    if not isinstance(merge, int) or merge < 1 or not isinstance(image, int):
        raise ValueError(f"the {family} config has no vision_config.spatial_merge_size or image_token_id "
                         f"(got {merge!r}, {image!r}): pass the model's full config, not its text_config")
    return VisionConfig(family, merge, image, video)


def image_token_counts(grids: np.ndarray, merge: int) -> np.ndarray:
    """Tokens each image of ``grids`` (``(n, 3)``: t, h, w patches) takes in the text."""
    return grids.prod(axis=1) // (merge * merge)


def _runs(types: np.ndarray):
    """``(kind, start, stop)`` of each run of equal token types."""
    cuts = np.flatnonzero(np.diff(types)) + 1
    starts = np.concatenate(([0], cuts))
    stops = np.concatenate((cuts, [types.size]))
    return zip(types[starts].tolist(), starts.tolist(), stops.tolist())


def mrope_positions(types: np.ndarray, grids: np.ndarray, merge: int, where: str) -> tuple[np.ndarray, int]:
    """The ``(3, T)`` positions of one sequence whose token types are ``types`` (0 text,
    1 image) and whose images, in order, start at ``grids[0]``; returns them and how many
    grids the sequence used. ``ValueError`` (naming ``where``) where an image's tokens
    disagree with its grid or the grids run out."""
    pos = np.empty((3, types.size), np.int64)
    cur, g = 0, 0
    for kind, s, e in _runs(types):
        n = e - s
        if kind == TEXT:
            pos[:, s:e] = cur + np.arange(n)
            cur += n
            continue
        if kind != IMAGE:
            raise ValueError(f"{where} has mm_token_type_ids = {kind} at token {s}: only text (0) and images (1) are "
                             "packed (videos are not supported yet)")
        if g >= grids.shape[0]:
            raise ValueError(f"{where} holds more images (runs of image tokens) than rows of image_grid_thw "
                             f"({grids.shape[0]}): give one image_grid_thw row per image, as the processor returns it")
        t, h, w = (int(x) for x in grids[g])
        gh, gw = h // merge, w // merge
        if n != t * gh * gw:
            raise ValueError(f"{where}: image {g} takes {n} image tokens (from token {s}) but its image_grid_thw "
                             f"{[t, h, w]} makes {t * gh * gw} (t*h*w / spatial_merge_size**2 with merge {merge}); "
                             "keep the processor's input_ids and image_grid_thw together, never truncate inside an image")
        pos[0, s:e] = cur + np.repeat(np.arange(t), gh * gw)
        pos[1, s:e] = cur + np.tile(np.repeat(np.arange(gh), gw), t)
        pos[2, s:e] = cur + np.tile(np.arange(gw), t * gh)
        cur += max(h, w) // merge
        g += 1
    return pos, g
