"""Planning vision-language data: an image's grid (so its tokens and patches) before the
processor runs (:func:`image_grid_thw`), and the vision tower's cost per image measured on
your model (:func:`calibrate_vision_cost`)."""
from __future__ import annotations

import math

import numpy as np

from ..._validate import as_int_array, as_positive_int
from ._calibrate import CostFit, calibrate_cost
from .._lazy import require_torch


def image_grid_thw(heights, widths, *, patch_size: int = 14, merge_size: int = 2, min_pixels: int = 56 * 56,
                   max_pixels: int = 28 * 28 * 1280) -> np.ndarray:
    """The ``image_grid_thw`` the Qwen2-VL image processor gives images of these sizes
    (its ``smart_resize``: each side rounded to a multiple of ``patch_size * merge_size``,
    the area brought into ``[min_pixels, max_pixels]``), without decoding them: an image
    then takes ``h * w / merge_size**2`` tokens of the text and ``h * w`` patches of the
    vision tower. Qwen2.5-VL uses the same rule; Qwen3-VL with ``patch_size=16`` and its
    processor's ``min_pixels`` / ``max_pixels`` (its ``size``'s shortest and longest edge).

    Parameters
    ----------
    heights, widths : array_like of int
        The images' sizes in pixels, each ``>= 1``.
    patch_size : int, default 14
        The vision tower's ``patch_size``.
    merge_size : int, default 2
        Its ``spatial_merge_size``.
    min_pixels, max_pixels : int
        The processor's bounds on the resized area (defaults: Qwen2-VL's).

    Returns
    -------
    numpy.ndarray
        int64, shape ``(n, 3)``: ``(1, h, w)`` patches per image.

    Raises
    ------
    ValueError
        Sizes of different counts, or an aspect ratio above 200 (the processor refuses it).

    Examples
    --------
    >>> grids = image_grid_thw([480, 1080], [640, 1920])
    >>> grids.tolist(), (grids.prod(axis=1) // 4).tolist()   # the grids, then each image's tokens
    ([[1, 34, 46], [1, 52, 94]], [391, 1222])
    """
    h = as_int_array(heights, "heights", minimum=1)
    w = as_int_array(widths, "widths", minimum=1)
    if h.size != w.size:
        raise ValueError(f"heights holds {h.size} values and widths {w.size}: give one height and width per image")
    patch = as_positive_int(patch_size, "patch_size")
    factor = patch * as_positive_int(merge_size, "merge_size")
    lo, hi = as_positive_int(min_pixels, "min_pixels"), as_positive_int(max_pixels, "max_pixels")
    out = np.ones((h.size, 3), np.int64)
    for i, (y, x) in enumerate(zip(h.tolist(), w.tolist())):
        if max(y, x) / min(y, x) > 200:
            raise ValueError(f"image {i} is {y} x {x} pixels: the processor refuses aspect ratios above 200")
        hb, wb = round(y / factor) * factor, round(x / factor) * factor
        if hb * wb > hi:
            beta = math.sqrt(y * x / hi)
            hb = max(factor, math.floor(y / beta / factor) * factor)
            wb = max(factor, math.floor(x / beta / factor) * factor)
        elif hb * wb < lo:
            beta = math.sqrt(lo / (y * x))
            hb, wb = math.ceil(y * beta / factor) * factor, math.ceil(x * beta / factor) * factor
        out[i, 1:] = hb // patch, wb // patch
    return out


def _tower_step(model, seed):
    """``step(patches)``: one image of each patch count (a square grid) through the vision
    tower, forward and backward."""
    torch = require_torch()
    config = getattr(model, "config", None)
    vision = getattr(config, "vision_config", None)
    tower = getattr(getattr(model, "model", model), "visual", None)
    if vision is None or tower is None:
        raise ValueError(f"{type(model).__name__} has no vision tower (model.model.visual) and vision_config: pass a "
                         "Qwen2-VL, Qwen2.5-VL or Qwen3-VL model")
    merge = vision.spatial_merge_size
    dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
    param = next(tower.parameters())
    gen = torch.Generator().manual_seed(seed)

    def step(patches):
        sides = [math.isqrt(p) for p in patches]  # square grids, sides multiples of merge
        grid = torch.tensor([[1, s, s] for s in sides])
        pixels = torch.randn(int(grid.prod(dim=1).sum()), dim, generator=gen).to(param.device, param.dtype)
        out = tower(pixels, grid_thw=grid.to(param.device))
        hidden = out.pooler_output if hasattr(out, "pooler_output") else out
        hidden = hidden[0] if isinstance(hidden, (tuple, list)) else hidden
        hidden.float().sum().backward()
        tower.zero_grad(set_to_none=True)

    return step, merge


def calibrate_vision_cost(model, max_patches: int = 4096, *, repeats: int = 3, warmup: int = 1,
                          synchronize=None, clock=None) -> CostFit:
    """Measure the vision tower's cost per image on your model: time images of varied size
    (alone and several together) through ``model.model.visual``, forward and backward, and
    fit ``c1 * p + c2 * p**2 + c`` to them over their patches ``p`` (as
    :func:`calibrate_cost` fits a row). Pass the pair as the ``cost`` of
    :func:`packlib.vision_cost`; ``calibrate_cost`` on the same model gives the language
    model's ``(a, b)`` in the same unit (seconds).

    Parameters
    ----------
    model : torch.nn.Module
        A Qwen2-VL, Qwen2.5-VL or Qwen3-VL model (its device and dtype are used).
    max_patches : int, default 4096
        The largest image timed, in patches (``t * h * w``; 4 patches make a token).
    repeats, warmup : int
        Timed runs per image set (the best counts) and untimed runs first.
    synchronize : callable, optional
        Called before each clock reading (default: CUDA's while CUDA is in use).
    clock : callable, optional
        Seconds (default ``time.perf_counter``).

    Returns
    -------
    CostFit
        ``(c1, c2)`` as ``(a, b)``, with the fixed cost ``c`` and the timings (``rows``:
        the patch counts of each timed set).

    Raises
    ------
    ValueError
        A model without a vision tower, or times that do not grow with the patches.
    """
    step, merge = _tower_step(model, 0)
    top = as_positive_int(max_patches, "max_patches")
    ks = sorted({max(1, k) for k in np.linspace(1, max(1, math.isqrt(top) // merge), 6).astype(int).tolist()})
    sizes = [(merge * k) ** 2 for k in ks]  # square grids: exactly p patches each
    half = (merge * max(1, ks[-1] // 2)) ** 2
    rows = [[p] for p in sizes] + [[sizes[0]] * 4, [sizes[len(sizes) // 2]] * 2, [half] * 4]
    return calibrate_cost(step, max(sum(r) for r in rows), rows=rows, repeats=repeats, warmup=warmup,
                          synchronize=synchronize, clock=clock)
