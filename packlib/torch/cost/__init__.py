"""Cost models measured on the model: :func:`calibrate_cost` (a packed row's time from its
lengths), :func:`calibration_rows`, :func:`calibrate_vision_cost` and :func:`image_grid_thw`
(the vision tower's cost per image).

>>> from packlib.torch.cost import image_grid_thw
>>> image_grid_thw([224], [224]).tolist()
[[1, 16, 16]]
"""
from __future__ import annotations

from ._calibrate import CostFit, calibrate_cost, calibration_rows
from ._vision_plan import calibrate_vision_cost, image_grid_thw

__all__ = ["CostFit", "calibrate_cost", "calibration_rows", "calibrate_vision_cost", "image_grid_thw"]
