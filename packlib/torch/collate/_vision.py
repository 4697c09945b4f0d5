"""The collator of vision-language examples: :class:`VisionPackedCollator` lays Qwen2-VL,
Qwen2.5-VL and Qwen3-VL examples (text and images) end to end in one padding-free row that
the model computes as each example alone."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..._validate import as_bool, as_int, as_positive_int
from ._examples import MASK_KEYS, read_example
from .._lazy import require_torch
from ._mrope import IMAGE, image_token_counts, mrope_positions, vision_config

_PER_TOKEN = ("input_ids", "labels", "mm_token_type_ids", "position_ids") + MASK_KEYS
_VIDEO_KEYS = ("pixel_values_videos", "video_grid_thw")


class VisionPackedCollator:
    """Collate vision-language examples into one packed row that Qwen2-VL, Qwen2.5-VL or
    Qwen3-VL computes exactly as each example alone (logits, loss, gradients).

    Each example is what the model's processor returns for one conversation
    (``input_ids``, ``mm_token_type_ids``, and with images ``pixel_values`` and
    ``image_grid_thw``; a leading batch dimension of 1 is fine), with ``labels``,
    ``completion_mask``, ``assistant_masks`` or ``attention_mask`` read as
    :class:`PackedCollator` reads them (docs/training.md), or a row that
    :func:`packlib.formats.arrow.pack_dataset` packed (``seq_lengths``, images in row order).
    The batch holds torch tensors:

    - ``input_ids``, ``labels`` (each example's first label ``separator_id``) and
      ``mm_token_type_ids``, shape ``(1, T)``;
    - ``position_ids`` of shape ``(4, 1, T)``: a first row of text positions restarting at 0
      for every example (the models find the examples' boundaries in it), then each
      example's own three mRoPE rows, as the model's ``get_rope_index`` makes them for the
      example alone;
    - ``pixel_values`` and ``image_grid_thw``: every image in row order (the vision tower
      encodes each image apart, from its grid), when the row has images;
    - ``use_cache=False``: the models build the block-diagonal mask from the first row only
      when no KV cache is made (a training forward makes one unless told not to), and only
      without a 2-D ``attention_mask``, which the batch therefore never holds.

    ``loss = model(**batch).loss`` is then the token-weighted mean of the examples' own
    losses, under eager, sdpa and flex attention (docs/multimodal.md).

    Parameters
    ----------
    model : model, config or dict
        The model (or its config): its ``model_type`` (``qwen2_vl``, ``qwen2_5_vl``,
        ``qwen3_vl``, ``qwen3_vl_moe``), ``vision_config.spatial_merge_size`` and
        ``image_token_id`` are read once; the collator keeps only these.
    separator_id : int, default -100
        The label of each example's first token (ignored by the loss).
    max_sequence_length : int, optional
        Refuse a batch of more tokens (a plan's row capacity).
    use_cache : bool or None, default False
        The ``use_cache`` put into the batch; ``None`` leaves the key out.

    Raises
    ------
    ValueError
        A model family it does not know; at a call, an example naming what to fix: image
        tokens that disagree with ``image_grid_thw``, ``pixel_values`` whose patches
        disagree with the grids, a missing ``mm_token_type_ids`` where there are images,
        videos (not packed yet).

    Examples
    --------
    >>> collate = VisionPackedCollator({"model_type": "qwen2_vl", "image_token_id": 9,
    ...                                 "vision_config": {"spatial_merge_size": 2}})  # or the model
    >>> batch = collate([{"input_ids": [5, 9, 9, 6], "mm_token_type_ids": [0, 1, 1, 0],
    ...                   "image_grid_thw": [[1, 2, 4]], "pixel_values": [[0.0] * 12] * 8},
    ...                  {"input_ids": [7, 8]}])
    >>> batch["position_ids"][:, 0].tolist()   # text row, then t, h, w; the image is 1 x 2 tokens
    [[0, 1, 2, 3, 0, 1], [0, 1, 1, 3, 0, 1], [0, 1, 1, 3, 0, 1], [0, 1, 2, 3, 0, 1]]
    >>> batch["labels"].tolist(), batch["image_grid_thw"].tolist(), batch["use_cache"]
    ([[-100, 9, 9, 6, -100, 8]], [[1, 2, 4]], False)
    """

    def __init__(self, model, *, separator_id: int = -100, max_sequence_length: int | None = None,
                 use_cache: bool | None = False):
        self.config = vision_config(model)
        self.separator_id = as_int(separator_id, "separator_id", minimum=-(2**63), maximum=2**63 - 1)
        self.max_sequence_length = (None if max_sequence_length is None
                                    else as_positive_int(max_sequence_length, "max_sequence_length"))
        self.use_cache = None if use_cache is None else as_bool(use_cache, "use_cache")

    def __repr__(self) -> str:
        return (f"VisionPackedCollator(family={self.config.family!r}, separator_id={self.separator_id}, "
                f"max_sequence_length={self.max_sequence_length}, use_cache={self.use_cache})")

    def __call__(self, examples) -> dict:
        torch = require_torch()
        if isinstance(examples, (Mapping, str, bytes)) or not hasattr(examples, "__len__") or len(examples) == 0:
            raise ValueError("examples must be a non-empty list of processed examples (dicts with 'input_ids', "
                             "'mm_token_type_ids', and 'pixel_values' / 'image_grid_thw' where there are images)")
        parts = [read_vision_example(e, k, self.config) for k, e in enumerate(examples)]
        ids = np.concatenate([p.ids for p in parts])
        if self.max_sequence_length is not None and ids.size > self.max_sequence_length:
            raise ValueError(f"the {len(parts)} examples hold {ids.size:,} tokens (text and image tokens), over "
                             f"max_sequence_length = {self.max_sequence_length:,}: plan the rows on each example's "
                             "full length (len(input_ids), image tokens included)")
        lens = np.concatenate([p.lens for p in parts])
        labels = np.concatenate([p.labels for p in parts])
        labels[np.cumsum(lens) - lens] = self.separator_id
        text = np.arange(ids.size, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
        pos = np.concatenate([p.pos for p in parts], axis=1)
        position_ids = np.concatenate((text[None, :], pos), axis=0)[:, None, :]
        out = {"input_ids": torch.from_numpy(ids[None, :]), "labels": torch.from_numpy(labels[None, :]),
               "position_ids": torch.from_numpy(np.ascontiguousarray(position_ids)),
               "mm_token_type_ids": torch.from_numpy(np.concatenate([p.types for p in parts])[None, :])}
        pixels = [p.pixels for p in parts if p.pixels is not None]
        if pixels:
            out["pixel_values"] = torch.cat(pixels)
            out["image_grid_thw"] = torch.from_numpy(np.concatenate([p.grids for p in parts]))
        if self.use_cache is not None:
            out["use_cache"] = self.use_cache
        return out


VisionPackedCollator.__module__ = "packlib.torch"  # pickles and reprs name the public path, which never moves


class _Example:
    """One example read: tokens, sequence lengths, labels, token types, ``(3, T)`` positions,
    image grids and pixels (a torch tensor or None)."""

    __slots__ = ("ids", "lens", "labels", "types", "pos", "grids", "pixels")

    def __init__(self, ids, lens, labels, types, pos, grids, pixels):
        self.ids, self.lens, self.labels, self.types = ids, lens, labels, types
        self.pos, self.grids, self.pixels = pos, grids, pixels


def _flat(value):
    """A per-token column as numpy, a leading batch dimension of 1 dropped."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    arr = np.asarray(value)
    return arr[0] if arr.ndim == 2 and arr.shape[0] == 1 else arr


def _grids(example: Mapping, where: str) -> np.ndarray:
    grids = example.get("image_grid_thw")
    if grids is None:
        return np.zeros((0, 3), np.int64)
    if hasattr(grids, "detach"):
        grids = grids.detach().cpu().numpy()
    arr = np.asarray(grids)
    if arr.size == 0:
        return np.zeros((0, 3), np.int64)
    if arr.ndim != 2 or arr.shape[1] != 3 or arr.dtype.kind not in "iu" or (arr < 1).any():
        raise ValueError(f"{where}['image_grid_thw'] must be (n_images, 3) positive integers (t, h, w patches), as the "
                         f"processor returns it; got {arr.tolist()!r}")
    return arr.astype(np.int64)


def _pixels(example: Mapping, grids: np.ndarray, where: str):
    """The example's ``pixel_values`` as a 2-D torch tensor, its patches checked against the grids."""
    torch = require_torch()
    pixels = example.get("pixel_values")
    if grids.shape[0] == 0:
        if pixels is not None and len(pixels) > 0:
            raise ValueError(f"{where} has pixel_values but no image_grid_thw: give both, as the processor returns them")
        return None
    if pixels is None:
        raise ValueError(f"{where} has image_grid_thw but no pixel_values: give both, as the processor returns them")
    pixels = torch.as_tensor(pixels)
    want = int(grids.prod(axis=1).sum())
    if pixels.ndim != 2 or pixels.shape[0] != want:
        raise ValueError(f"{where}['pixel_values'] has shape {tuple(pixels.shape)} but its image_grid_thw "
                         f"{grids.tolist()} make {want} patches (the sum of t*h*w): pixel_values must hold one row "
                         "per patch of every image, in order, as the processor returns them")
    return pixels


def _types(example: Mapping, ids_all: np.ndarray, grids, cfg, where: str) -> np.ndarray:
    """The example's ``mm_token_type_ids`` (before padding is dropped), checked against its
    image tokens; zeros for a text-only example that has none."""
    types = example.get("mm_token_type_ids")
    has_images = grids.shape[0] > 0 or bool((ids_all == cfg.image_token_id).any())
    if types is None:
        if has_images:
            raise ValueError(f"{where} has images but no 'mm_token_type_ids': the model needs it to compute the "
                             "image tokens' mRoPE positions (without it Qwen2.5-VL silently falls back to 1-D "
                             "positions); keep the processor's mm_token_type_ids column (return_mm_token_type_ids=True)")
        return np.zeros(ids_all.size, np.int64)
    types = _flat(types)
    if types.ndim != 1 or types.size != ids_all.size or types.dtype.kind not in "iub":
        raise ValueError(f"{where}['mm_token_type_ids'] must hold one integer per input_id ({ids_all.size}), got "
                         f"shape {types.shape} of {types.dtype}")
    types = types.astype(np.int64)
    wrong = (types == IMAGE) != (ids_all == cfg.image_token_id)
    if wrong.any():
        i = int(np.flatnonzero(wrong)[0])
        raise ValueError(f"{where}: token {i} is {int(ids_all[i])} with mm_token_type_ids {int(types[i])}, but image "
                         f"tokens (id {cfg.image_token_id}) and only they have type 1; keep mm_token_type_ids from the "
                         "same processor call as input_ids")
    return types


def read_vision_example(example, k: int, cfg) -> _Example:
    """``examples[k]`` read and checked (padding dropped, masks applied), with its positions."""
    where = f"examples[{k}]"
    if not isinstance(example, Mapping) or "input_ids" not in example:
        raise ValueError(f"{where} must be a dict with 'input_ids' (and 'mm_token_type_ids', 'pixel_values', "
                         "'image_grid_thw' where it has images), as the model's processor returns it")
    for key in _VIDEO_KEYS:
        if example.get(key) is not None:
            raise ValueError(f"{where} has {key!r}: videos are not packed yet; pack examples with images and text only")
    flat = {key: (_flat(v) if key in _PER_TOKEN and v is not None else v) for key, v in example.items()}
    ids, lens, labels = read_example(flat, k)
    ids_all = np.asarray(flat["input_ids"])
    grids = _grids(example, where)
    pixels = _pixels(example, grids, where)
    types = _types(example, ids_all.astype(np.int64), grids, cfg, where)
    keep = flat.get("attention_mask")
    if keep is not None:
        keep = np.asarray(keep) != 0
        if (~keep & (types != 0)).any():
            raise ValueError(f"{where}['attention_mask'] is 0 on image tokens: padding must be text only")
        types = types[keep]
    pos = np.empty((3, ids.size), np.int64)
    used, start = 0, 0
    for n in lens.tolist():
        pos[:, start:start + n], g = mrope_positions(types[start:start + n], grids[used:], cfg.merge, where)
        used, start = used + g, start + n
    if used != grids.shape[0]:
        counts = image_token_counts(grids, cfg.merge).tolist()
        raise ValueError(f"{where} has {grids.shape[0]} rows of image_grid_thw (image tokens {counts}) but {used} "
                         "images in its input_ids: give one image_grid_thw row per image")
    return _Example(ids, lens, labels, types, pos, grids, pixels)
